"""A real `search serve` process on a loopback port, for tests where something outside this
process (Home Assistant) must reach the router, or where the router must really go away.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0  # the shipped config loads the sentence model first


@dataclass
class RouterProcess:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        """SIGTERM by PID (then SIGKILL); afterwards nothing listens at `url`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@contextmanager
def serve(config_path: Path, port: int, log_path: Path) -> Iterator[RouterProcess]:
    """`search serve --config config_path` (listening on `port`), stopped on exit."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "search", "serve", "--config", str(config_path)],
            cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    router = RouterProcess(f"http://127.0.0.1:{port}", process, log_path)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"search serve exited with {process.returncode}:\n{router.log()}"
                )
            try:
                if (
                    httpx.get(f"{router.url}/healthz", timeout=1, trust_env=False).status_code
                    == 200
                ):
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"search serve did not start:\n{router.log()}")
            time.sleep(0.2)
        yield router
    finally:
        router.stop()
