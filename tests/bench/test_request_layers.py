"""bench/request_layers.py: every layer it counts runs the cache-hit request it claims to
(answered from the result cache, by the keyword-routed source), and what it says a
layer adds is that layer's count minus the one it wraps."""

from __future__ import annotations

import asyncio

from bench.asgi_call import post_json
from bench.request_layers import BODY, LAYERS, make_app, report, requests


def test_each_layer_runs_a_cache_hit_request() -> None:
    app = make_app()

    async def go() -> None:
        await app.state.service.start()
        try:
            await post_json(app, "/search", BODY)  # fills the result cache
            for layer in LAYERS:
                await requests(app, layer, 2)  # asserts a cached answer at each layer
        finally:
            await app.state.service.aclose()

    asyncio.run(go())


def test_what_a_layer_adds_is_its_count_minus_the_one_it_wraps() -> None:
    counts = {
        "bare": 250.0,
        "asgi": 400.0,
        "search": 260.0,
        "route": 185.0,
        "run": 165.0,
        "resolve": 50.0,
        "answer": 60.0,
        "log": 10.0,
    }
    lines = report(counts)
    added = {line[:62].strip(): line[62:].strip() for line in lines[len(LAYERS) + 2 :]}
    assert added == {
        "the router over the bare endpoint": "150",
        "endpoint: guard, body, response (asgi - search)": "140",
        "service: log, body, trace record, metrics (search - route)": "75",
        "deadline and outcome (route - run)": "20",
        "stages' decision (resolve - log)": "40",
        "dispatch and result cache (answer - log)": "50",
        "pipeline glue (run - resolve - answer + log)": "65",
    }
