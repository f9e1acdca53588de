"""What each layer of a cache-hit `/search` costs, in CPU instructions (callgrind).

    .venv/bin/python bench/request_layers.py [--requests 2000]

`profile_request.py` says where the time goes by component, through cProfile, which
charges every Python call a fixed cost. This counts instructions instead, which neither
the profiler nor the machine's load moves: the same request (the throughput bench's, on
the real `create_app`, scripted sources, keyword-routed, answered by the result cache,
trace store off) entered at each layer in turn, each layer in its own process under
callgrind, collecting only inside the requests. The anchor is the throughput bench's
`/bare` endpoint in the same app (the same body parsed, a same-shaped answer encoded).
What a layer adds is its count minus the next layer's; no HTTP server or client counts.

The layers, outermost first:
- `asgi`: the whole request through the app (request guard, routing, the endpoint);
- `search`: `Service.search`: a route log, the routing, the answer's body, the trace
  record, the metrics;
- `route`: `Service._route` in a route log: the request deadline around the routing;
- `run`: the pipeline: decomposition, a context per part, the stages, the dispatch;
- `resolve` and `answer`: the stages' decision, and the dispatcher's answer (the result
  cache), each alone in a route log;
- `log`: an empty route log opened and closed (what `resolve` and `answer` also pay).
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.asgi_call import post_json  # noqa: E402
from bench.common import count_instructions, scripted_config  # noqa: E402

QUERY = "what is the weather today"
BODY = b'{"query": "what is the weather today"}'
LAYERS = ("bare", "asgi", "search", "route", "run", "resolve", "answer", "log")


def make_app() -> Any:
    from bench.throughput import add_bare_anchor
    from search.api.app import create_app

    config = scripted_config({"kiwix": {}, "forecast": {}}, {"forecast": ["weather"]})
    return add_bare_anchor(create_app(config))


async def requests(app: Any, layer: str, n: int) -> None:
    """`n` cache-hit requests entered at `layer`; each checks it was answered from cache."""
    from routing.chain.events import route_log
    from routing.dispatch.control import Circumstances
    from routing.types import ResolveContext

    service = app.state.service
    max_events, recorder = service.config.routing.max_events, service.recorder
    for _ in range(n):
        if layer in ("bare", "asgi"):
            status, body = await post_json(
                app, "/" + ("bare" if layer == "bare" else "search"), BODY
            )
            assert status == 200 and (layer == "bare" or b'"cached":true' in body), body[:200]
        elif layer == "search":
            outcome = await service.search(QUERY)
            assert outcome.body["cached"], outcome.body
        elif layer == "log":
            with route_log(max_events, recorder):
                pass
        else:
            with route_log(max_events, recorder) as log:
                if layer == "route":
                    status, _, _ = await service._route(QUERY, False, None)
                    assert status == 200
                elif layer == "run":
                    await service.router.run(QUERY)
                elif layer == "resolve":
                    decision = await service.resolver.resolve(QUERY, ResolveContext())
                    assert decision.route == "forecast", decision
                else:
                    answer = await service.router.dispatcher.answer(
                        "forecast", QUERY, Circumstances()
                    )
                    assert answer.status == "ok", answer
                if layer != "resolve":
                    assert log.happened("result_cache_hit")


def run_counted_side(layer: str, n: int) -> None:
    """In a child under callgrind: warm every layer up, then `n` requests at `layer`."""
    from search.api.app import settle_heap

    app = make_app()

    async def warm() -> None:
        await app.state.service.start()
        await post_json(app, "/search", BODY)  # fills the result cache
        for each in LAYERS:
            await requests(app, each, 200)

    asyncio.run(warm())
    settle_heap()  # as `search serve` does
    operator.call(asyncio.run, requests(app, layer, n))


def report(counts: dict[str, float]) -> list[str]:
    """Each layer's count and what it adds over the layer it wraps."""
    lines = [f"{'layer':10} {'instructions':>13}"]
    lines += [f"{layer:10} {counts[layer]:13,.0f}" for layer in LAYERS]
    pipeline = counts["run"] - counts["resolve"] - counts["answer"] + counts["log"]
    added = {
        "the router over the bare endpoint": counts["asgi"] - counts["bare"],
        "endpoint: guard, body, response (asgi - search)": counts["asgi"] - counts["search"],
        "service: log, body, trace record, metrics (search - route)": counts["search"]
        - counts["route"],
        "deadline and outcome (route - run)": counts["route"] - counts["run"],
        "stages' decision (resolve - log)": counts["resolve"] - counts["log"],
        "dispatch and result cache (answer - log)": counts["answer"] - counts["log"],
        "pipeline glue (run - resolve - answer + log)": pipeline,
    }
    lines.append("")
    lines += [f"{name:62} {value:10,.0f}" for name, value in added.items()]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.requests < 1:
        print("--requests must be at least 1", file=sys.stderr)
        return 2
    counts = count_instructions(Path(__file__), LAYERS, args.requests)
    if counts is None:
        print("needs valgrind (apt-get install -y valgrind); BENCH_INSTRUCTIONS=0 skips it")
        return 2
    from bench.sealed_quality import stamp

    print(f"{stamp()}: instructions per cache-hit request, {args.requests} per layer")
    print("\n".join(report(counts)))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--counted-side"]:
        run_counted_side(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
