"""What the CLI trusts from whatever answers at the configured address.

A tiny HTTP server in the test stands for a foreign or broken server: it answers every
`POST /search` with the status and body the test sets. `search.remote.ask` must accept
only what this router sends (search/api/schemas.py) and name the first field that is
wrong; the CLI then says so on stderr and answers in-process, never with a traceback.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from search.client_settings import ClientSettings
from search.remote import NotThisRouter, RemoteAnswer, RemoteFailed, ask
from tests.search.test_cli import run, write_config
from tests.support.ports import free_port


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
        {
            "query": "lights status",
            "source": "ha",
            "stage": "intent_keyword",
            "sources": ["ha"],
            "unavailable": {"ha": "disabled"},
        }
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


# --- a server that took the request and did not answer ------------------------------
# A raw listener stands for a hung or crashing server (this router's, for all the client
# can tell): once the whole request went out, it may have run there. Answering it again
# in-process could carry out a command twice, so the CLI fails (exit 1) instead.


class RawListener:
    """Accepts on a loopback port; each connection: read the request, then `behaviour`."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.requests: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = int(self.sock.getsockname()[1])
        self.done = threading.Event()
        self.open: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.open.append(conn)
            self.requests.append(_read_request(conn))
            if self.behaviour == "silent":
                continue  # holds the connection open, answers nothing
            if self.behaviour == "mid-answer":
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b'Content-Length: 1000\r\n\r\n{"query": "q", "trace_id": "x", "res'
                )
            elif self.behaviour == "mid-chunk":
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b'Transfer-Encoding: chunked\r\n\r\n100\r\n{"query": "q"'
                )
            elif self.behaviour.startswith("trickle"):
                self._trickle(conn)
            elif self.behaviour == "not-http":
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            conn.close()  # "close": without a word

    def _trickle(self, conn: socket.socket) -> None:
        """A byte of body ("trickle-body") or a header line ("trickle-headers") every 50
        ms, each well within a read's timeout, never reaching the end of the answer."""
        body = self.behaviour == "trickle-body"
        conn.sendall(b"HTTP/1.1 200 OK\r\n" + (b"Content-Length: 1000\r\n\r\n" if body else b""))
        while not self.done.wait(0.05):
            try:
                conn.sendall(b" " if body else b"X-Slow: 1\r\n")
            except OSError:  # the client gave up
                return

    def close(self) -> None:
        self.done.set()
        self.sock.close()
        for conn in self.open:
            conn.close()
        self.thread.join(timeout=5)


def _read_request(conn: socket.socket) -> bytes:
    """The whole request (headers, then Content-Length bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return data


@pytest.fixture
def listener(request: pytest.FixtureRequest) -> Iterator[RawListener]:
    server = RawListener(request.param)
    try:
        yield server
    finally:
        server.close()


def ask_listener(listener: RawListener, deadline_s: float = 0.1) -> RemoteAnswer | None:
    settings = ClientSettings(host="127.0.0.1", port=listener.port, request_deadline_s=deadline_s)
    return ask(settings, {"query": "unlock the front door", "explain": False})


@pytest.mark.parametrize(
    ("listener", "needle"),
    [
        ("silent", "did not answer within 0.3 s"),
        ("trickle-body", "did not answer within 0.3 s"),  # each read in time, never whole
        ("trickle-headers", "did not answer within 0.3 s"),
        ("close", "closed the connection without answering"),
        ("mid-answer", "closed the connection in the middle of its answer"),
        ("mid-chunk", "closed the connection in the middle of its answer"),
    ],
    indirect=["listener"],
)
def test_a_request_the_server_took_and_did_not_answer_is_a_failure(
    listener: RawListener, needle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from search import remote

    monkeypatch.setattr(remote, "READ_MARGIN_S", 0.2)
    with pytest.raises(RemoteFailed) as raised:
        ask_listener(listener)
    message = str(raised.value)
    assert f"the server at 127.0.0.1:{listener.port} took the request but {needle}" in message
    assert "it may have run there (see `search trace list`)" in message
    assert [r.split(b"\r\n", 1)[0] for r in listener.requests] == [b"POST /search HTTP/1.1"]


@pytest.mark.parametrize("listener", ["not-http"], indirect=True)
def test_an_answer_that_is_not_http_is_not_this_router(listener: RawListener) -> None:
    with pytest.raises(NotThisRouter, match="its answer is not HTTP"):
        ask_listener(listener)


def test_nothing_listening_is_answered_in_process() -> None:
    settings = ClientSettings(host="127.0.0.1", port=free_port())
    assert ask(settings, {"query": "who wrote hamlet"}) is None


@pytest.mark.parametrize(
    ("listener", "deadline_s", "needle"),
    [
        ("silent", 0.1, "did not answer within 5.1 s"),  # the deadline plus the margin
        ("mid-answer", 15, "closed the connection in the middle of its answer"),
    ],
    indirect=["listener"],
)
def test_the_cli_does_not_run_again_what_the_server_took(
    tmp_path: Path, demo_zim: Path, listener: RawListener, deadline_s: float, needle: str
) -> None:
    """`search query "unlock the front door"` against a server that took it and then hung
    (or broke off its answer): one line naming the server, exit 1 ("the server failed",
    as a failed search), and nothing answered in-process."""
    path = write_config(tmp_path, demo_zim, request_deadline_s=deadline_s)
    data = yaml.safe_load(path.read_text())
    data["server"]["port"] = listener.port
    path.write_text(yaml.safe_dump(data))
    done = run("query", "unlock the front door", "--config", str(path))
    assert (done.returncode, done.stdout) == (1, "")
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"search: the server at 127.0.0.1:{listener.port} took the request")
    assert needle in line and "may have run there (see `search trace list`)" in line
    assert len(listener.requests) == 1
