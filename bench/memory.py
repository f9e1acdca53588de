"""Resident memory after 10,000 requests, against after warm-up.

The real app (`create_app`: metrics observer, SQLite trace store on in a temp dir) is
called in-process over ASGI with a mix that touches every bounded structure: repeated
cache hits, distinct queries (the result cache fills to its bound and turns over),
2-part decomposed queries, and a failing source that falls back (its circuit opens and
closes). Sources are the scripted kind with the semantic stage off (the model's ~0.3 GB
is loaded once and does not grow with requests; see bench/semantic_stage.py).

RSS is read from /proc after `gc.collect()` and after the trace store has flushed, at the
end of warm-up (`BENCH_MEM_WARMUP`, default 2,000 requests) and every 2,500 requests up to
`BENCH_MEM_REQUESTS` (default 10,000). Target (the issue's soak criterion): within 10%.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.asgi_call import post_json  # noqa: E402
from bench.common import emit, env_int, rss_mb, scripted_config  # noqa: E402
from search.api.app import create_app  # noqa: E402

WARMUP = env_int("BENCH_MEM_WARMUP", 2_000)
REQUESTS = env_int("BENCH_MEM_REQUESTS", 10_000)
STEP = 2_500
TARGET = 1.10


def query(i: int) -> dict[str, Any]:
    kind = i % 4
    if kind == 0:
        return {"query": "what is the weather today"}  # a cache hit
    if kind == 1:
        return {"query": f"latest news about topic {i}", "explain": True}  # distinct, cached
    if kind == 2:
        return {"query": f"weather in city {i % 3000} and also latest news {i % 500}"}
    return {"query": f"turn on the lights in room {i % 200}"}  # fails over to web


def build(tmp: str) -> Any:
    config = scripted_config(
        {
            "kiwix": {},
            "forecast": {},
            "web": {"items": 3},
            "ha": {"fail": "unavailable", "fallback": ["web"], "circuit_cooldown_s": 0.05},
        },
        {"forecast": ["weather"], "web": ["news"], "ha": ["lights"]},
        trace={"path": f"{tmp}/traces.db"},
    )
    return create_app(config)


async def settled_rss(app: Any) -> float:
    await app.state.service.traces.flush()
    gc.collect()
    return rss_mb()


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-mem-") as tmp:
        app = build(tmp)
        async with app.router.lifespan_context(app):
            before = rss_mb()
            for i in range(WARMUP):
                status, body = await post_json(app, "/search", query(i))
                assert status == 200, body[:300]
            warm = await settled_rss(app)
            points = []
            for i in range(WARMUP, WARMUP + REQUESTS):
                status, body = await post_json(app, "/search", query(i))
                assert status == 200, body[:300]
                done = i - WARMUP + 1
                if done % STEP == 0 or done == REQUESTS:
                    points.append((done, await settled_rss(app)))
            service = app.state.service
            sizes = {
                "result_cache": len(service.result_cache),
                "traces_written": service.traces.stats().get("written"),
            }
    final = points[-1][1]
    ratio = final / warm
    print(f"RSS at start {before:.1f} MiB; after {WARMUP:,} warm-up requests {warm:.1f} MiB")
    for done, mib in points:
        print(f"  after {done:6,d} more requests: {mib:7.1f} MiB ({(mib / warm - 1) * 100:+.1f}%)")
    print(
        f"ratio after {REQUESTS:,} / after warm-up: {ratio:.3f} (target <= {TARGET:.2f}); "
        f"result cache {sizes['result_cache']} entries, traces written {sizes['traces_written']}"
    )
    emit(
        "memory",
        start_mib=before,
        warm_mib=warm,
        final_mib=final,
        ratio=ratio,
        points=points,
        requests=REQUESTS,
        warmup=WARMUP,
        target=TARGET,
        passed=ratio <= TARGET,
        **sizes,
    )


if __name__ == "__main__":
    asyncio.run(main())
