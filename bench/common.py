"""Small helpers shared by the benches: statistics, RSS, configs and the result line.

Every bench prints readable lines and, last, one `BENCH_JSON {...}` line that
`bench/run_all.py` collects into the results table. Rounds are interleaved (A, B, then
B, A) and summarised by medians, so a shared machine's drifting load hits both sides alike.
"""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

JSON_PREFIX = "BENCH_JSON "


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_search(args: list[str], timeout_s: float) -> tuple[float, str]:
    """Wall time of one `search ...` process (offline, from the repository) and its
    stdout; a failed run ends the bench with its stderr."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "search", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"search {' '.join(args[:2])} failed:\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def env_int(name: str, default: int) -> int:
    """A size knob from the environment (BENCH_SCALE multiplies every default)."""
    if name in os.environ:
        return max(1, int(os.environ[name]))
    scale = float(os.environ.get("BENCH_SCALE", "1"))
    return max(1, round(default * scale))


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of `samples`."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def order(round_index: int, names: tuple[str, str]) -> tuple[str, str]:
    """A, B on even rounds and B, A on odd ones, so neither side always runs first."""
    return names if round_index % 2 == 0 else (names[1], names[0])


def rss_mb() -> float:
    """This process's resident set size, in MiB (Linux /proc)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


def emit(bench: str, **result: Any) -> None:
    """The machine-readable last line of a bench."""
    print(JSON_PREFIX + json.dumps({"bench": bench, **result}, default=float), flush=True)


def scripted_config(
    sources: dict[str, dict[str, Any]],
    keywords: dict[str, list[str]] | None = None,
    *,
    trace: dict[str, Any] | None = None,
    **routing: Any,
) -> Any:
    """A config over the test suite's scripted sources (the router's cost, not a backend's)."""
    from search.config import parse_config
    from tests.support import scripted

    scripted.register()
    return parse_config(
        {
            "routing": {
                "default_source": next(iter(sources)),
                "shipped_routes": False,  # only these rules: the router's cost, not the data's
                "keywords": keywords or {},
                "semantic": {"enabled": False},
                **routing,
            },
            "sources": {name: {"type": "scripted", **entry} for name, entry in sources.items()},
            "trace": trace or {"enabled": False},
        }
    )


def count_instructions(script: Path, sides: Sequence[str], n: int) -> dict[str, float] | None:
    """Instructions per request of each side of `script`, counted by valgrind's callgrind.

    `script --counted-side SIDE N` must warm up, then run its N requests inside
    `operator.call(...)`: only instructions executed within that call are collected, so
    start-up and warm-up don't count. Instruction counts don't move with the load of this
    shared machine, which timings do by several percent. The sides run at once, each with
    PYTHONHASHSEED=0. None without valgrind or with BENCH_INSTRUCTIONS=0.
    """
    import re
    import shutil
    import subprocess

    if os.environ.get("BENCH_INSTRUCTIONS", "1") == "0" or shutil.which("valgrind") is None:
        return None
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    procs = {
        side: subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--collect-atstart=no",
                "--toggle-collect=_operator_call",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                str(script),
                "--counted-side",
                side,
                str(n),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for side in sides
    }
    counts: dict[str, float] = {}
    for side, proc in procs.items():
        _, err = proc.communicate(timeout=1800)
        found = re.search(r"Collected : (\d+)", err)
        if proc.returncode != 0 or found is None:
            raise RuntimeError(f"callgrind run ({side}) failed: {err[-2000:]}")
        counts[side] = int(found.group(1)) / n
    return counts


def wilson(right: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a share `right`/`total` (95% by default): how far a
    figure from a few hundred rows may be from what the same language at large would
    give. Unlike the plain ±z·sqrt(p(1-p)/n) it stays within 0..1 near 0 and 1."""
    if total <= 0:
        return 0.0, 1.0
    share = right / total
    spread = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total))
    centre = share + z * z / (2 * total)
    scale = 1 + z * z / total
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)
