"""Calling sources: the dispatcher, the control gate, fusion, circuit breakers."""
