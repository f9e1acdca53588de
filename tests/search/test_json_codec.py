"""Encoding answers: whatever a source sends, the response is valid UTF-8 JSON, never a 500."""

from __future__ import annotations

import json

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from search.config import parse_config
from search.json_codec import dumps
from search.traces.records import MemoryTraceSink
from tests.support.app import asgi_client, build_app, uvicorn_server

# What a SearXNG (or any JSON API) may send: a lone surrogate as an escape, valid JSON that
# no UTF-8 encoder can write back.
LONE = b'{"query": "q", "results": [{"title": "bad \\ud800 title", "url": "http://x.example/1", "content": "x \\udfff y", "engine": "e", "parsed_url": ["http", "x.example", "/1", "", "", ""], "positions": [1], "score": 1.0, "category": "general", "engines": ["e"]}], "answers": [], "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": [], "number_of_results": 0}'


def test_a_lone_surrogate_is_written_as_the_replacement_character() -> None:
    value = {"a": "bad \ud800 x", "k\udfff": [1, "ok", ("t\ud801",)], "big": 2**70}
    encoded = dumps(value)
    assert json.loads(encoded.decode("utf-8")) == {
        "a": "bad \ufffd x",
        "k\ufffd": [1, "ok", ["t\ufffd"]],
        "big": 2**70,
    }
    assert dumps({"plain": "été"}) == orjson.dumps({"plain": "été"})


async def test_a_source_answering_a_lone_surrogate_is_answered_not_a_500() -> None:
    """A local server speaks SearXNG's JSON (SearXNG itself cannot run here) with an
    escaped lone surrogate in a result; the router answers 200 and stores the trace."""

    async def search(request: Request) -> Response:
        return Response(LONE, media_type="application/json")

    fake = Starlette(routes=[Route("/search", search)])
    with uvicorn_server(fake) as url:
        config = parse_config(
            {
                "sources": {"web": {"type": "searxng", "url": url, "timeout_s": 5}},
                "routing": {"default_source": "web", "semantic": {"enabled": False}},
                "trace": {"enabled": False},
            }
        )
        sink = MemoryTraceSink()
        async with asgi_client(build_app(config, traces=sink)) as client:
            first = await client.post("/search", json={"query": "anything at all"})
            again = await client.post("/search", json={"query": "anything at all"})
    for response in (first, again):  # the cached answer too
        assert response.status_code == 200, response.text
        (part,) = response.json()["results"]
        assert part["items"][0]["title"] == "bad \ufffd title"
    assert again.json()["cached"] is True
