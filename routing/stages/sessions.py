"""Conversation sessions: a follow-up may inherit the route of the previous turn.

A request may carry a `session_id`. The resolver remembers the last confident decision of
each session (bounded, expiring: a `TTLCache`) with the subject of its text. A part that
reads like a follow-up is first rewritten into the question it stands for ("how tall is
it?" after "tell me about the eiffel tower" -> "how tall is the eiffel tower?", see
`routing.language.followup`), recorded as `rewritten`, and routed and asked as such. When no rewrite
rule applies and nothing else decides it, the session stage routes it where the previous
turn went and records `intent_session`. The LLM stage also shows the
previous turn to the model when a query depends on discourse.

With shared state (`cache.redis_url`), a session's last turn also lives in Redis, and
Redis is asked first: under `search serve --workers N` the next turn of a conversation
may reach another worker, whose own memory holds an older turn or none. If Redis is
down, each worker falls back to what it remembers itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from routing.chain.events import record
from routing.chain.steps import Step
from routing.language.discourse import is_follow_up
from routing.language.followup import rewrite, subject
from routing.shared_state import RedisLink, SharedCache
from routing.stages.confidence import single
from routing.ttl_cache import TTLCache
from routing.types import Decision, ResolveContext

SESSION_STAGE = "intent_session"


@dataclass(frozen=True, slots=True)
class Turn:
    """What the session said last, where it went, and what it was about (its subject, as
    `routing.language.followup.subject` finds it), so the next turn's "it" can be rewritten."""

    query: str
    route: str
    stage: str
    subject: str | None = None


class SessionStore:
    """session_id -> the last turn; at most `max_entries` sessions, each forgotten after `ttl_s`."""

    def __init__(
        self,
        max_entries: int,
        ttl_s: float,
        now: Callable[[], float] = time.monotonic,
        *,
        shared: RedisLink | None = None,
        routes: set[str] | None = None,
    ) -> None:
        """`routes`: the routes this process has; a shared turn naming another is ignored."""
        self._turns: TTLCache[str, Turn] = TTLCache(max_entries, ttl_s, now)
        self._routes = routes
        self.shared: SharedCache[str, Turn] | None = None
        if shared is not None:
            self.shared = SharedCache(
                shared,
                "sessions",
                "session",
                self._turns,
                encode=lambda t: {
                    "query": t.query,
                    "route": t.route,
                    "stage": t.stage,
                    "subject": t.subject,
                },
                decode=self._decode,
            )

    def _decode(self, data: Any) -> Turn:
        found = data.get("subject")
        turn = Turn(
            str(data["query"]),
            str(data["route"]),
            str(data["stage"]),
            str(found) if found is not None else None,
        )
        if self._routes is not None and turn.route not in self._routes:
            raise ValueError(f"unknown route {turn.route!r}")
        return turn

    def last(self, session_id: str | None) -> Turn | None:
        """This process's memory of the session (never waits)."""
        if not session_id:
            return None
        return self._turns.get(session_id)

    async def recall(self, session_id: str | None) -> Turn | None:
        """The session's last turn: from Redis when shared (another worker may have taken
        it), else, or when Redis has none or is down, from this process's memory."""
        if not session_id:
            return None
        if self.shared is not None:
            turn = await self.shared.fetch(session_id)
            if turn is not None:
                return turn
        return self._turns.get(session_id)

    def remember(self, session_id: str | None, query: str, decision: Decision) -> None:
        """Keep a confident decision as the session's last turn. A follow-up the session
        stage routed ("hmm", "why?") went where the turn before it went, and that turn's
        words say better what the conversation is about: it stays the last turn."""
        if not session_id or not decision.confident or decision.route is None:
            return
        if decision.stage == SESSION_STAGE:
            kept = self._turns.get(session_id)
            if kept is not None:
                self._turns.set(session_id, kept)  # still talking: the turn lives on
            return
        turn = Turn(query, decision.route, decision.stage, subject(query))
        self._turns.set(session_id, turn)
        if self.shared is not None:
            self.shared.publish(session_id, turn)

    async def follow_up(
        self, query: str, session_id: str | None, claims: Callable[[str], str | None] | None = None
    ) -> str:
        """`query` as the question it stands for after the session's last turn ("how tall
        is it?" -> "how tall is the eiffel tower?"), recording `rewritten`; unchanged when
        there is no session, no earlier turn, or no rule of `routing.language.followup` applies.

        `claims` (the keyword rules' verdict on a text): a follow-up the rules give to
        another route than the last turn's is about something else ("turn it off" after
        the weather is about a device), so it is not rewritten."""
        if not session_id or not is_follow_up(query):
            return query
        turn = await self.recall(session_id)
        if turn is None:
            return query
        claimed = claims(query) if claims is not None else None
        if claimed is not None and claimed != turn.route:
            return query
        found = rewrite(query, turn.query, turn.subject)
        if found is None:
            return query
        record(
            Step.REWRITTEN,
            **{
                "query": query,
                "from": query,
                "to": found.text,
                "rule": found.rule,
                "carried": found.carried,
                "replaced": found.replaced,
                "previous_query": turn.query,
            },
        )
        return found.text

    def clear(self) -> None:
        self._turns.clear()

    def __len__(self) -> int:
        return len(self._turns)


# A follow-up goes where the previous turn went: not measured (no labelled conversations
# here), so a documented constant, just above the fitted min_confidence (0.55).
SESSION_CONFIDENCE = 0.7


class SessionStage:
    """Routes a follow-up where the session's previous turn went, when nothing else decided."""

    name = SESSION_STAGE

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        if context.unserved:
            return None  # a stage said no source serves this ("set an alarm"): not a follow-up
        turn = await self.store.recall(context.session_id)
        if turn is None or not is_follow_up(query):
            return None
        record(
            Step.INTENT_SESSION,
            query=query,
            decision=turn.route,
            previous_query=turn.query,
            previous_stage=turn.stage,
            confidence=SESSION_CONFIDENCE,
            candidates=single(turn.route, SESSION_CONFIDENCE).candidates(),
        )
        return Decision(turn.route, self.name, confidence=SESSION_CONFIDENCE)
