"""How the figures grow: from 1 to 8 parts, and from 1 to 100,000 cached routing decisions.

Parts (queries "alpha report; bravo report; ...", each part keyword-routed to its own
scripted source):
- a cache-hit request through the real ASGI app (every part answered by the result
  cache: the router's own cost) - microseconds per request and events per request;
- the same parts against sources that each take 200 ms (result cache off): milliseconds
  per request, which stays near 200 ms if the parts really run at the same time.
The part counts are interleaved within each round (rotating which goes first).

Decisions (`routing/stages/decision_cache.py`):
- the cache's own memory (tracemalloc) and lookup time (hits and misses) at 1, 10, 100,
  1,000, 10,000 and 100,000 entries;
- a whole request answered through `intent_cached` (then the result cache), with the
  service's decision cache holding N entries, against the same request on a service
  whose cache holds 1, interleaved: the ratio says whether a full cache slows requests.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.asgi_call import post_json  # noqa: E402
from bench.common import emit, env_int, median, order, scripted_config  # noqa: E402
from routing.stages.decision_cache import DecisionCache  # noqa: E402
from search.api.app import create_app  # noqa: E402
from search.service import Service  # noqa: E402

NAMES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
PARTS = range(1, len(NAMES) + 1)
FAST_ROUNDS = env_int("BENCH_SCALING_ROUNDS", 12)
FAST_PER_ROUND = env_int("BENCH_SCALING_PER_ROUND", 60)
SLOW_ROUNDS = env_int("BENCH_SCALING_SLOW_ROUNDS", 5)
SIZES = [1, 10, 100, 1_000, 10_000, 100_000]
LOOKUPS = env_int("BENCH_SCALING_LOOKUPS", 10_000)
CACHED_ROUNDS = env_int("BENCH_SCALING_CACHED_ROUNDS", 16)
CACHED_PER_ROUND = env_int("BENCH_SCALING_CACHED_PER_ROUND", 40)
PER_PART_TARGET_US = 60.0  # what each part past the first may add to a cache-hit request


def parts_query(n: int) -> str:
    return "; ".join(f"{name} report" for name in NAMES[:n])


def parts_app(delay_s: float) -> Any:
    entry: dict[str, Any] = {"delay_s": delay_s, "cache_ttl_s": 0} if delay_s else {}
    sources = {"kiwix": {}, **{name: dict(entry) for name in NAMES}}
    config = scripted_config(sources, {name: [name] for name in NAMES}, max_events=1000)
    return create_app(config, Service(config))


async def request(app: Any, query: str, parts: int) -> tuple[float, int]:
    """(microseconds, events in the chain) of one POST /search asking for the chain."""
    start = time.perf_counter_ns()
    status, body = await post_json(app, "/search", {"query": query, "explain": True})
    elapsed = (time.perf_counter_ns() - start) / 1000
    assert status == 200, body[:300]
    data = json.loads(body)
    assert [r["source"] for r in data["results"]] == NAMES[:parts], data["results"]
    return elapsed, len(data["explanation"])


async def grow_parts() -> dict[int, dict[str, float]]:
    fast, slow = parts_app(0.0), parts_app(0.2)
    for app in (fast, slow):
        await app.state.service.start()
    for n in PARTS:
        for _ in range(20):
            await request(fast, parts_query(n), n)  # fills the result cache, warms up
    fast_us: dict[int, list[float]] = {n: [] for n in PARTS}
    events: dict[int, int] = {}
    for r in range(FAST_ROUNDS):
        for n in [*PARTS][r % 8 :] + [*PARTS][: r % 8]:
            round_us = []
            for _ in range(FAST_PER_ROUND):
                elapsed, count = await request(fast, parts_query(n), n)
                round_us.append(elapsed)
                events[n] = count
            fast_us[n].append(median(round_us))
    slow_ms: dict[int, list[float]] = {n: [] for n in PARTS}
    slow_events: dict[int, int] = {}
    for r in range(SLOW_ROUNDS):
        for n in [*PARTS][r % 8 :] + [*PARTS][: r % 8]:
            elapsed, count = await request(slow, parts_query(n), n)
            slow_ms[n].append(elapsed / 1000)
            slow_events[n] = count
    for app in (fast, slow):
        await app.state.service.aclose()
    return {
        n: {
            "cache_hit_us": median(fast_us[n]),
            "events_cache_hit": events[n],
            "slow_ms": median(slow_ms[n]),
            "events_slow": slow_events[n],
        }
        for n in PARTS
    }


def decision_key(i: int) -> str:
    return f"What is the weather like in city number {i}?"


def cache_memory() -> dict[int, float]:
    """Bytes the decision cache holds at each size (tracemalloc, one incremental fill)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    cache = DecisionCache(max(SIZES), 3600)
    out: dict[int, float] = {}
    filled = 0
    for size in SIZES:
        for i in range(filled, size):
            cache.put(decision_key(i), "forecast", "intent_llm")
        filled = size
        out[size] = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del cache
    return out


def cache_lookups() -> dict[int, dict[str, float]]:
    """Mean ns per lookup, hits and misses, at each size (the caller's raw query form)."""
    cache = DecisionCache(max(SIZES), 3600)
    out: dict[int, dict[str, float]] = {}
    filled = 0
    for size in SIZES:
        for i in range(filled, size):
            cache.put(decision_key(i), "forecast", "intent_llm")
        filled = size
        hits = [decision_key((i * 7919) % size) for i in range(LOOKUPS)]
        misses = [decision_key(size + i) for i in range(LOOKUPS)]
        timings: dict[str, list[float]] = {"hit": [], "miss": []}
        for _ in range(3):
            for kind, keys in (("hit", hits), ("miss", misses)):
                start = time.perf_counter_ns()
                for key in keys:
                    cache.get(key)
                timings[kind].append((time.perf_counter_ns() - start) / len(keys))
        assert cache.get(hits[0]) is not None and cache.get(misses[0]) is None
        out[size] = {kind: median(values) for kind, values in timings.items()}
    return out


def decision_app(max_entries: int) -> Any:
    config = scripted_config({"kiwix": {}, "web": {}}, {}, decision_cache_max_entries=max_entries)
    return create_app(config, Service(config))


def service_cache(app: Any) -> DecisionCache:
    stage = app.state.service.resolver.stage("intent_cached")
    assert stage is not None, "no decision-cache stage"
    return stage.cache


async def cached_requests(app: Any, query: str, n: int) -> float:
    """Median microseconds of a request routed by the decision cache."""
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        status, body = await post_json(app, "/search", {"query": query})
        out.append((time.perf_counter_ns() - start) / 1000)
        assert status == 200 and b'"source":"web"' in body, body[:300]
    return median(out)


async def grow_decisions() -> dict[int, dict[str, float]]:
    big, small = decision_app(max(SIZES)), decision_app(max(SIZES))
    query = "xyzzy plugh the hollow voice"
    for app in (big, small):
        await app.state.service.start()
        service_cache(app).put(query, "web", "intent_llm")
        outcome = await app.state.service.search(query, explain=True)
        assert any(e["step"] == "intent_cached" for e in outcome.chain), outcome.chain
        await cached_requests(app, query, 100)
    big_cache = service_cache(big)
    out: dict[int, dict[str, float]] = {}
    filled = 1
    for size in SIZES:
        for i in range(filled, size):
            big_cache.put(decision_key(i), "forecast", "intent_llm")
        filled = max(filled, size)
        samples: dict[str, list[float]] = {"big": [], "small": []}
        paired = []  # per round big/small: robust to the load drifting between rounds
        for r in range(CACHED_ROUNDS):
            for name in order(r, ("big", "small")):
                app = big if name == "big" else small
                samples[name].append(await cached_requests(app, query, CACHED_PER_ROUND))
            paired.append(samples["big"][-1] / samples["small"][-1])
        out[size] = {
            "request_us": median(samples["big"]),
            "reference_us": median(samples["small"]),
            "ratio": median(paired),
        }
    for app in (big, small):
        await app.state.service.aclose()
    return out


async def main() -> None:
    parts = await grow_parts()
    print("parts | cache-hit request | events | 200 ms sources | events")
    for n, row in parts.items():
        print(
            f"{n:5d} | {row['cache_hit_us']:12.0f} us   | {row['events_cache_hit']:6d} | "
            f"{row['slow_ms']:11.1f} ms | {row['events_slow']:6d}"
        )
    one, eight = parts[1], parts[8]
    print(
        f"1 -> 8 parts: cache-hit latency x{eight['cache_hit_us'] / one['cache_hit_us']:.2f}, "
        f"200 ms-source latency x{eight['slow_ms'] / one['slow_ms']:.3f}, events "
        f"{one['events_slow']} -> {eight['events_slow']}"
    )
    per_part = (eight["cache_hit_us"] - one["cache_hit_us"]) / 7
    print(
        f"each part past the first adds {per_part:.0f} us to a cache-hit request "
        f"(target <= {PER_PART_TARGET_US:g} us)"
    )
    memory = cache_memory()
    lookups = cache_lookups()
    decisions = await grow_decisions()
    print(
        "\ncached decisions | memory      | per entry | lookup hit | miss    | request "
        "(intent_cached) vs 1 entry, paired ratio"
    )
    for size in SIZES:
        d = decisions[size]
        print(
            f"{size:16,d} | {memory[size] / 1024:8.1f} KiB | {memory[size] / size:7.0f} B | "
            f"{lookups[size]['hit']:7.0f} ns | {lookups[size]['miss']:5.0f} ns | "
            f"{d['request_us']:6.0f} us vs {d['reference_us']:6.0f} us (x{d['ratio']:.3f})"
        )
    emit(
        "scaling",
        parts={str(n): row for n, row in parts.items()},
        per_part_us=per_part,
        per_part_target_us=PER_PART_TARGET_US,
        decisions={
            str(s): {
                "memory_bytes": memory[s],
                "lookup_hit_ns": lookups[s]["hit"],
                "lookup_miss_ns": lookups[s]["miss"],
                **decisions[s],
            }
            for s in SIZES
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
