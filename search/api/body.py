"""Reading a request body within a limit, and decoding its JSON, for every route that takes
one."""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from search.api.schemas import error_response


class BodyTooLarge(Exception):
    pass


class DuplicateKey(ValueError):
    """A JSON object names the same key twice. JSON parsers disagree on which value counts
    (ours took the last), so a proxy or a page that checked `"dry_run": true` could send a
    body the router reads as `"dry_run": false`: such a body is refused, not guessed at."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"{key}: named more than once in one object (parsers differ on which counts)"
        )
        self.key = key

    def response(self) -> JSONResponse:
        """The 422 that names the key, as every route that reads JSON answers it."""
        return error_response(422, "invalid_request", str(self), self.key)


def too_large(limit: int) -> JSONResponse:
    """The 413 of a body over `limit` bytes."""
    message = f"body: larger than the maximum of {limit} bytes"
    return error_response(413, "body_too_large", message, "body")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKey(key)
        found[key] = value
    return found


def loads_json(raw: bytes) -> Any:
    """The body's JSON, refusing a key that appears twice in an object (`DuplicateKey`).

    orjson first (a tenth of the stdlib's time), and the stdlib for what orjson refuses
    (NaN, integers past 64 bits, UTF-16), so the verdict is the stdlib's. orjson keeps the
    last of two equal keys without a word, but every key brings its colon: an object with
    more colons in its body than keys (a second key, a nested object, a colon in a value)
    is read again, exactly, which costs a few microseconds only then.
    ValueError (or RecursionError) when it is not JSON."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw, object_pairs_hook=_unique)
    # Anything but an object is refused by every route, whatever its keys.
    if data.__class__ is dict and raw.count(b":") != len(data):
        json.loads(raw, object_pairs_hook=_unique)
    return data


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than `limit` bytes without reading them all."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def receive_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The body straight from the ASGI messages (no `Request` object, no stream generator:
    `/search` reads its body on every request), refusing more than `limit` bytes."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            if value.isdigit() and int(value) > limit:
                raise BodyTooLarge
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        elif kind == "http.disconnect":
            raise ClientDisconnect


class StrictJSONBody:
    """An ASGI app's POST body read first, within `limit`, and checked as `/search` checks
    its own: over the limit is a JSON 413, a key named twice a 422 naming it (a proxy that
    let `"name": "search"` through must not see `"name": "control"` run). The app then gets
    the same bytes. For a route whose JSON a library parses (`/mcp`)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            raw = await receive_body(scope, receive, self.limit)
        except BodyTooLarge:
            await too_large(self.limit)(scope, receive, send)
            return
        try:
            loads_json(raw)
        except DuplicateKey as exc:
            await exc.response()(scope, receive, send)
            return
        except (ValueError, RecursionError):
            pass  # not JSON: the app answers that in its own protocol
        await self.app(scope, _replay(raw, receive), send)


def _replay(raw: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `raw` as the whole body, then what the client sends next."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return replayed
