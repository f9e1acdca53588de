"""What recording the explanation chain costs (issue: core).

Prints, measured side by side in one run (interleaved rounds, medians):
  1. the cost of one `record()` call into a live request log;
  2. a keyword-routed, result-cache-hit POST /search through the real ASGI app with the
     real recorder, against the same request with a no-op recorder (`NullRouteLog`).
  3. the same request counted in CPU instructions under valgrind's callgrind, real against
     no-op recorder: instruction counts do not depend on what else this shared machine is
     doing, so they settle what timings on 2 noisy cores leave within their noise. Each
     side runs in its own process, collecting only inside the timed loop
     (`bench.common.count_instructions`); skipped without valgrind or with
     BENCH_INSTRUCTIONS=0.
Target: recording adds under 1% to that request, in wall time and in instructions.
"""

from __future__ import annotations

import asyncio
import gc
import operator
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.asgi_call import post_json  # noqa: E402
from bench.common import count_instructions, emit  # noqa: E402
from routing.chain.events import NullRouteLog, RouteLog, record, route_log  # noqa: E402
from search.api.app import create_app, settle_heap  # noqa: E402
from search.config import parse_config  # noqa: E402
from search.service import Service  # noqa: E402
from tests.support import scripted  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "160"))
PER_ROUND = int(os.environ.get("BENCH_PER_ROUND", "100"))
COUNTED_REQUESTS = int(os.environ.get("BENCH_COUNTED_REQUESTS", "500"))


def event_cost_ns(rounds: int = 400, per_log: int = 100) -> tuple[float, float]:
    """ns per record() into a fresh request log (100 events, as a busy request might
    have), and with no log open (the floor: building the call's keyword arguments)."""
    live: list[float] = []
    for _ in range(rounds):
        with route_log(max_events=per_log + 10):
            start = time.perf_counter_ns()
            for i in range(per_log):
                record(
                    "source_invoked",
                    source="kiwix",
                    query="q",
                    elapsed_ms=1.0,
                    outcome="ok",
                    result_count=i,
                )
            live.append((time.perf_counter_ns() - start) / per_log)
    start = time.perf_counter_ns()
    for i in range(rounds * per_log):
        record(
            "source_invoked",
            source="kiwix",
            query="q",
            elapsed_ms=1.0,
            outcome="ok",
            result_count=i,
        )
    floor = (time.perf_counter_ns() - start) / (rounds * per_log)
    return statistics.median(live), floor


def make_app(recorder: type[RouteLog]):
    scripted.register()
    config = parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "keywords": {"forecast": ["weather"]},
                "semantic": {"enabled": False},
            },
            "sources": {"kiwix": {"type": "scripted"}, "forecast": {"type": "scripted"}},
            "trace": {"enabled": False},
        }
    )
    app = create_app(config, Service(config, recorder=recorder))
    # Consumers of the chain (the /metrics observer) have work only when there are events:
    # they are measured on their own, not charged to recording.
    app.state.service.observers.clear()
    return app


async def time_requests(app, n: int) -> float:
    body = {"query": "what is the weather today", "explain": False}
    start = time.perf_counter()
    for _ in range(n):
        status, _ = await post_json(app, "/search", body)
        assert status == 200
    return (time.perf_counter() - start) / n * 1e6


def run_counted_side(kind: str, n: int) -> None:
    """In a child under callgrind: warm up, then `n` requests inside `operator.call`."""
    app = make_app(RouteLog if kind == "real" else NullRouteLog)

    async def warm() -> None:
        await app.state.service.start()
        await time_requests(app, 200)

    asyncio.run(warm())
    settle_heap()  # as the server does at start-up (search.api.app)
    operator.call(asyncio.run, time_requests(app, n))


async def main() -> None:
    live, floor = event_cost_ns()
    print(f"one recorded event: {live:.0f} ns (record() outside a request: {floor:.0f} ns)")
    # Two pairs of apps, built in opposite orders: in an A/A test (both sides real) the app
    # built first ran 1-1.5% apart from the second, by where its objects landed in memory.
    # Alternating the pairs cancels that out of the comparison.
    first = (make_app(RouteLog), make_app(NullRouteLog))
    null_b = make_app(NullRouteLog)
    pairs = [first, (make_app(RouteLog), null_b)]
    for real, null in pairs:
        for app in (real, null):
            await app.state.service.start()
            await time_requests(app, 200)  # warm the cache and the code paths
    settle_heap()  # as the server does at start-up (search.api.app)
    real_us, null_us, paired = [], [], []
    for round_no in range(ROUNDS):
        gc.collect()  # each round starts from the same heap, whichever side ran before
        real, null = pairs[round_no % 2]
        # Alternate which side runs first, so drift in machine load hits both alike.
        if (round_no // 2) % 2:
            n_round = await time_requests(null, PER_ROUND)
            r_round = await time_requests(real, PER_ROUND)
        else:
            r_round = await time_requests(real, PER_ROUND)
            n_round = await time_requests(null, PER_ROUND)
        real_us.append(r_round)
        null_us.append(n_round)
        paired.append(r_round / n_round)
    r, n = statistics.median(real_us), statistics.median(null_us)
    ratio = statistics.median(paired)
    print(f"cache-hit /search, real recorder:  {r:8.1f} us/request (median of {ROUNDS} rounds)")
    print(f"cache-hit /search, no-op recorder: {n:8.1f} us/request")
    print(
        f"recording overhead: {(ratio - 1) * 100:+.2f}% (median of per-round paired ratios;"
        f" target < 1%)  ratio {ratio:.4f}"
    )
    result = {
        "overhead_pct": (ratio - 1) * 100,
        "ratio": ratio,
        "real_us": r,
        "null_us": n,
        "event_ns": live,
    }
    counts = count_instructions(Path(__file__), ("real", "null"), COUNTED_REQUESTS)
    if counts is None:
        print("instruction counts: skipped (no valgrind, or BENCH_INSTRUCTIONS=0)")
    else:
        share = counts["real"] / counts["null"] - 1
        print(
            f"instructions per request (callgrind, {COUNTED_REQUESTS} requests each):"
            f" real {counts['real']:,.0f}, no-op {counts['null']:,.0f};"
            f" recording adds {share * 100:+.2f}% (target < 1%)"
        )
        result.update(instructions=counts, instructions_pct=share * 100)
    emit("recording_overhead", **result)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--counted-side"]:
        run_counted_side(sys.argv[2], int(sys.argv[3]))
    else:
        asyncio.run(main())
