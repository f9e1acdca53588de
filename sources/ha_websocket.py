"""One command over Home Assistant's websocket API, auth handshake included.

HA's websocket is stateful and dies with a restart, so each call opens its own short
socket (on a LAN one handshake costs less than reconnect logic): `auth_required` →
`auth` → `auth_ok`, then one command with an id, and the `result` message that answers
it. The token is only ever sent in the auth message. Every transport failure becomes a
typed `SourceError`; what a failed result (`success: false`) means is the caller's to say.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

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
    """HA's websocket endpoint under its base URL (`https` → `wss`)."""
    scheme = "wss://" if url.startswith("https://") else "ws://"
    return scheme + url.split("://", 1)[1].rstrip("/") + "/api/websocket"


async def _receive(ws: ClientConnection, what: str) -> dict[str, Any]:
    raw = await ws.recv()
    try:
        message = json.loads(raw)
    except (TypeError, ValueError):
        raise SourceBadResponse(f"{what} sent a websocket message that is not JSON") from None
    if not isinstance(message, dict):
        raise SourceBadResponse(f"{what} sent a websocket message that is not an object")
    return message


async def _exchange(url: str, token: str, command: dict[str, Any], what: str) -> dict[str, Any]:
    async with connect(
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
            raise SourceBadResponse(f"{what} answered auth with {verdict!r}")
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
        if status in (401, 403):
            raise SourceUnauthorized(f"{what} refused the websocket (HTTP {status})") from exc
        if status >= 500:
            raise SourceServerError(f"{what} websocket failed (HTTP {status})") from exc
        raise SourceError(f"{what} websocket rejected (HTTP {status})") from exc
    except InvalidURI as exc:
        raise SourceError(f"{what}: bad websocket URL") from exc
    except (InvalidHandshake, ConnectionClosed, OSError) as exc:
        raise SourceUnavailable(f"{what} websocket is unreachable ({type(exc).__name__})") from exc


def failure(message: dict[str, Any]) -> tuple[str, str]:
    """(code, message) of a failed result; the message cut to 200 characters."""
    raw = message.get("error")
    error: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return str(error.get("code", "unknown")), str(error.get("message", ""))[:200]
