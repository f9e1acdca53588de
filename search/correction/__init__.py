"""The correction loop: labels, `search fit`, `replay`, `check`."""
