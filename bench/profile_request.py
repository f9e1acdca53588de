"""Where the microseconds of one cache-hit `/search` go, by component.

    .venv/bin/python bench/profile_request.py [--requests 3000] [--top 0]

The request is the one `throughput.py` serves: the real `create_app` (metrics observer,
SQLite trace store on), scripted sources, a keyword-routed query answered by the result
cache, called through the ASGI interface directly (`bench/asgi_call.py`) so no HTTP
parser or client counts. Its wall time per request is measured first without the
profiler; then cProfile runs the same requests, and each function's own time is given to
a component by where it lives (the rules in `COMPONENTS`). A function no rule names (a
builtin, the standard library, numpy, asyncio) is charged to whoever called it, in
proportion to its calls, up to the first function a rule names. The shares are then
scaled to the unprofiled wall time. cProfile charges every Python call a fixed cost, so
call-heavy code looks a little dearer than it is; the order of the components, and
what a new feature adds to one, is what this is for. `--top N` also prints the N
functions with the most own time.

A request's trace is encoded as it is submitted ("trace submit"); the trace store's
writer process and the pipe writes of its drain run off the request (after the store's
linger); the drain's share shows under "trace store drain", timed by flushing the store
once the profiled requests are done.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.asgi_call import post_json  # noqa: E402
from bench.common import emit, scripted_config  # noqa: E402

QUERY = b'{"query": "what is the weather today"}'  # encoded once: the client is not profiled

# (path fragment, function name or "*", component), first match wins.
COMPONENTS: list[tuple[str, str, str]] = [
    ("search/api/request_guard.py", "*", "request guard"),
    ("search/api/body.py", "*", "body parse and validation"),
    ("search/api/app.py", "parse_search_request", "body parse and validation"),
    ("search/api/schemas.py", "*", "body parse and validation"),
    ("search/query_text.py", "*", "body parse and validation"),
    ("pydantic", "*", "body parse and validation"),
    ("routing/pipeline.py", "check_parts", "decomposition"),
    ("routing/pipeline.py", "_units", "decomposition"),
    ("routing/pipeline.py", "_top_level", "decomposition"),
    ("routing/pipeline.py", "_starts_with_condition", "decomposition"),
    ("routing/language/decompose.py", "*", "decomposition"),
    ("routing/language/conditional.py", "*", "decomposition"),
    ("routing/language/sentences.py", "*", "decomposition"),
    ("routing/stages/confidence.py", "*", "confidence"),
    ("routing/stages/keyword.py", "*", "keyword stage"),
    ("routing/stages/resolver.py", "decide", "keyword stage"),
    ("routing/stages/resolver.py", "claim", "keyword stage"),
    ("routing/stages/keyword_rules.py", "*", "keyword stage"),
    ("routing/language/discourse.py", "*", "keyword stage"),
    ("routing/language/lexicon.py", "*", "keyword stage"),
    ("routing/language/text.py", "*", "keyword stage"),
    ("routing/chain/events.py", "*", "recording"),
    ("~", "<built-in method routing.chain._fastrecord.record>", "recording"),  # compiled
    ("routing/ttl_cache.py", "*", "result cache and dispatch"),
    ("routing/dispatch/dispatcher.py", "*", "result cache and dispatch"),
    ("routing/dispatch/control.py", "*", "result cache and dispatch"),
    ("routing/dispatch/breaker.py", "*", "result cache and dispatch"),
    ("tests/support/scripted.py", "*", "result cache and dispatch"),
    ("search/json_codec.py", "*", "response encoding"),
    ("starlette/responses.py", "*", "response encoding"),
    ("routing/pipeline.py", "to_dict", "response encoding"),
    ("sources/base.py", "to_dict", "response encoding"),
    ("search/service.py", "_scrub_result", "response encoding"),
    ("search/observability/metrics.py", "*", "metrics"),
    ("prometheus_client", "*", "metrics"),
    ("search/traces/store.py", "_drain", "trace store drain"),
    ("search/traces/store.py", "_send", "trace store drain"),
    ("search/traces/store.py", "_write_some", "trace store drain"),
    ("search/trace_ids.py", "*", "service and pipeline glue"),
    ("search/traces/writer.py", "record_line", "trace submit"),
    ("search/traces/writer.py", "_plain", "trace submit"),
    ("search/traces/store.py", "*", "trace submit"),
    ("search/traces/records.py", "*", "trace submit"),
    ("search/traces/", "*", "trace submit"),
    ("starlette", "*", "framework (Starlette, ASGI)"),
    ("bench/asgi_call.py", "*", "the bench's own ASGI client"),
    ("bench/profile_request.py", "*", "the bench's own ASGI client"),
    ("search/service.py", "*", "service and pipeline glue"),
    ("routing/", "*", "service and pipeline glue"),
    ("search/", "*", "service and pipeline glue"),
    ("uuid.py", "*", "service and pipeline glue"),
]
ORDER = [
    "request guard",
    "body parse and validation",
    "decomposition",
    "keyword stage",
    "confidence",
    "recording",
    "result cache and dispatch",
    "response encoding",
    "metrics",
    "trace submit",
    "trace store drain",
    "framework (Starlette, ASGI)",
    "service and pipeline glue",
    "the bench's own ASGI client",
    "unattributed",
]

Func = tuple[str, int, str]


def rule_for(func: Func) -> str | None:
    path, _, name = func
    path = path.replace(os.sep, "/")
    for fragment, fname, component in COMPONENTS:
        if fragment in path and fname in ("*", name):
            return component
    return None


def attribute(stats: dict[Func, Any]) -> dict[str, float]:
    """Own time per component: a function's own, or its callers' share of an unnamed one."""
    memo: dict[Func, dict[str, float]] = {}

    def shares(func: Func, seen: frozenset[Func]) -> dict[str, float]:
        """How `func`'s own time splits over components (fractions summing to 1)."""
        if func in memo:
            return memo[func]
        named = rule_for(func)
        if named is not None:
            memo[func] = {named: 1.0}
            return memo[func]
        callers = stats[func][4] if func in stats else {}
        total_calls = sum(entry[1] for entry in callers.values()) or 0
        if not callers or func in seen or total_calls == 0:
            return {"unattributed": 1.0}
        out: dict[str, float] = defaultdict(float)
        for caller, entry in callers.items():
            weight = entry[1] / total_calls
            for component, share in shares(caller, seen | {func}).items():
                out[component] += weight * share
        memo[func] = dict(out)
        return memo[func]

    own: dict[str, float] = defaultdict(float)
    for func, (_, _, tottime, _, _) in stats.items():
        for component, share in shares(func, frozenset()).items():
            own[component] += tottime * share
    return own


def make_app(trace_path: str) -> Any:
    from search.api.app import create_app

    config = scripted_config(
        {"kiwix": {}, "forecast": {}}, {"forecast": ["weather"]}, trace={"path": trace_path}
    )
    return create_app(config)


async def requests(app: Any, n: int) -> None:
    for _ in range(n):
        status, body = await post_json(app, "/search", QUERY)
        assert status == 200 and b'"cached":true' in body, body[:200]


async def main(n: int, top: int) -> None:
    from search.api.app import settle_heap

    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        app = make_app(os.path.join(tmp, "traces.db"))
        store = app.state.service.traces
        await app.state.service.start()
        await post_json(app, "/search", QUERY)  # fills the result cache
        await requests(app, 500)
        await store.flush()
        settle_heap()  # as `search serve` does
        walls = []
        for _ in range(3):
            started = time.perf_counter()
            await requests(app, n)
            walls.append((time.perf_counter() - started) / n * 1e6)
            await store.flush()
        wall_us = sorted(walls)[1]
        profiler = cProfile.Profile()
        profiler.enable()
        await requests(app, n)
        await store.flush()  # the drain's share: encoding and the pipe writes
        profiler.disable()
        await app.state.service.aclose()
    stats = pstats.Stats(profiler)
    raw: dict[Func, Any] = stats.stats  # type: ignore[attr-defined]
    # Waiting in the loop's poll (for the writer process's commit, in the flush) is idle
    # time, not the request's.
    raw = {f: v for f, v in raw.items() if "epoll" not in f[2] and "select" not in f[2]}
    own = attribute(raw)
    profiled_total = sum(own.values())
    scale = wall_us / (profiled_total / n * 1e6) if profiled_total else 0.0
    print(
        f"cache-hit POST /search through the ASGI app: {wall_us:.1f} us/request "
        f"(median of 3 x {n}, no profiler); profiled {profiled_total / n * 1e6:.1f} us/request"
    )
    print(f"{'component':32} {'us/request':>10} {'share':>7}")
    figures: dict[str, float] = {}
    for component in ORDER:
        seconds = own.get(component, 0.0)
        if not seconds:
            continue
        us = seconds / n * 1e6 * scale
        figures[component] = us
        print(f"{component:32} {us:10.1f} {seconds / profiled_total:7.1%}")
    if top:
        print(f"\nthe {top} functions with the most own time (profiled us/request):")
        ranked = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
        for (path, line, name), (_, calls, tottime, _, _) in ranked:
            where = f"{Path(path).name}:{line}({name})" if line else name
            print(f"  {tottime / n * 1e6:7.2f}  {calls / n:5.1f} calls  {where}")
    emit("profile_request", wall_us=wall_us, requests=n, components_us=figures)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.top))
