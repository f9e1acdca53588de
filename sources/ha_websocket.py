"""One command over Home Assistant's websocket API, auth handshake included.

HA's websocket is stateful and dies with a restart, so each call opens its own short
socket (on a LAN one handshake costs less than reconnect logic): `auth_required` →
`auth` → `auth_ok`, then one command with an id, and the `result` message that answers
it. The token is only ever sent in the auth message. Every transport failure becomes a
typed `SourceError`; what a failed result (`success: false`) means is the caller's to say.
Redirects are never followed: the token would go in the auth message to wherever the
redirect pointed. Credentials in the URL (user:pass@) are not sent either.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.frames import CloseCode

from sources import http
from sources.base import (
    SourceBadResponse,
    SourceError,
    SourceServerError,
    SourceTimeout,
    SourceUnauthorized,
    SourceUnavailable,
)

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
CALL_ID = 1


def websocket_url(url: str) -> str:
    """HA's websocket endpoint under its base URL (`https` → `wss`), without user:pass@
    (websockets would send it as Basic auth; HA takes the token in the auth message)."""
    public = http.public_url(url)
    scheme = "wss://" if public.startswith("https://") else "ws://"
    return scheme + public.split("://", 1)[1] + "/api/websocket"


class _connect(connect):  # noqa: N801 - websockets' own `connect`, one behaviour changed
    """websockets' `connect` follows redirects, to any host, and the auth message (the
    token) would then go wherever they point. This one refuses every redirect: the 3xx
    surfaces as `InvalidStatus`, which `call` maps to an error."""

    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc


def _redirect_target(location: str | None) -> str:
    """Where a redirect pointed, scheme and host only (never a path or credentials)."""
    try:
        parts = urlsplit(location or "")
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "?"
    return http.shown(f"{parts.scheme}://{host}{port}" if parts.scheme else host)


async def _receive(ws: ClientConnection, what: str) -> dict[str, Any]:
    raw = await ws.recv()
    try:
        message = http.decode_json(raw, what)
    except SourceBadResponse:
        raise SourceBadResponse(f"{what} sent a websocket message that is not JSON") from None
    if not isinstance(message, dict):
        raise SourceBadResponse(f"{what} sent a websocket message that is not an object")
    return message


async def _exchange(url: str, token: str, command: dict[str, Any], what: str) -> dict[str, Any]:
    async with _connect(
        websocket_url(url),
        proxy=None,
        open_timeout=None,  # the caller's deadline covers the whole exchange
        close_timeout=1,
        ping_interval=None,
        max_size=MAX_MESSAGE_BYTES,
        compression=None,
    ) as ws:
        if (await _receive(ws, what)).get("type") != "auth_required":
            raise SourceBadResponse(f"{what} did not ask for auth on its websocket")
        await ws.send(json.dumps({"type": "auth", "access_token": token}))
        verdict = (await _receive(ws, what)).get("type")
        if verdict == "auth_invalid":
            raise SourceUnauthorized(f"{what} websocket refused our token (auth_invalid)")
        if verdict != "auth_ok":
            raise SourceBadResponse(f"{what} answered auth with {http.shown(verdict)!r}")
        await ws.send(json.dumps({"id": CALL_ID, **command}))
        while True:  # events and pings may come first
            message = await _receive(ws, what)
            if message.get("id") == CALL_ID and message.get("type") == "result":
                return message


async def call(
    url: str, token: str, command: dict[str, Any], *, timeout_s: float, what: str
) -> dict[str, Any]:
    """The `result` message answering `command` (its `type` and fields, without an id),
    whether or not it succeeded, within `timeout_s` for the whole exchange."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _exchange(url, token, command, what)
    except TimeoutError as exc:
        raise SourceTimeout(f"{what} did not answer in time") from exc
    except InvalidStatus as exc:
        status = exc.response.status_code
        if 300 <= status < 400:
            target = _redirect_target(exc.response.headers.get("Location"))
            raise SourceBadResponse(
                f"{what} redirected its websocket to {target} (HTTP {status}), which is not "
                "followed: set `url` to where Home Assistant answers"
            ) from exc
        if status in (401, 403):
            raise SourceUnauthorized(f"{what} refused the websocket (HTTP {status})") from exc
        if status >= 500:
            raise SourceServerError(f"{what} websocket failed (HTTP {status})") from exc
        raise SourceError(f"{what} websocket rejected (HTTP {status})") from exc
    except InvalidURI as exc:
        raise SourceError(f"{what}: bad websocket URL") from exc
    except ConnectionClosed as exc:
        if exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG:
            raise SourceBadResponse(
                f"{what} sent a websocket message over {MAX_MESSAGE_BYTES} bytes"
            ) from exc
        raise SourceUnavailable(f"{what} websocket is unreachable ({type(exc).__name__})") from exc
    except (InvalidHandshake, OSError) as exc:
        raise SourceUnavailable(f"{what} websocket is unreachable ({type(exc).__name__})") from exc


def failure(message: dict[str, Any]) -> tuple[str, str]:
    """(code, message) of a failed result, each cut to `http.SHOWN_CHARS`."""
    raw = message.get("error")
    error: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return http.shown(error.get("code", "unknown")), http.shown(error.get("message", ""))
