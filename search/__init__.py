"""Explainable search router: HTTP API, CLI and trace store."""

__version__ = "0.1.0"
