"""Loading the model draws progress bars only where someone watches: a terminal.

The real bundled model is loaded in a fresh process (a process that already loaded it
would not draw them again), by the library call every command and the server use, with
stderr a file: transformers draws its "Loading weights" bar there unless told not to.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LOAD = "from routing.stages.embedder import load_embedder; load_embedder()"
BAR = b"Loading weights"


def load_with_stderr(stderr: int) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", LOAD], stdout=subprocess.PIPE, stderr=stderr, env=env, timeout=300
    )


def test_no_progress_bar_on_a_redirected_stderr(tmp_path: Path) -> None:
    with open(tmp_path / "stderr", "wb") as log:
        done = load_with_stderr(log.fileno())
    written = (tmp_path / "stderr").read_bytes()
    assert done.returncode == 0, written
    assert BAR not in written and b"\r" not in written, written
