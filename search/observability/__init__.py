"""What the running service tells operators: metrics, telemetry, health."""
