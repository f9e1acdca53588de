"""Reading a request body within a limit, for every route that takes one."""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope


class BodyTooLarge(Exception):
    pass


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
