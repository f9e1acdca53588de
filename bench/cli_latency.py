"""`search query` with a server running, against `search query --local`, side by side.

    .venv/bin/python bench/cli_latency.py [--config config.yaml] [--rounds 5] [--json-out PATH]

A fresh CLI process per call, as a user runs it. The shipped config is copied with a free
port and its trace store in a temporary directory, and served by a real `search serve`;
rounds alternate which side runs first. Target: at most 0.3 s to the printed answer when
the server answers (the client imports no torch, starlette or numpy).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402
from bench.common import emit, free_port, median, order, run_search  # noqa: E402

TARGET_S = 0.3
QUERY = "who wrote romeo and juliet"


def timed(args: list[str]) -> float:
    return run_search(args, timeout_s=300)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--json-out", help="also write the figures, dated, here (bench/results/cli_latency.json)"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        data = yaml.safe_load(Path(args.config).read_text(encoding="utf-8"))
        port = free_port()
        data.setdefault("server", {})["port"] = port
        data.setdefault("trace", {})["path"] = str(Path(tmp) / "traces.db")
        config = Path(tmp) / "config.yaml"
        config.write_text(yaml.safe_dump(data), encoding="utf-8")
        server = subprocess.Popen(
            [sys.executable, "-m", "search", "serve", "--config", str(config)],
            cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit("search serve did not start") from None
                    time.sleep(0.2)
            times: dict[str, list[float]] = {"server": [], "local": []}
            argv_of = {
                "server": ["query", QUERY, "--json", "--config", str(config)],
                "local": ["query", QUERY, "--json", "--local", "--config", str(config)],
            }
            timed(argv_of["server"])  # the server's first request warms its caches
            for round_index in range(args.rounds):
                for side in order(round_index, ("server", "local")):
                    times[side].append(timed(argv_of[side]))
        finally:
            server.terminate()
            server.wait(timeout=30)
    server_s, local_s = median(times["server"]), median(times["local"])
    print(
        f"search query, a server running: {server_s:.2f} s (median of {args.rounds}; "
        f"target <= {TARGET_S:g} s)"
    )
    print(f"search query --local:           {local_s:.2f} s")
    print(f"ratio local / server:           {local_s / server_s:.1f}x")
    emit(
        "cli_latency",
        server_s=server_s,
        local_s=local_s,
        ratio=local_s / server_s,
        target_s=TARGET_S,
        passed=server_s <= TARGET_S,
    )
    if args.json_out:
        figures = {
            "rounds": args.rounds,
            "server_s": server_s,
            "local_s": local_s,
            "target_s": TARGET_S,
        }
        results.write(args.json_out, "cli_latency", "python bench/cli_latency.py", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
