"""Ask the server already running at the configured address, instead of loading the model.

`search query` and `search route` would otherwise import torch and load the model for one
answer (seconds); a running server has both loaded and answers in milliseconds. Only the
standard library's HTTP client is used, so asking costs no heavy import either.

The server is the one at `server.host:server.port` of the CLI's config, with its
`server.api_token` (read by `search.client_settings`, which validates only those keys).
Nothing listening there means "run in-process". Anything else that answers, but not as
this API does (not HTTP, not JSON, no `trace_id`, a body not of the shape this router
sends: another program on the port, or a broken server), is `NotThisRouter`: the CLI says
so and answers in-process too. Its answer is checked for every field the CLI prints, so
nothing it sends makes the CLI fail on a missing key.

Once the whole request went out, a server that does not answer in time, or whose
connection breaks before its answer is whole, is `RemoteFailed`: the request may have run
there (a command carried out), so the CLI must not run it a second time in-process.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from dataclasses import dataclass
from typing import Any

from search.client_settings import ClientSettings

CONNECT_TIMEOUT_S = 0.5
# How much longer than the request deadline an answer may take (the server's own work).
READ_MARGIN_S = 5.0
# The most of an answer read: this router's largest (8 parts, an explained chain of
# `routing.max_events`, items and all) is a few MB; whatever sends more is not it.
MAX_ANSWER_BYTES = 32 * 1024 * 1024
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
# What this API answers bad input with (a 404 or 405 means some other server is there).
REFUSALS = frozenset({400, 403, 413, 415, 422})


class RemoteRefused(Exception):
    """The server answered, but refused the request as bad or unauthorised (exit 2)."""


class NotThisRouter(Exception):
    """Something answered at the configured address, but not as this router answers."""


class RemoteFailed(Exception):
    """The server took the whole request but its answer never came whole (no answer in
    time, the connection broke): it may have run there, so it is not run again (exit 1)."""


@dataclass(frozen=True, slots=True)
class RemoteAnswer:
    """The server's status code and response body for one `POST /search`."""

    status_code: int
    body: dict[str, Any]

    @property
    def trace_id(self) -> str:
        return str(self.body.get("trace_id") or "")

    @property
    def chain(self) -> list[dict[str, Any]]:
        return list(self.body.get("explanation") or [])


def server_address(settings: ClientSettings) -> tuple[str, int]:
    """Where the configured server listens, as a client dials it (a wildcard bind is
    reached on loopback)."""
    host = settings.host
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    return host.strip("[]"), settings.port


def ask(settings: ClientSettings, payload: dict[str, Any]) -> RemoteAnswer | None:
    """`POST /search` to the configured server; None when nothing there can have taken
    the request, `NotThisRouter` when what answers is not this router, `RemoteFailed` when
    the request went out but no whole answer came back.

    Connecting waits at most `CONNECT_TIMEOUT_S` (a local server accepts at once); the
    whole answer, headers and body, may take up to the request deadline plus a margin for
    the server's own work. That bound is on the whole answer, not on each read: a socket
    timeout alone lets a server that sends a byte now and then hold the CLI forever.
    """
    host, port = server_address(settings)
    read_timeout_s = settings.request_deadline_s + READ_MARGIN_S
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if settings.api_token:
        headers["Authorization"] = f"Bearer {settings.api_token}"
    not_this = f"the server at {host}:{port} does not answer as this router"
    connection = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT_S)
    try:
        try:
            connection.connect()
        except OSError:  # refused, unreachable, or nothing accepted in time
            return None
        assert connection.sock is not None
        connection.sock.settimeout(read_timeout_s)
        try:
            # One send (http.client joins headers and a bytes body): when it fails, the
            # request did not go out whole, and no server acts on part of one.
            connection.request("POST", "/search", json.dumps(payload).encode(), headers)
        except OSError:
            return None
        late = _Deadline(connection.sock, read_timeout_s)
        try:
            try:
                response = connection.getresponse()
                raw = response.read(MAX_ANSWER_BYTES + 1)
            finally:
                late.cancel()
            if late.passed:  # cut off: what was read may end anywhere
                raise TimeoutError
        except (TimeoutError, http.client.HTTPException, OSError) as exc:
            if late.passed or isinstance(exc, TimeoutError):
                raise _failed(host, port, f"did not answer within {read_timeout_s:g} s") from None
            raise _unanswered(exc, host, port, not_this) from None
    finally:
        connection.close()
    # `read(n)` returns what came when the connection closes before `Content-Length`
    # bytes did (only a chunked answer raises `IncompleteRead`): the rest is still owed.
    if response.length and len(raw) <= MAX_ANSWER_BYTES:
        raise _failed(host, port, "closed the connection in the middle of its answer")
    if len(raw) > MAX_ANSWER_BYTES:
        raise NotThisRouter(f"{not_this} (its answer is over {MAX_ANSWER_BYTES:,} bytes)")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
        raise NotThisRouter(f"{not_this} (its answer is not JSON)") from None
    if not isinstance(body, dict):
        raise NotThisRouter(f"{not_this} (its answer is not a JSON object)")
    if response.status == 401:
        raise RemoteRefused(
            f"the server at {host}:{port} refused the request: check server.api_token"
        )
    if response.status in REFUSALS and isinstance(body.get("error"), dict):
        raise RemoteRefused(str(body["error"].get("message") or "bad request"))
    problem = answer_problem(response.status, body)
    if problem is not None:
        raise NotThisRouter(f"{not_this} ({problem})")
    return RemoteAnswer(response.status, body)


class _Deadline:
    """Shuts `sock` down once `seconds` have passed, so the read in progress ends there."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self.passed = False
        self._sock = sock
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def _cut(self) -> None:
        self.passed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed
            pass

    def cancel(self) -> None:
        self._timer.cancel()


def _unanswered(
    exc: http.client.HTTPException | OSError, host: str, port: int, not_this: str
) -> Exception:
    """What a read that ended without a whole answer (in time) means."""
    if isinstance(exc, http.client.RemoteDisconnected):  # before OSError: it is one too
        return _failed(host, port, "closed the connection without answering")
    if isinstance(exc, http.client.IncompleteRead):
        return _failed(host, port, "closed the connection in the middle of its answer")
    if isinstance(exc, OSError):
        return _failed(host, port, f"broke the connection ({type(exc).__name__})")
    return NotThisRouter(f"{not_this} (its answer is not HTTP)")  # what came back is not HTTP


def _failed(host: str, port: int, what: str) -> RemoteFailed:
    return RemoteFailed(
        f"the server at {host}:{port} took the request but {what}; it may have run there "
        "(see `search trace list`), so it is not run again here"
    )


# What `POST /search` answers (search/api/schemas.py: SearchResponse, FailedSearch), as
# far as the CLI reads it: a 200 with `results`, any other status with `error`, and the
# `explanation` events when asked. Checked here with the standard library only (the client
# imports no pydantic); each check names the first field that is wrong, never its value.


def answer_problem(status: int, body: dict[str, Any]) -> str | None:
    """What in a `/search` answer is not what this router sends, or None."""
    if not isinstance(body.get("trace_id"), str):
        return "trace_id: not a string"
    if status == 200:
        problem = None if "error" not in body else "error: in a 200 answer"
        problem = problem or _results_problem(body.get("results"))
    else:
        problem = _error_problem(body.get("error"), "error")
    return problem or _explanation_problem(body.get("explanation"))


def _is_str_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _error_problem(error: Any, where: str) -> str | None:
    if not isinstance(error, dict):
        return f"{where}: not an object"
    for key in ("type", "message"):
        if not isinstance(error.get(key), str):
            return f"{where}.{key}: not a string"
    return None


def _results_problem(results: Any) -> str | None:
    if not isinstance(results, list):
        return "results: not a list"
    for index, part in enumerate(results):
        problem = _part_problem(part, f"results[{index}]", condition=True)
        if problem is not None:
            return problem
    return None


def _part_problem(part: Any, where: str, condition: bool) -> str | None:
    """One part; `condition`: whether it may carry one (a condition's own is not read)."""
    if not isinstance(part, dict):
        return f"{where}: not an object"
    for key in ("query", "status"):
        if not isinstance(part.get(key), str):
            return f"{where}.{key}: not a string"
    for key in ("source", "route", "stage"):
        if not _is_str_or_none(part.get(key)):
            return f"{where}.{key}: not a string or null"
    items = part.get("items")
    if not isinstance(items, list):
        return f"{where}.items: not a list"
    for index, item in enumerate(items):
        problem = _item_problem(item, f"{where}.items[{index}]")
        if problem is not None:
            return problem
    if part.get("error") is not None:
        problem = _error_problem(part["error"], f"{where}.error")
        if problem is not None:
            return problem
    if condition and part.get("condition") is not None:
        return _part_problem(part["condition"], f"{where}.condition", condition=False)
    return None


def _item_problem(item: Any, where: str) -> str | None:
    if not isinstance(item, dict):
        return f"{where}: not an object"
    for key in ("title", "text"):
        if not isinstance(item.get(key), str):
            return f"{where}.{key}: not a string"
    if not _is_str_or_none(item.get("url")):
        return f"{where}.url: not a string or null"
    return None


def _explanation_problem(events: Any) -> str | None:
    if events is None:
        return None
    if not isinstance(events, list):
        return "explanation: not a list"
    for index, event in enumerate(events):
        where = f"explanation[{index}]"
        if not isinstance(event, dict):
            return f"{where}: not an object"
        if not isinstance(event.get("step"), str):
            return f"{where}.step: not a string"
        if not _is_number(event.get("seq"), int):
            return f"{where}.seq: not an integer"
        if not _is_number(event.get("t_ms"), (int, float)):
            return f"{where}.t_ms: not a number"
        if not _is_str_or_none(event.get("part")):
            return f"{where}.part: not a string or null"
        sources = event.get("sources", [])
        if not (isinstance(sources, list) and all(isinstance(s, str) for s in sources)):
            return f"{where}.sources: not a list of strings"
    return None


def _is_number(value: Any, kinds: type | tuple[type, ...]) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool)
