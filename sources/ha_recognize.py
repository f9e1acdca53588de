"""Home Assistant's own sentence matching, without execution: what Assist would understand.

HA's Assist debug tool exposes recognition alone as the websocket command
`conversation/agent/homeassistant/debug` (since 2023.x; shape as in HA 2024.3): for each
sentence, the intent it matched (or the closest), the slots, and the entities it would
target in the live registry (names, areas, aliases), with `match: false` when a slot
named nothing there. Nothing is carried out and no conversation agent runs, so a sentence
that came to the router from its own Assist agent can never be sent back to an agent here.

One short websocket per call (sources/ha_websocket.py); every failure is a typed
`SourceError`, and the token is only ever sent in the auth message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sources import ha_websocket
from sources.base import SourceBadResponse, SourceError, SourceServerError, SourceUnauthorized

DEBUG_COMMAND = "conversation/agent/homeassistant/debug"


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


async def recognize(
    url: str, token: str, sentences: list[str], *, timeout_s: float, what: str = "Home Assistant"
) -> list[Recognition]:
    """HA's recognition of each sentence, in order."""
    command = {"type": DEBUG_COMMAND, "sentences": sentences}
    message = await ha_websocket.call(url, token, command, timeout_s=timeout_s, what=what)
    if not message.get("success"):
        code, _ = ha_websocket.failure(message)
        if code == "unauthorized":
            raise SourceUnauthorized(f"{what}: sentence recognition not allowed ({code})")
        if code == "unknown_command":  # `conversation` is not loaded in that HA
            raise SourceError(f"{what}: no sentence recognition ({code})")
        raise SourceServerError(f"{what}: sentence recognition failed ({code})")
    result = message.get("result")
    results = result.get("results") if isinstance(result, dict) else None
    if not isinstance(results, list) or len(results) != len(sentences):
        raise SourceBadResponse(f"{what}: the recognition has no result per sentence")
    return [parse_result(r) for r in results]
