"""Run every benchmark, each in its own process, and print the results table.

    .venv/bin/python bench/run_all.py [NAME ...] [--json PATH] [--json-out PATH]   (or: make bench)

Each bench prints its own lines (shown as it finishes) and a machine-readable last line;
this script collects them into one Markdown table: every row's measured ratio beside its
target, then the extra figures. NAMEs pick a subset (e.g. `throughput memory`).
`BENCH_SCALE=0.5` halves every bench's rounds (a quicker, noisier run); single knobs are
in each bench's docstring. The last line says how long the whole run took.
`--json-out bench/results/cheap_path.json` writes the run as a dated results file, from
which `bench/figures.py` renders the README's performance table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import results as bench_results  # noqa: E402
from bench.common import JSON_PREFIX  # noqa: E402


def scaled(default: int) -> str:
    return str(max(1, round(default * float(os.environ.get("BENCH_SCALE", "1")))))


# name -> (script, extra environment). Ordered cheap and in-process first.
BENCHES: dict[str, tuple[str, dict[str, str]]] = {
    "event_vs_otel": ("event_vs_otel.py", {}),
    "recording_overhead": ("recording_overhead.py", {"BENCH_ROUNDS": scaled(121)}),
    "trace_overhead": (
        "trace_overhead.py",
        {"BENCH_ROUNDS": scaled(40), "BENCH_BURST": scaled(10_000)},
    ),
    "concurrency": ("concurrency.py", {}),
    "throughput": ("throughput.py", {}),
    "throughput_store_off": ("throughput.py", {"BENCH_TP_TRACE": "0"}),
    "cli_latency": ("cli_latency.py", {}),
    "profile_request": ("profile_request.py", {}),
    "scaling": ("scaling.py", {}),
    "memory": ("memory.py", {}),
    "llm_overhead": ("llm_overhead.py", {}),
    "semantic_stage": ("semantic_stage.py", {}),
    "route_batch": ("route_batch.py", {}),
}


def parse_recording(stdout: str) -> dict[str, Any]:
    """recording_overhead.py prints text only; read its figures back."""
    found = re.search(r"recording overhead: ([+-]?[\d.]+)% .*ratio ([\d.]+)", stdout)
    real = re.search(r"real recorder:\s+([\d.]+) us", stdout)
    null = re.search(r"no-op recorder:\s+([\d.]+) us", stdout)
    if not (found and real and null):
        return {}
    return {
        "overhead_pct": float(found.group(1)),
        "ratio": float(found.group(2)),
        "real_us": float(real.group(1)),
        "null_us": float(null.group(1)),
    }


def collect(name: str, stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(JSON_PREFIX):
            return dict(json.loads(line[len(JSON_PREFIX) :]))
        if line.startswith("{") and '"bench"' in line:
            return dict(json.loads(line))
    if name == "recording_overhead":
        return parse_recording(stdout)
    return {}


# Arguments a bench takes on its command line rather than from the environment.
ARGS: dict[str, list[str]] = {"cli_latency": ["--rounds", scaled(5)]}


def run(name: str) -> tuple[dict[str, Any], float]:
    script, extra = BENCHES[name]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **extra}
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *ARGS.get(name, [])],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    elapsed = time.perf_counter() - started
    print(f"\n== {name} ({elapsed:.0f} s) ==")
    for line in proc.stdout.splitlines():
        if not line.startswith(JSON_PREFIX) and not line.startswith('{"bench"'):
            print("  " + line)
    if proc.returncode != 0:
        print(f"  FAILED (exit {proc.returncode}):\n" + proc.stderr[-3000:])
        return {}, elapsed
    return collect(name, proc.stdout), elapsed


def verdict(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "**missed**")


Row = tuple[str, str, str, str, str]


def _instructions(d: dict[str, Any]) -> str:
    pct = d.get("instructions_pct")
    return "" if pct is None else f"; in CPU instructions (callgrind) **{pct:+.2f}%**"


def _instructions_verdict(d: dict[str, Any], target_pct: float) -> str:
    pct = d.get("instructions_pct")
    return "" if pct is None else f" (instructions: {verdict(pct < target_pct)})"


def _server_cpu(d: dict[str, Any]) -> str:
    """The server process's CPU per request and, when counted, its instructions ratio."""
    out = ""
    cpu = d.get("server_cpu_us")
    if cpu:
        search, bare = (cpu[n]["user"] + cpu[n]["system"] for n in ("search", "bare"))
        out += f"; server CPU per request {search:.0f} µs vs {bare:.0f} µs"
    if d.get("instructions_ratio") is not None:
        out += (
            f"; in the server's CPU instructions (callgrind) **{d['instructions_ratio']:.2f}×**"
            f" ({d['instructions']['search']:,.0f} vs {d['instructions']['bare']:,.0f})"
        )
    return out


def main_rows(r: dict[str, dict[str, Any]]) -> list[Row]:
    rows: list[Row] = []

    def add(name: str, build: Callable[[dict[str, Any]], Row]) -> None:
        if r.get(name):
            rows.append(build(r[name]))

    add(
        "event_vs_otel",
        lambda d: (
            "cost of one recorded event",
            f"OpenTelemetry SDK `span.add_event` on a recording span: {d['otel_ns']:.0f} ns",
            (
                f"{d['ours_ns']:.0f} ns: **{d['ratio']:.2f}× cheaper** "
                f"({d['ratio_current']:.1f}× vs `get_current_span().add_event`)"
                + (
                    f"; compiled (the Python reference: {d['python_ns']:.0f} ns, over a "
                    f"{d['call_floor_ns']:.0f} ns floor of calling an empty Python function)"
                    if d.get("compiled")
                    else f"; the call alone, to an empty function: {d['call_floor_ns']:.0f} ns"
                    if "call_floor_ns" in d
                    else ""
                )
            ),
            "≥ 20× cheaper",
            verdict(d["ratio"] >= 20),
        ),
    )
    for name, store, target in (("throughput", "on", 0.85), ("throughput_store_off", "off", 0.9)):
        add(
            name,
            lambda d, store=store, target=target: (
                (
                    f"cache-hit `/search` req/s, trace store {store}, uvicorn on loopback "
                    f"({d['tool']}, {d['connections']} connections)"
                ),
                f"bare Starlette JSON endpoint, same server: {d['bare_rps']:.0f} req/s",
                f"{d['search_rps']:.0f} req/s: **{d['ratio']:.2f}×** of it"
                + ("" if d["tool"] == "wrk" else " (httpx fallback generator: no verdict)")
                + _server_cpu(d),
                f"≥ {target:g}×",
                verdict(d["ratio"] >= target if d["tool"] == "wrk" else None)
                + (
                    ""
                    if d.get("instructions_ratio") is None
                    else f" (instructions: {verdict(d['instructions_ratio'] >= target)})"
                ),
            ),
        )
    add(
        "concurrency",
        lambda d: (
            "3-part decomposed query, sources 200 ms each",
            f"the slowest part alone: {d['slowest_ms']:.1f} ms",
            (
                f"{d['three_ms']:.1f} ms: **{d['ratio']:.3f}×** (one source for all 3: "
                f"{d['same_source_ratio']:.3f}×)"
            ),
            "≤ 1.3×",
            verdict(d["ratio"] <= 1.3),
        ),
    )
    add(
        "recording_overhead",
        lambda d: (
            "cache-hit `/search` with the real recorder",
            f"same request, no-op recorder: {d['null_us']:.0f} µs",
            f"{d['real_us']:.0f} µs: **{d['overhead_pct']:+.2f}%** (paired rounds)"
            + _instructions(d),
            "< +1%",
            verdict(d["overhead_pct"] < 1) + _instructions_verdict(d, 1),
        ),
    )
    add(
        "trace_overhead",
        lambda d: (
            "cache-hit `/search` with the SQLite trace store on",
            f"store off: {d['median_us']['off']:.0f} µs",
            (
                f"{d['median_us']['on']:.0f} µs: **{(d['paired_ratio'] - 1) * 100:+.2f}%** "
                f"(paired rounds)" + _instructions(d)
            ),
            "< +2%",
            verdict(d["paired_ratio"] < 1.02) + _instructions_verdict(d, 2),
        ),
    )
    add(
        "cli_latency",
        lambda d: (
            "`search query` with a server running, a fresh process to the printed answer",
            f"`search query --local` (in-process, model load): {d['local_s']:.1f} s",
            f"**{d['server_s']:.2f} s**",
            f"≤ {d['target_s']:g} s",
            verdict(d["server_s"] <= d["target_s"]),
        ),
    )
    add(
        "scaling",
        lambda d: (
            "cache-hit latency, 1 → 8 parts (explain on)",
            f"1 part: {d['parts']['1']['cache_hit_us']:.0f} µs",
            (
                f"8 parts: {d['parts']['8']['cache_hit_us']:.0f} µs: "
                f"**{d['per_part_us']:.0f} µs per part**"
            ),
            f"per part ≤ {d['per_part_target_us']:g} µs",
            verdict(d["per_part_us"] <= d["per_part_target_us"]),
        ),
    )
    add(
        "memory",
        lambda d: (
            f"RSS after {d['requests']:,} requests",
            f"after {d['warmup']:,} warm-up requests: {d['warm_mib']:.1f} MiB",
            f"{d['final_mib']:.1f} MiB: **{d['ratio']:.3f}×**",
            "≤ 1.10× (soak criterion)",
            verdict(d["ratio"] <= 1.10),
        ),
    )
    add(
        "semantic_stage",
        lambda d: (
            f"semantic stage, {d['calls']} unseen eval utterances",
            "—",
            f"p50 **{d['p50_ms']:.1f} ms**, p99 {d['p99_ms']:.1f} ms",
            "p50 ≤ 25 ms",
            verdict(d["p50_ms"] <= 25),
        ),
    )
    add(
        "route_batch",
        lambda d: (
            f"`search route --input`, {d['queries']:,} eval utterances, a fresh process",
            f"one query alone (start-up, model load): {d['load_s']:.1f} s",
            f"**{d['batch_s']:.1f} s** (routing ~{d['routing_ms_per_query']:.1f} ms/query)",
            "< 60 s incl. model load",
            verdict(d["batch_s"] < 60),
        ),
    )
    add(
        "scaling",
        lambda d: (
            "decision-cache lookup, 10,000 / 100,000 entries",
            "—",
            (
                f"{d['decisions']['10000']['lookup_hit_ns'] / 1000:.1f} µs / "
                f"{d['decisions']['100000']['lookup_hit_ns'] / 1000:.1f} µs"
            ),
            "≤ 0.1 ms",
            verdict(max(d["decisions"][s]["lookup_hit_ns"] for s in ("10000", "100000")) <= 1e5),
        ),
    )
    add(
        "llm_overhead",
        lambda d: (
            "LLM stage minus the chat server's own time",
            (
                f"a bare httpx POST minus server: {d['raw']['overhead_p50_us'] / 1000:.2f} ms "
                f"(raw socket {d['socket']['overhead_p50_us'] / 1000:.2f} ms)"
            ),
            (
                f"p50 **{d['stage']['overhead_p50_us'] / 1000:.2f} ms**, p99 "
                f"{d['stage']['overhead_p99_us'] / 1000:.2f} ms; the stage's own code "
                f"~{d['stage_own_us'] / 1000:.2f} ms"
            ),
            "—",
            "—",
        ),
    )
    return rows


def growth_tables(r: dict[str, dict[str, Any]]) -> list[str]:
    out: list[str] = []
    profile = r.get("profile_request")
    if profile:
        out += [
            "",
            (
                f"Where a cache-hit request's {profile['wall_us']:.0f} µs go "
                "(`bench/profile_request.py`, cProfile shares scaled to the unprofiled time):"
            ),
            "",
            "| component | µs/request |",
            "|---|---:|",
        ]
        out += [f"| {name} | {us:.1f} |" for name, us in profile["components_us"].items()]
    scaling = r.get("scaling")
    if not scaling:
        return out
    out += [
        "",
        "Growth from 1 to 8 parts (each part keyword-routed to its own source):",
        "",
        "| parts | cache-hit request | events/request | 200 ms sources | events/request |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n, row in scaling["parts"].items():
        out.append(
            f"| {n} | {row['cache_hit_us']:.0f} µs | {row['events_cache_hit']} | "
            f"{row['slow_ms']:.1f} ms | {row['events_slow']} |"
        )
    out += [
        "",
        "Growth from 1 to 100,000 cached routing decisions:",
        "",
        (
            "| decisions | cache memory | per entry | lookup (hit) | lookup (miss) | "
            "request via `intent_cached` | vs 1 entry |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, row in scaling["decisions"].items():
        memory = row["memory_bytes"]
        shown = f"{memory / 1024:.1f} KiB" if memory < 1 << 20 else f"{memory / (1 << 20):.1f} MiB"
        out.append(
            f"| {int(size):,} | {shown} | {memory / int(size):.0f} B | "
            f"{row['lookup_hit_ns'] / 1000:.1f} µs | {row['lookup_miss_ns'] / 1000:.1f} µs"
            f" | {row['request_us']:.0f} µs | ×{row['ratio']:.3f} |"
        )
    return out


def machine() -> str:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return (
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {os.cpu_count()} cores ({cpu}); "
        f"Python {platform.python_version()}; load average {load}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benches to run (default: all): {', '.join(BENCHES)}",
    )
    parser.add_argument("--json", help="also write every bench's figures to this file")
    parser.add_argument(
        "--json-out", help="also write the run as a dated results file (bench/results.py)"
    )
    args = parser.parse_args()
    names = args.names or list(BENCHES)
    unknown = [name for name in names if name not in BENCHES]
    if unknown:
        parser.error(f"unknown bench {', '.join(unknown)} (known: {', '.join(BENCHES)})")
    start_machine = machine()
    print(f"start: {start_machine}")
    results: dict[str, dict[str, Any]] = {}
    took: dict[str, float] = {}
    for name in names:
        results[name], took[name] = run(name)
    end_machine = machine()
    end_load = end_machine.rsplit("average ", 1)[1]
    lines = [
        "",
        f"Run of {start_machine}",
        f"(load average at the end: {end_load}; took {sum(took.values()):.0f} s)",
        "",
        "| measure | compared with | measured | target | verdict |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in main_rows(results)]
    lines += growth_tables(results)
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": start_machine, "results": results}, indent=1, default=float)
        )
    failed = [name for name in names if not results.get(name)]
    if args.json_out and not failed:
        bench_results.write(
            args.json_out,
            "run_all",
            "python bench/run_all.py " + " ".join(names),
            {"machine": start_machine, "end_load": end_load, "results": results},
        )
    if failed:
        print(f"\nbenches that failed to report: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
