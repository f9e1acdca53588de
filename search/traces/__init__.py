"""Traces: the stored record of each request, and everything that reads it back."""
