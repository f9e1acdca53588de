"""Bounds and bad input, over uvicorn on loopback with the real ZIM source.

- Body size: over `server.max_body_bytes` is 413, whether the client declares a
  Content-Length or streams a chunked body without one; a chunked body is refused as soon
  as it passes the limit, not after the client has sent it all.
- Query length: over `server.max_query_chars` is 422 naming `query`.
- Malformed input of every kind is a 4xx with `{"error": {"type", "message"}}` naming
  the field: never a 500, never a traceback. (Nesting too deep for the JSON parser, an
  integer too long for Python to convert and a lone UTF-16 surrogate were 500s before.)
- The per-request event log keeps at most `routing.max_events` events and counts the
  rest in `dropped_events`; the result cache, the routing-decision cache and the session
  store never hold more than their configured maximum.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from search.config import parse_config
from search.service import Service
from tests.support.app import build_app, uvicorn_server
from tests.support.chat_server import ChatServer

MAX_BODY = 8192  # room for JSON nested deeper than the parser's recursion limit
MAX_QUERY = 100


@pytest.fixture(scope="module")
def base(demo_zim: Path) -> Iterator[str]:
    config = parse_config(
        {
            "server": {"max_body_bytes": MAX_BODY, "max_query_chars": MAX_QUERY},
            "routing": {
                "default_source": "kiwix",
                "semantic": {"enabled": False},
                "max_events": 10,
            },
            "trace": {"enabled": False},
            "sources": {"kiwix": {"type": "zim", "paths": [str(demo_zim)]}},
        }
    )
    with uvicorn_server(build_app(config)) as url:
        yield url


def assert_error(response: httpx.Response, status: int, field: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error["type"], str) and isinstance(error["message"], str)
    assert "Traceback" not in response.text and 'File "' not in response.text
    if field is not None:
        assert error["field"] == field and error["message"].startswith(field), error


# --- size limits ------------------------------------------------------------------------------


def test_a_declared_body_over_the_limit_is_413(base: str) -> None:
    body = json.dumps({"query": "x" * (MAX_BODY + 10)}).encode()
    response = httpx.post(
        f"{base}/search", content=body, headers={"content-type": "application/json"}
    )
    assert response.request.headers["content-length"] == str(len(body))
    assert_error(response, 413, "body")


def test_a_chunked_body_over_the_limit_is_413(base: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"query": "'
        for _ in range(40):
            yield b"y" * 256
        yield b'"}'

    response = httpx.post(
        f"{base}/search", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert_error(response, 413, "body")


def test_a_chunked_body_under_the_limit_is_read(base: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"query": "tell me about '
        yield b'mount everest"}'

    response = httpx.post(
        f"{base}/search", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["items"][0]["title"] == "Mount Everest"


def test_an_endless_chunked_body_is_cut_off_at_the_limit(base: str) -> None:
    """The server answers 413 once the limit is passed, while the client is still sending."""
    host, port = base.removeprefix("http://").split(":")
    head = (
        f"POST /search HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"z" * 512
    sent = 0
    reply = b""
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + b'b\r\n{"query": "\r\n')
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sent < 4 * 1024 * 1024:
            readable, _, _ = select.select([sock], [], [], 0.005)
            if readable:
                reply = sock.recv(65536)
                break
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                break
            sent += len(chunk)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert sent < 64 * 1024, f"the server let the client send {sent} bytes first"


def test_query_length_limit(base: str) -> None:
    fits = "who was marie curie " + "a" * (MAX_QUERY - 20)
    assert len(fits) == MAX_QUERY
    assert httpx.post(f"{base}/search", json={"query": fits}, timeout=30).status_code == 200
    assert_error(httpx.post(f"{base}/search", json={"query": fits + "b"}), 422, "query")


# --- malformed input -------------------------------------------------------------------------

BAD_BODIES: list[tuple[str, bytes, int, str | None]] = [
    ("not json", b"who was marie curie", 400, "body"),
    ("truncated json", b'{"query": "who', 400, "body"),
    ("invalid utf-8", b'{"query": "\xff\xfe"}', 400, "body"),
    ("nested too deep", b"[" * 3000 + b"]" * 3000, 400, "body"),
    (
        "object nested too deep",
        b'{"query": "x", "explain": ' + b"[" * 3000 + b"]" * 3000 + b"}",
        400,
        "body",
    ),
    ("integer too long", b'{"query": ' + b"7" * 5000 + b"}", 400, "body"),
    ("a json array", b'["who was marie curie"]', 422, "body"),
    ("a json string", b'"who was marie curie"', 422, "body"),
    ("null", b"null", 422, "body"),
    ("empty body", b"", 400, "body"),
    ("missing query", b'{"explain": true}', 422, "query"),
    ("query not a string", b'{"query": 42}', 422, "query"),
    ("query null", b'{"query": null}', 422, "query"),
    ("query NaN", b'{"query": NaN}', 422, "query"),
    ("explain not a bool", b'{"query": "x", "explain": "yes"}', 422, "explain"),
    ("dry_run not a bool", b'{"query": "x", "dry_run": 1}', 422, "dry_run"),
    ("unknown field", b'{"query": "x", "sudo": true}', 422, "sudo"),
    ("a key twice", b'{"query": "x", "dry_run": true, "dry_run": false}', 422, "dry_run"),
    ("a key twice, same value", b'{"query": "x", "query": "x"}', 422, "query"),
    ("a key twice, once escaped", b'{"query": "x", "\\u0071uery": "y"}', 422, "query"),
    ("empty query", b'{"query": ""}', 422, "query"),
    ("whitespace query", b'{"query": " \\t\\n "}', 422, "query"),
    ("lone surrogate", b'{"query": "who was \\ud800 curie"}', 422, "query"),
    ("lone surrogate in session", b'{"query": "x", "session_id": "\\udfff"}', 422, "session_id"),
    (
        "control character in session",
        b'{"query": "x", "session_id": "a\\u0000b"}',
        422,
        "session_id",
    ),
    ("invisible session", b'{"query": "x", "session_id": "\\u200b"}', 422, "session_id"),
    (
        "session_id too long",
        b'{"query": "x", "session_id": "' + b"s" * 200 + b'"}',
        422,
        "session_id",
    ),
]


@pytest.mark.parametrize(
    ("body", "status", "field"), [pytest.param(b, s, f, id=name) for name, b, s, f in BAD_BODIES]
)
def test_bad_input_is_a_4xx_naming_the_field(
    base: str, body: bytes, status: int, field: str | None
) -> None:
    response = httpx.post(
        f"{base}/search", content=body, headers={"content-type": "application/json"}, timeout=30
    )
    assert_error(response, status, field)


def test_odd_but_valid_text_is_answered(base: str) -> None:
    for query in ("who was marie curie \u0000", "\u200b\u200b who \U0001f600", "a" * MAX_QUERY):
        response = httpx.post(f"{base}/search", json={"query": query}, timeout=30)
        assert response.status_code == 200, (query, response.text)
        assert response.json()["query"] == query


def test_unknown_routes_and_methods_answer_json(base: str) -> None:
    assert_error(httpx.get(f"{base}/nowhere"), 404)
    assert_error(httpx.get(f"{base}/search"), 405)
    assert_error(httpx.delete(f"{base}/healthz"), 405)
    # MCP is stateless: a GET stream would stay open forever without sending anything.
    assert_error(httpx.get(f"{base}/mcp", headers={"Accept": "text/event-stream"}, timeout=5), 405)


# --- bounded state ---------------------------------------------------------------------------


def test_the_event_log_is_bounded_with_dropped_events(base: str) -> None:
    query = "paris; rome; tokyo; london; lima; oslo"
    response = httpx.post(f"{base}/search", json={"query": query, "explain": True}, timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["results"]) == 6
    assert len(body["explanation"]) == 10
    assert [e["seq"] for e in body["explanation"]] == list(range(10))
    # decomposed + per part: intent_default and source_invoked = 13 events at least
    assert body["dropped_events"] >= 3


async def test_caches_and_sessions_never_exceed_their_bounds(demo_zim: Path) -> None:
    with ChatServer('{"source": "kiwix"}', api_key="k-bounds") as llm:
        config = parse_config(
            {
                "routing": {
                    "default_source": "kiwix",
                    "semantic": {"enabled": False},
                    "shipped_routes": False,
                    "keywords": {"kiwix": ["tell me about"]},
                    "decision_cache_max_entries": 4,
                    "session_max_entries": 3,
                    "llm": {
                        "base_url": f"{llm.url}/v1",
                        "model": "m",
                        "api_key": "k-bounds",
                        "bias_check": False,
                    },
                },
                "cache": {"result_max_entries": 5},
                "trace": {"enabled": False},
                "sources": {"kiwix": {"type": "zim", "paths": [str(demo_zim)]}},
            }
        )
        service = Service(config)
        await service.start()
        try:
            topics = (
                "paris",
                "rome",
                "tokyo",
                "london",
                "mount everest",
                "alan turing",
                "marie curie",
                "isaac newton",
                "the eiffel tower",
                "machu picchu",
            )
            for i, topic in enumerate(topics):
                keyword = await service.search(f"tell me about {topic}", session_id=f"s{i}")
                assert keyword.status_code == 200
                asked = await service.search(f"who was {topic}?", explain=True)
                assert any(e["step"] == "intent_llm" for e in asked.chain), asked.chain
            sessions = service.resolver.sessions
            decisions = service.resolver.stage("intent_cached")
            assert sessions is not None and decisions is not None
            assert len(service.result_cache) == 5
            assert len(decisions.cache) == 4  # type: ignore[attr-defined]
            assert len(sessions) == 3
            assert len(llm.requests) == len(topics)
        finally:
            await service.aclose()
