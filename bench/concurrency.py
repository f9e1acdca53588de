"""Do the parts of a decomposed query really run at the same time?

A 3-part query ("... and also ... and also ...") whose parts go to three sources that each
take 200 ms, against its slowest part asked alone, side by side in one run (interleaved
rounds, medians). Sources are the test suite's scripted kind (`delay_s: 0.2`, an
`asyncio.sleep`, so a source's wait costs no CPU) with the result cache off for them
(`cache_ttl_s: 0`), so every request really calls all three. The request goes through
`Service.search`, the same call the HTTP route and the CLI make.

Also measured: the same three parts sent to ONE source (its `max_concurrency` of 8 must
not serialise them). Target: 3 parts <= 1.3x the slowest part alone.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit, env_int, median, order, scripted_config  # noqa: E402
from search.service import Service  # noqa: E402

ROUNDS = env_int("BENCH_CONCURRENCY_ROUNDS", 15)
DELAY_S = 0.2
TARGET = 1.3
THREE = "what is the weather in oslo and also what is the latest news and also turn on the lights"
SLOWEST = "what is the weather in oslo"
SAME_SOURCE = "weather in oslo and also weather in paris and also weather in rome"


def build() -> Service:
    slow = {"delay_s": DELAY_S, "cache_ttl_s": 0}
    config = scripted_config(
        {"kiwix": {}, "forecast": slow, "web": slow, "ha": slow},
        {"forecast": ["weather"], "web": ["news"], "ha": ["lights"]},
    )
    return Service(config)


async def timed(service: Service, query: str, parts: int) -> float:
    start = time.perf_counter()
    outcome = await service.search(query)
    elapsed = (time.perf_counter() - start) * 1000
    statuses = [r["status"] for r in outcome.body["results"]]
    invoked = [e for e in outcome.chain if e["step"] == "source_invoked"]
    assert statuses == ["ok"] * parts and len(invoked) == parts, (statuses, outcome.chain)
    return elapsed


async def main() -> None:
    service = build()
    await service.start()
    queries = {"three": (THREE, 3), "slowest": (SLOWEST, 1), "same_source": (SAME_SOURCE, 3)}
    for query, parts in queries.values():  # warm up, and check the routes
        await timed(service, query, parts)
    samples: dict[str, list[float]] = {name: [] for name in queries}
    for r in range(ROUNDS):
        for name in (*order(r, ("three", "slowest")), "same_source"):
            samples[name].append(await timed(service, *queries[name]))
    await service.aclose()
    med = {name: median(values) for name, values in samples.items()}
    ratio = med["three"] / med["slowest"]
    same = med["same_source"] / med["slowest"]
    print(f"3-part query, three 200 ms sources: {med['three']:7.1f} ms (median of {ROUNDS})")
    print(f"slowest part alone:                 {med['slowest']:7.1f} ms")
    print(f"3 parts on one source:              {med['same_source']:7.1f} ms")
    print(
        f"ratio 3 parts / slowest alone: {ratio:.3f} (target <= {TARGET:g}); "
        f"same source: {same:.3f}; serial would be {3 * DELAY_S * 1000 / med['slowest']:.2f}"
    )
    emit(
        "concurrency",
        three_ms=med["three"],
        slowest_ms=med["slowest"],
        same_source_ms=med["same_source"],
        ratio=ratio,
        same_source_ratio=same,
        target=TARGET,
        passed=ratio <= TARGET,
        rounds=ROUNDS,
    )


if __name__ == "__main__":
    asyncio.run(main())
