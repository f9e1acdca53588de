"""The explanation chain: its vocabulary of steps and the per-request event log."""
