"""A real `redis-server` on loopback for the scale-out tests, stopped by its PID.

The Debian package `redis-server` provides the binary (`.ci/run` installs it). Each
server gets a free port, no persistence (`--save ''`, `--appendonly no`) and its own
working directory, so nothing is left behind. `stop()` ends it by PID; `pause()` /
`resume()` (SIGSTOP / SIGCONT) make a Redis that accepts connections but never answers,
the way a stalled server looks to a client.

    with RedisServer(password="s3cret") as redis:
        ... cache.redis_url = redis.url ...
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

import redis

from tests.support.ports import free_port

BINARY = "redis-server"
MISSING_REASON = "redis-server is not installed (Debian package redis-server; .ci/run installs it)"


def available() -> bool:
    return shutil.which(BINARY) is not None


class RedisServer:
    def __init__(self, password: str | None = None) -> None:
        self.password = password
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def start(self) -> None:
        binary = shutil.which(BINARY)
        if binary is None:
            raise RuntimeError(MISSING_REASON)
        self._dir = tempfile.TemporaryDirectory(prefix="redis-test-")
        self.port = free_port()
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            self._dir.name,
            "--logfile",
            str(Path(self._dir.name) / "redis.log"),
        ]
        if self.password:
            args += ["--requirepass", self.password]
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not self.ping():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)

    def client(self, timeout_s: float = 1.0) -> redis.Redis:
        """A plain synchronous client (for assertions from the test itself)."""
        return redis.Redis.from_url(
            self.url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    def ping(self) -> bool:
        try:
            with self.client(0.5) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def keys(self, pattern: str = "*") -> list[str]:
        """Key names matching `pattern` (small test databases only)."""
        with self.client() as client:
            return sorted(k.decode() for k in client.keys(pattern))

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        """End the server by its PID (also when paused), and remove its directory."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGCONT)
                self.process.terminate()
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
