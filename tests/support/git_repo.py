"""A real git repository with given files, for tests of scripts that read pinned commits."""

from __future__ import annotations

import subprocess
from pathlib import Path


def commit_files(work: Path, files: dict[str, str]) -> str:
    """`files` (path: text) committed in a new repository at `work`; the commit's id."""
    for name, body in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(body, encoding="utf-8")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "data"], check=True)
    found = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, check=True)
    return found.stdout.decode().strip()
