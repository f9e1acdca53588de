"""Errors every surface reports the same way, in a module light enough for any client."""

from __future__ import annotations


class ConfigError(Exception):
    """config.yaml is unreadable or invalid; the message names the key."""
