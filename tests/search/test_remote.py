"""What the CLI trusts from whatever answers at the configured address.

A tiny HTTP server in the test stands for a foreign or broken server: it answers every
`POST /search` with the status and body the test sets. `search.remote.ask` must accept
only what this router sends (search/api/schemas.py) and name the first field that is
wrong; the CLI then says so on stderr and answers in-process, never with a traceback.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from search.client_settings import ClientSettings
from search.remote import NotThisRouter, RemoteAnswer, ask
from tests.search.test_cli import run, write_config


class FakeServer(ThreadingHTTPServer):
    """Answers `POST /search` with `status` and `body` (bytes, sent as they are)."""

    status = 200
    body = b"{}"

    def answer(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body if isinstance(body, bytes) else json.dumps(body).encode()


class _Handler(BaseHTTPRequestHandler):
    server: FakeServer

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - as in the base
        pass


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    server = FakeServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def ask_fake(server: FakeServer) -> RemoteAnswer | None:
    settings = ClientSettings(host="127.0.0.1", port=server.server_address[1])
    return ask(settings, {"query": "who wrote romeo and juliet", "explain": True})


EVENT = {"step": "intent_default", "seq": 0, "t_ms": 0.1, "part": "p0"}
ITEM = {"title": "Romeo and Juliet", "text": "A play.", "url": None}
PART = {"query": "q", "source": "kiwix", "status": "ok", "items": [ITEM], "route": "kiwix"}
CONDITION = {"query": "if it rains", "source": "forecast", "status": "ok", "items": []}
GOOD = {
    "query": "q",
    "trace_id": "x",
    "results": [{**PART, "condition": CONDITION, "error": None}],
    "cached": False,
    "fallback_occurred": False,
    "explanation": [EVENT, {**EVENT, "seq": 1, "step": "fusion", "sources": ["a", "b"]}],
}
FAILED = {"error": {"type": "all_parts_failed", "message": "m"}, "trace_id": "x"}


@pytest.mark.parametrize(
    ("status", "body"),
    [(200, GOOD), (200, {**GOOD, "explanation": None}), (502, FAILED), (504, FAILED)],
    ids=["results", "no-explanation", "failed", "deadline"],
)
def test_what_this_router_answers_is_taken(fake: FakeServer, status: int, body: Any) -> None:
    fake.answer(status, body)
    answer = ask_fake(fake)
    assert answer is not None and (answer.status_code, answer.body) == (status, body)


@pytest.mark.parametrize(
    ("status", "body", "needle"),
    [
        (200, {"trace_id": "x"}, "results: not a list"),
        (502, {"trace_id": "x", "error": "boom"}, "error: not an object"),
        (502, {"trace_id": "x", "error": {"type": "t"}}, "error.message: not a string"),
        (502, {"trace_id": "x"}, "error: not an object"),
        (200, {**GOOD, "error": FAILED["error"]}, "error: in a 200 answer"),
        (200, {**GOOD, "trace_id": 7}, "trace_id: not a string"),
        (200, {**GOOD, "results": [PART, "x"]}, "results[1]: not an object"),
        (200, {**GOOD, "results": [{**PART, "items": None}]}, "results[0].items: not a list"),
        (
            200,
            {**GOOD, "results": [{**PART, "items": [{"title": "t"}]}]},
            "results[0].items[0].text: not a string",
        ),
        (
            200,
            {**GOOD, "results": [{**PART, "error": "boom"}]},
            "results[0].error: not an object",
        ),
        (
            200,
            {**GOOD, "results": [{**PART, "condition": {"query": "c"}}]},
            "results[0].condition.status: not a string",
        ),
        (200, {**GOOD, "explanation": {"seq": 0}}, "explanation: not a list"),
        (200, {**GOOD, "explanation": [{"step": "s", "t_ms": 1}]}, "explanation[0].seq"),
        (200, {**GOOD, "explanation": [{**EVENT, "seq": True}]}, "explanation[0].seq"),
        (200, {**GOOD, "explanation": [{**EVENT, "t_ms": "1"}]}, "explanation[0].t_ms"),
        (200, {**GOOD, "explanation": [{**EVENT, "part": 3}]}, "explanation[0].part"),
        (200, {**GOOD, "explanation": [{**EVENT, "sources": [1]}]}, "explanation[0].sources"),
        (200, b"<html>not here</html>", "not JSON"),
        (200, b"[" * 100_000, "not JSON"),  # too deep to parse: not a RecursionError
        (200, b"[1]", "not a JSON object"),
    ],
)
def test_anything_else_is_not_this_router(
    fake: FakeServer, status: int, body: Any, needle: str
) -> None:
    fake.answer(status, body)
    with pytest.raises(NotThisRouter) as raised:
        ask_fake(fake)
    port = fake.server_address[1]
    assert f"the server at 127.0.0.1:{port} does not answer as this router" in str(raised.value)
    assert needle in str(raised.value)


def cli_config(tmp_path: Path, demo_zim: Path, server: FakeServer) -> Path:
    """The CLI's config, its server address the fake's."""
    path = write_config(tmp_path, demo_zim)
    data = yaml.safe_load(path.read_text())
    data["server"]["port"] = server.server_address[1]
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, {"trace_id": "x"}),
        (502, {"trace_id": "x", "error": "boom"}),
        (200, {**GOOD, "explanation": [{"step": "intent_default", "t_ms": 0.1}]}),
    ],
    ids=["no-results", "error-a-string", "event-without-seq"],
)
def test_the_cli_says_so_and_answers_in_process(
    tmp_path: Path, demo_zim: Path, fake: FakeServer, status: int, body: Any
) -> None:
    fake.answer(status, body)
    config = cli_config(tmp_path, demo_zim, fake)
    done = run("query", "who wrote romeo and juliet", "--explain", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "does not answer as this router" in done.stderr and "answering in-process" in done.stderr
    assert "Traceback" not in done.stderr
    assert "Romeo and Juliet" in done.stdout  # the in-process answer, from the real ZIM

    done = run("route", "lights status", "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "does not answer as this router" in done.stderr and "Traceback" not in done.stderr
    assert json.loads(done.stdout)["parts"] == [
        {"query": "lights status", "source": "ha", "stage": "intent_keyword"}
    ]


def test_the_cli_prints_an_answer_of_the_right_shape(
    tmp_path: Path, demo_zim: Path, fake: FakeServer
) -> None:
    fake.answer(200, {**GOOD, "results": [{**PART, "items": [{**ITEM, "title": "From afar"}]}]})
    config = cli_config(tmp_path, demo_zim, fake)
    done = run("query", "who wrote romeo and juliet", "--explain", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "From afar" in done.stdout and "trace x" in done.stdout
    assert done.stderr == ""


def test_an_answer_larger_than_any_this_router_sends_is_not_read_whole(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from search import remote

    monkeypatch.setattr(remote, "MAX_ANSWER_BYTES", 1000)
    fake.answer(200, {**GOOD, "padding": "x" * 2000})
    with pytest.raises(NotThisRouter, match="over 1,000 bytes"):
        ask_fake(fake)
    fake.answer(200, GOOD)
    assert ask_fake(fake) is not None
