"""Conversation sessions: a follow-up may inherit the route of the previous turn.

A request may carry a `session_id`. The resolver remembers the last confident decision of
each session (bounded, expiring: a `TTLCache`); when nothing else decides a part that reads
like a follow-up ("what about tomorrow?", "and the kitchen"), the session stage routes it
where the previous turn went and records `intent_session`. The LLM stage also shows the
previous turn to the model when a query depends on discourse.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from routing.discourse import is_follow_up
from routing.events import record
from routing.intents import Decision, ResolveContext
from routing.ttl_cache import TTLCache


@dataclass(frozen=True, slots=True)
class Turn:
    """What the session said last, and where it went."""

    query: str
    route: str
    stage: str


class SessionStore:
    """session_id -> the last turn; at most `max_entries` sessions, each forgotten after `ttl_s`."""

    def __init__(
        self, max_entries: int, ttl_s: float, now: Callable[[], float] = time.monotonic
    ) -> None:
        self._turns: TTLCache[str, Turn] = TTLCache(max_entries, ttl_s, now)

    def last(self, session_id: str | None) -> Turn | None:
        if not session_id:
            return None
        return self._turns.get(session_id)

    def remember(self, session_id: str | None, query: str, decision: Decision) -> None:
        if session_id and decision.confident:
            self._turns.set(session_id, Turn(query, decision.route, decision.stage))

    def clear(self) -> None:
        self._turns.clear()

    def __len__(self) -> int:
        return len(self._turns)


class SessionStage:
    """Routes a follow-up where the session's previous turn went, when nothing else decided."""

    name = "intent_session"

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        if context.unserved:
            return None  # a stage said no source serves this ("set an alarm"): not a follow-up
        turn = self.store.last(context.session_id)
        if turn is None or not is_follow_up(query):
            return None
        record(
            "intent_session",
            query=query,
            decision=turn.route,
            previous_query=turn.query,
            previous_stage=turn.stage,
        )
        return Decision(turn.route, self.name)
