"""Conversation sessions: a follow-up may inherit the route of the previous turn.

A request may carry a `session_id`. The resolver remembers the last confident decision of
each session (bounded, expiring: a `TTLCache`) with the subject of its text. A part that
reads like a follow-up is first rewritten into the question it stands for ("how tall is
it?" after "tell me about the eiffel tower" -> "how tall is the eiffel tower?", see
`routing.language.followup`), recorded as `rewritten`, and routed and asked as such. When no rewrite
rule applies and nothing else decides it, the session stage routes it where the previous
turn went and records `intent_session`. That includes a bare follow-up ("why?", "tell me
more") the semantic stage found unserved only because its nearest utterance was a far
`none` exemplar: likeness is weak evidence beside a live conversation, and the event says
what it overrules (`SessionStage.over_likeness`). The LLM stage also shows the
previous turn to the model when a query depends on discourse.

A conversation belongs to the client that started it: the store is keyed by the client's
identity (the peer address the server sees, as `search.api.authority` judges a client by)
and its `session_id` (`session_key`). Another client that sends the same `session_id`
meets a conversation of its own, empty at first: it can neither read the other's last
turn nor plant one. One client's many sessions evict its own oldest (`SESSIONS_PER_CLIENT`)
before they could push out another client's.

With shared state (`cache.redis_url`), a session's last turn also lives in Redis (under
the same key, client identity included, and at most `SESSIONS_PER_CLIENT` of one client
there too), and Redis is asked first: under
`search serve --workers N` the next turn of a conversation may reach another worker, whose
own memory holds an older turn or none. If Redis is down, each worker falls back to what
it remembers itself.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from routing.chain.events import record
from routing.chain.steps import Step
from routing.language.discourse import is_follow_up
from routing.language.followup import rewrite, subject
from routing.language.sentences import is_greeting
from routing.language.text import words as split_words
from routing.shared_state import RedisLink, SharedCache
from routing.stages.confidence import single
from routing.ttl_cache import TTLCache
from routing.types import Decision, ResolveContext

SESSION_STAGE = "intent_session"

# Between a client's identity and its session_id in a store key: a control character, which
# no session_id may hold (the API refuses them), so no client can name another's key.
_SEP = "\x1f"

# How many live sessions one client may hold. Home Assistant's Assist agent brings every
# satellite's conversations from one address, a new `conversation_id` per wake-word run:
# 128 within the 15 minutes a turn lives (routing.session_ttl_s) is a new conversation every
# 7 s, more than a household speaks, and one client flooding new ids then holds at most
# 128 of the 1,000 sessions routing.session_max_entries keeps in all.
SESSIONS_PER_CLIENT = 128


def session_key(client: str | None, session_id: str | None) -> str | None:
    """The store's key for a client's session (None without a session). `client`: the
    identity the server can tell the requester by (its peer address); without one (an
    in-process caller, a replay) the key is the session_id itself."""
    if not session_id:
        return None
    return f"{client}{_SEP}{session_id}" if client else session_id


def client_of(key: str) -> str:
    """The client a store key belongs to ("" for the callers without an identity)."""
    client, sep, _ = key.partition(_SEP)
    return client if sep else ""


@dataclass(frozen=True, slots=True)
class Turn:
    """What the session said last, where it went, and what it was about (its subject, as
    `routing.language.followup.subject` finds it), so the next turn's "it" can be rewritten."""

    query: str
    route: str
    stage: str
    subject: str | None = None


class ClientSessions(TTLCache[str, Turn]):
    """The TTLCache bound on all sessions, plus at most `per_client` of one client's (by
    `client_of` its key): a client's new session evicts that client's least recently used
    one, so a client opening many cannot push everyone else's out. Every way an entry
    arrives goes through `set`, a turn fetched from Redis included."""

    def __init__(
        self,
        max_entries: int,
        ttl_s: float,
        per_client: int,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(max_entries, ttl_s, now)
        self.per_client = per_client
        # each client's keys, least recently used first; always the keys the cache holds
        self._by_client: dict[str, OrderedDict[str, None]] = {}

    def get(self, key: str) -> Turn | None:
        value = super().get(key)
        own = self._by_client.get(client_of(key))
        if own is not None and key in own:
            if value is None:  # expired: the cache dropped it
                self._forget(key)
            else:
                own.move_to_end(key)
        return value

    def set(self, key: str, value: Turn, ttl_s: float | None = None) -> None:
        ttl = self.ttl_s if ttl_s is None else ttl_s
        if self.max_entries <= 0 or self.per_client <= 0 or ttl <= 0:
            return
        own = self._by_client.setdefault(client_of(key), OrderedDict())
        own[key] = None
        own.move_to_end(key)
        while len(own) > self.per_client:
            oldest, _ = own.popitem(last=False)
            self._data.pop(oldest, None)
        self._data[key] = (self._now() + ttl, value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            oldest, _ = self._data.popitem(last=False)
            self._forget(oldest)

    def discard_where(self, stale: Callable[[str], bool]) -> int:
        keys = [key for key in self._data if stale(key)]
        for key in keys:
            del self._data[key]
            self._forget(key)
        return len(keys)

    def clear(self) -> None:
        super().clear()
        self._by_client.clear()

    def held_by(self, client: str) -> int:
        """How many sessions of `client` are held."""
        return len(self._by_client.get(client, ()))

    def _forget(self, key: str) -> None:
        client = client_of(key)
        own = self._by_client.get(client)
        if own is None:
            return
        own.pop(key, None)
        if not own:
            del self._by_client[client]


class SessionStore:
    """Store key (`session_key`: client and session_id) -> the last turn; at most
    `max_entries` sessions in all and `per_client` of one client, each forgotten after `ttl_s`."""

    def __init__(
        self,
        max_entries: int,
        ttl_s: float,
        now: Callable[[], float] = time.monotonic,
        *,
        shared: RedisLink | None = None,
        routes: set[str] | None = None,
        per_client: int = SESSIONS_PER_CLIENT,
    ) -> None:
        """`routes`: the routes this process has; a shared turn naming another is ignored."""
        self._turns = ClientSessions(max_entries, ttl_s, per_client, now)
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

    def last(self, session: str | None) -> Turn | None:
        """This process's memory of the session (`session`: its key, see `session_key`;
        never waits)."""
        if not session:
            return None
        return self._turns.get(session)

    def held_by(self, client: str | None) -> int:
        """How many sessions this process holds for `client` (None: the callers without
        an identity)."""
        return self._turns.held_by(client or "")

    async def recall(self, session: str | None) -> Turn | None:
        """The session's last turn: from Redis when shared (another worker may have taken
        it), else, or when Redis has none or is down, from this process's memory."""
        if not session:
            return None
        if self.shared is not None:
            turn = await self.shared.fetch(session)
            if turn is not None:
                return turn
        return self._turns.get(session)

    def remember(self, session: str | None, query: str, decision: Decision) -> None:
        """Keep a confident decision as the session's last turn. A follow-up the session
        stage routed ("hmm", "why?") went where the turn before it went, and that turn's
        words say better what the conversation is about: it stays the last turn."""
        if not session or not decision.confident or decision.route is None:
            return
        if decision.stage == SESSION_STAGE:
            kept = self._turns.get(session)
            if kept is not None:
                self._turns.set(session, kept)  # still talking: the turn lives on
            return
        turn = Turn(query, decision.route, decision.stage, subject(query))
        self._turns.set(session, turn)
        if self.shared is not None:  # Redis keeps as many of a client's sessions as we do
            self.shared.publish_within(session, turn, client_of(session), self._turns.per_client)

    async def follow_up(
        self,
        query: str,
        session: str | None,
        claims: Callable[[str], str | None] | None = None,
        *,
        max_chars: int | None = None,
    ) -> str:
        """`query` as the question it stands for after the session's last turn ("how tall
        is it?" -> "how tall is the eiffel tower?"), recording `rewritten`; unchanged when
        there is no session, no earlier turn, or no rule of `routing.language.followup` applies.

        `claims` (the keyword rules' verdict on a text): a follow-up the rules give to
        another route than the last turn's is about something else ("turn it off" after
        the weather is about a device), so it is not rewritten.

        `max_chars` (`server.max_query_chars`): a rewrite longer than a client may ask is
        not made (the part is asked as said), and the `rewritten` event says why
        (`outcome: "declined"`, `to: null`): no source gets a query the server would refuse."""
        if not session or not is_follow_up(query):
            return query
        turn = await self.recall(session)
        if turn is None:
            return query
        claimed = claims(query) if claims is not None else None
        if claimed is not None and claimed != turn.route:
            return query
        found = rewrite(query, turn.query, turn.subject)
        if found is None:
            return query
        said = {
            "query": query,
            "from": query,
            "rule": found.rule,
            "carried": found.carried,
            "replaced": found.replaced,
            "previous_query": turn.query,
        }
        if max_chars is not None and len(found.text) > max_chars:
            record(
                Step.REWRITTEN,
                **said,
                to=None,
                outcome="declined",
                declined=f"the rewrite would be {len(found.text)} characters, over the "
                f"maximum of {max_chars} (server.max_query_chars): asked as said",
                max_chars=max_chars,
            )
            return query
        record(Step.REWRITTEN, **said, to=found.text)
        return found.text

    def clear(self) -> None:
        self._turns.clear()

    def __len__(self) -> int:
        return len(self._turns)


# A follow-up goes where the previous turn went: not measured (no labelled conversations
# here), so a documented constant, just above the fitted min_confidence (0.55).
SESSION_CONFIDENCE = 0.7


# A `none` exemplar at least this near is the part said again ("stop", "okay then": 1.0;
# "cancel" 0.76 to "cancel that"), and its verdict stands in a conversation too. Farther,
# the nearest `none` utterance says little about a bare follow-up: measured with the bundled
# model, the follow-ups the none route took were all below 0.64 ("and?" 0.40 to "repeat
# that", "why?" 0.44 to "stop", "tell me more" 0.55 to "tell me a joke", "go on then" 0.57
# to "okay then", "continue" 0.63 to "stop"): the bar sits between them.
NONE_SAID_AGAIN = 0.7


class SessionStage:
    """Routes a follow-up where the session's previous turn went, when nothing else decided."""

    name = SESSION_STAGE

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        if context.unserved:
            return None  # a stage said no source serves this ("set an alarm"): not a follow-up
        return await self._follow(query, context)

    async def over_likeness(self, query: str, context: ResolveContext) -> Decision | None:
        """A follow-up the semantic stage found unserved by likeness alone ("why?" nearest
        to the `none` exemplar "stop") continues its conversation when the session has a
        turn to follow, the nearest `none` exemplar is no more than a far neighbour
        (below `NONE_SAID_AGAIN`) and the part asks something (not only words that ask
        nothing, `routing.language.sentences.is_greeting`: "ok", "cool"). Only the
        semantic stage's verdict yields: a keyword `none` rule, a label or the LLM (which
        sees the previous turn) named the request. Without a session, or without a turn,
        nothing changes."""
        similarity = context.default_fields.get("similarity")
        if not isinstance(similarity, (int, float)) or similarity >= NONE_SAID_AGAIN:
            return None
        if is_greeting(split_words(query)):
            return None  # "ok", "cool", "yes": it asks nothing, of the conversation either
        overrules = {
            "step": "intent_semantic",
            "outcome": "unserved",
            "nearest": context.default_fields.get("nearest"),
            "similarity": similarity,
            "bar": NONE_SAID_AGAIN,
        }
        return await self._follow(query, context, overrules=overrules)

    async def _follow(
        self, query: str, context: ResolveContext, **why: dict[str, object]
    ) -> Decision | None:
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
            **why,
        )
        return Decision(turn.route, self.name, confidence=SESSION_CONFIDENCE)
