"""Loopback servers for the hostile-backend tests in tests/sources/.

`BodyServer` speaks plain HTTP/1.1, which is what every backend here answers over, and
sends one body per request: sized (with Content-Length, or chunked without it) or endless
(chunked, until the client goes away), of JSON whitespace so no parser finishes early; or
exactly the bytes of `content`, under a `Content-Encoding` if given. It counts the bytes
it managed to hand to the socket before the client closed; that count is what a size
limit must keep small, so no test depends on timing.

`HaWire` speaks Home Assistant's websocket API as documented on
developers.home-assistant.io (`auth_required` → `auth` → `auth_ok`/`auth_invalid`, then
`{"id", "type": "result", "success", "result"|"error"}` answers) and the REST GETs the HA
sources make (`/api/states/<entity_id>`, `/api/config`), through the `websockets`
library's own server. It records every auth message and every request's headers.
`redirect_to` makes its websocket answer 302 to another URL instead. The real HA runs in
the slow tests; this server covers what a real HA cannot be made to do.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Self

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

SAFETY_CAP = 1 << 30  # an "endless" body still ends here, should a limit not hold


class BodyServer:
    """Answers every request with `status` and a body of `size` bytes (None: endless)."""

    def __init__(
        self,
        size: int | None,
        *,
        status: int = 200,
        chunked: bool = True,
        content_type: str = "application/json",
        chunk: int = 64 * 1024,
        content: bytes | None = None,
        encoding: str | None = None,
    ) -> None:
        self.content = content
        self.encoding = encoding
        self.size = size
        self.status = status
        self.chunked = chunked or size is None
        self.content_type = content_type
        self.chunk = chunk
        self.written = 0  # body bytes handed to the socket, over all requests
        self.client_left = False  # a client closed before its body ended
        self.requests: list[bytes] = []
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def finished(self) -> None:
        """Wait until every connection's handler has stopped writing."""
        async with asyncio.timeout(30):  # a guard against a hang, not a measurement
            while self._handlers:
                await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            self.requests.append(await reader.readuntil(b"\r\n\r\n"))
            await self._answer(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.client_left = True
        finally:
            writer.close()
            self._handlers.discard(task)

    async def _answer(self, writer: asyncio.StreamWriter) -> None:
        length = "Transfer-Encoding: chunked" if self.chunked else f"Content-Length: {self.size}"
        if self.content is not None:
            length = f"Content-Length: {len(self.content)}"
        head = f"HTTP/1.1 {self.status} X\r\nContent-Type: {self.content_type}\r\n{length}\r\n"
        if self.encoding:
            head += f"Content-Encoding: {self.encoding}\r\n"
        writer.write(f"{head}Connection: close\r\n\r\n".encode())
        if self.content is not None:
            writer.write(self.content)
            await writer.drain()
            self.written += len(self.content)
            return
        block = b" " * self.chunk
        remaining = SAFETY_CAP if self.size is None else self.size
        while remaining > 0:
            piece = block[: min(len(block), remaining)]
            framed = f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if self.chunked else piece
            writer.write(framed)
            await writer.drain()  # raises once the client has closed (RST)
            self.written += len(piece)
            remaining -= len(piece)
        if self.chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()


# A websocket command's answer: the `result` message's fields other than `id` and `type`.
Answer = Callable[[dict[str, Any]], dict[str, Any]]


def _ok(_: dict[str, Any]) -> dict[str, Any]:
    return {"success": True, "result": None}


class HaWire:
    """Home Assistant's websocket auth flow and a few REST GETs (see the module doc)."""

    def __init__(
        self,
        token: str,
        *,
        answer: Answer = _ok,
        rest: dict[str, Any] | None = None,
        redirect_to: str | None = None,
        raw_messages: list[str] | None = None,
    ) -> None:
        self.token = token
        self.answer = answer
        self.rest = rest or {}
        self.redirect_to = redirect_to
        self.raw_messages = raw_messages  # sent verbatim after auth_ok, instead of `answer`
        self.auth_messages: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []
        self.headers: list[Headers] = []  # of every HTTP request and websocket upgrade
        self._server: Server | None = None
        self.url = ""

    async def __aenter__(self) -> Self:
        self._server = await serve(
            self._session, "127.0.0.1", 0, process_request=self._http, compression=None
        )
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        """REST paths and the redirect; None lets the websocket handshake go on."""
        self.headers.append(request.headers)
        if request.path == "/api/websocket":
            if self.redirect_to is None:
                return None
            response = connection.respond(HTTPStatus.FOUND, "Moved\n")
            response.headers["Location"] = self.redirect_to
            return response
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return connection.respond(HTTPStatus.UNAUTHORIZED, "401: Unauthorized\n")
        if request.path not in self.rest:
            return connection.respond(HTTPStatus.NOT_FOUND, "404: Not Found\n")
        body = json.dumps(self.rest[request.path]).encode()
        headers = Headers(
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return Response(200, "OK", headers, body)

    async def _session(self, ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "auth_required", "ha_version": "2024.3.3"}))
        auth = json.loads(await ws.recv())
        self.auth_messages.append(auth)
        if auth.get("access_token") != self.token:
            await ws.send(json.dumps({"type": "auth_invalid", "message": "Invalid access"}))
            return
        await ws.send(json.dumps({"type": "auth_ok", "ha_version": "2024.3.3"}))
        async for raw in ws:
            command = json.loads(raw)
            self.commands.append(command)
            if self.raw_messages is not None:
                for message in self.raw_messages:
                    await ws.send(message)
                continue
            answer = {"id": command["id"], "type": "result", **self.answer(command)}
            await ws.send(json.dumps(answer))
