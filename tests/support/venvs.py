"""Building the cached venv of a service the suite starts (Home Assistant, llama.cpp)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run_venv_script(
    script: Path, timeout_s: float, unavailable: type[Exception], what: str
) -> None:
    """Run `script` (it builds or reuses the venv); a failure raises `unavailable` with the
    script's last lines, so the test says why the service is missing."""
    try:
        done = subprocess.run(
            ["bash", str(script)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise unavailable(f"building the {what} venv failed: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise unavailable(f"scripts/{script.name} exited {done.returncode}:\n{tail}")
