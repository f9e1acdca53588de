"""A second host on this machine: a network namespace joined to it by a veth pair.

For tests of what a client that is not on the server's machine may do. Both ends live
inside this sandbox (addresses of a /30 the test makes and removes); nothing leaves it.
Needs root and iproute2 (`ip`), as CI has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.require import missing_service


@dataclass(frozen=True, slots=True)
class OtherHost:
    namespace: str
    server_ip: str  # this machine's end
    client_ip: str  # the namespace's end

    def python(self, code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run `code` with the suite's Python inside the namespace (the other host)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.namespace, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "NO_PROXY": "*", "no_proxy": "*"},
        )


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextmanager
def other_host() -> Iterator[OtherHost]:
    if shutil.which("ip") is None or os.geteuid() != 0:
        missing_service("a network namespace", "needs root and iproute2's `ip`")
    tag = f"{os.getpid() % 10000}"
    namespace, here, there = f"srns{tag}", f"srv{tag}a", f"srv{tag}b"
    octet = os.getpid() % 250 + 2
    server_ip, client_ip = f"10.213.{octet}.1", f"10.213.{octet}.2"
    try:
        _ip("netns", "add", namespace)
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        _ip("link", "set", there, "netns", namespace)
        _ip("addr", "add", f"{server_ip}/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("netns", "exec", namespace, "ip", "addr", "add", f"{client_ip}/30", "dev", there)
        _ip("netns", "exec", namespace, "ip", "link", "set", there, "up")
        _ip("netns", "exec", namespace, "ip", "link", "set", "lo", "up")
    except subprocess.CalledProcessError as exc:
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
        missing_service("a network namespace", exc.stderr.decode(errors="replace").strip())
    try:
        yield OtherHost(namespace, server_ip, client_ip)
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
