"""Home Assistant's own sentence matching, without execution: what Assist would understand.

HA's Assist debug tool exposes recognition alone as the websocket command
`conversation/agent/homeassistant/debug` (since 2023.x; shape as in HA 2024.3): for each
sentence, the intent it matched (or the closest), the slots, and the entities it would
target in the live registry (names, areas, aliases), with `match: false` when a slot
named nothing there. Nothing is carried out and no conversation agent runs, so a sentence
that came to the router from its own Assist agent can never be sent back to an agent here.

One short websocket per call (HA's socket is stateful); every failure is a typed
`SourceError`, and the token is only ever sent in the auth message.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
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

DEBUG_COMMAND = "conversation/agent/homeassistant/debug"
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
CALL_ID = 1


@dataclass(frozen=True, slots=True)
class Recognition:
    """What HA's sentence matching made of one sentence."""

    intent: str | None  # "HassTurnOn"; None when nothing came close
    matched: bool  # every slot named something in the registry
    slots: dict[str, Any] = field(default_factory=dict)
    targets: tuple[str, ...] = ()  # entity ids it would act on (or read)
    template: str = ""

    def to_event(self) -> dict[str, Any]:
        return {
            "intent": self.intent,
            "matched": self.matched,
            "slots": self.slots,
            "targets": list(self.targets),
        }


def parse_result(result: Any) -> Recognition:
    """One entry of the debug command's `results` (None: no intent came close)."""
    if result is None:
        return Recognition(None, False)
    if not isinstance(result, dict):
        raise SourceBadResponse("Home Assistant debug result is not an object")
    intent = result.get("intent")
    name = intent.get("name") if isinstance(intent, dict) else None
    slots = result.get("slots")
    slots = slots if isinstance(slots, dict) else {}
    targets = result.get("targets")
    targets = targets if isinstance(targets, dict) else {}
    chosen = tuple(
        str(e) for e, how in targets.items() if not isinstance(how, dict) or how.get("matched")
    )
    return Recognition(
        intent=str(name) if name else None,
        matched=bool(result.get("match")),
        slots=dict(slots),
        targets=chosen,
        template=str(result.get("sentence_template") or ""),
    )


def websocket_url(url: str) -> str:
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


async def _exchange(url: str, token: str, sentences: list[str], what: str) -> Any:
    async with connect(
        websocket_url(url),
        proxy=None,
        open_timeout=None,
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
        await ws.send(json.dumps({"id": CALL_ID, "type": DEBUG_COMMAND, "sentences": sentences}))
        while True:
            message = await _receive(ws, what)
            if message.get("id") == CALL_ID and message.get("type") == "result":
                break
    if not message.get("success"):
        error = message.get("error") if isinstance(message.get("error"), dict) else {}
        code = str((error or {}).get("code", "unknown"))
        if code == "unauthorized":
            raise SourceUnauthorized(f"{what}: sentence recognition not allowed ({code})")
        if code == "unknown_command":  # `conversation` is not loaded in that HA
            raise SourceError(f"{what}: no sentence recognition ({code})")
        raise SourceServerError(f"{what}: sentence recognition failed ({code})")
    return message.get("result")


async def recognize(
    url: str, token: str, sentences: list[str], *, timeout_s: float, what: str = "Home Assistant"
) -> list[Recognition]:
    """HA's recognition of each sentence, in order."""
    try:
        async with asyncio.timeout(timeout_s):
            result = await _exchange(url, token, sentences, what)
    except TimeoutError as exc:
        raise SourceTimeout(f"{what} did not recognize in time") from exc
    except InvalidStatus as exc:
        status = exc.response.status_code
        if status in (401, 403):
            raise SourceUnauthorized(f"{what} refused the websocket (HTTP {status})") from exc
        raise SourceServerError(f"{what} websocket failed (HTTP {status})") from exc
    except InvalidURI as exc:
        raise SourceError(f"{what}: bad websocket URL") from exc
    except (InvalidHandshake, ConnectionClosed, OSError) as exc:
        raise SourceUnavailable(f"{what} websocket is unreachable ({type(exc).__name__})") from exc
    results = result.get("results") if isinstance(result, dict) else None
    if not isinstance(results, list) or len(results) != len(sentences):
        raise SourceBadResponse(f"{what}: the recognition has no result per sentence")
    return [parse_result(r) for r in results]
