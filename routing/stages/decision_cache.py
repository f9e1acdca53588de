"""The routing-decision cache: the same question, asked again, is routed without thinking.

Keyed on the normalised query (case, spacing, curly quotes and end punctuation don't make a
different question). Bounded and expiring (a `TTLCache`). Only fresh, confident decisions
of the semantic and LLM stages are stored: keyword rules are cheaper than a lookup, and a
default is never cached, so a later LLM (or a recovered one) still gets its chance.

Given a `RedisLink` (`cache.redis_url`), the cache has a Redis tier behind the local one:
a decision made in one worker or replica answers the same question in all of them.
`get`/`put` stay local and synchronous; the stage asks Redis only on a local miss.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from routing.chain.events import record
from routing.chain.steps import Step
from routing.language.text import normalise
from routing.shared_state import RedisLink, SharedCache
from routing.stages.confidence import NONE, Ranked, single
from routing.ttl_cache import TTLCache
from routing.types import Decision, ResolveContext

# How many candidates an entry from the shared tier may carry (a stage keeps the few it
# showed; a bigger list is not one this router wrote).
MAX_CANDIDATES = 32

Candidates = tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class CachedDecision:
    route: str
    origin: str  # the stage that made the decision: intent_semantic | intent_llm
    confidence: float = 1.0  # the calibrated confidence it was made with
    # What it beat: the routes the deciding stage showed with their confidence, the winner
    # first, kept as given (no copy); empty: the winner alone.
    candidates: Candidates = ()

    def ranked(self) -> Ranked:
        """The decision as it was made: its candidates, or the winner alone."""
        return Ranked(self.candidates) if self.candidates else single(self.route, self.confidence)


class DecisionCache:
    """normalised query -> the decision a thinking stage made for it."""

    def __init__(
        self,
        max_entries: int,
        ttl_s: float,
        now: Callable[[], float] = time.monotonic,
        *,
        shared: RedisLink | None = None,
        routes: set[str] | None = None,
    ) -> None:
        """`routes`: the routes this process has; a shared decision naming another (a
        replica with a different config wrote it) is ignored."""
        self._cache: TTLCache[str, CachedDecision] = TTLCache(max_entries, ttl_s, now)
        self._routes = routes
        self.shared: SharedCache[str, CachedDecision] | None = None
        if shared is not None:
            self.shared = SharedCache(
                shared,
                "decision_cache",
                "decision",
                self._cache,
                encode=_encode,
                decode=self._decode,
            )

    def _decode(self, data: Any) -> CachedDecision:
        route, origin = data["route"], data["origin"]
        confidence = data.get("confidence", 1.0)
        if not isinstance(route, str) or not isinstance(origin, str):
            raise TypeError("route and origin must be strings")
        if not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
            raise ValueError("confidence must be a number in [0, 1]")
        if self._routes is not None and route not in self._routes:
            raise ValueError(f"unknown route {route!r}")
        candidates = self._decode_candidates(data.get("candidates", []), route)
        return CachedDecision(route, origin, float(confidence), candidates)

    def _decode_candidates(self, data: Any, route: str) -> Candidates:
        """A shared entry's candidates, checked like its route (older entries have none)."""
        if not isinstance(data, list) or len(data) > MAX_CANDIDATES:
            raise ValueError("candidates must be a short list")
        candidates: list[tuple[str, float]] = []
        for item in data:
            name, confidence = item  # a pair, or ValueError/TypeError
            if not isinstance(name, str) or isinstance(confidence, bool):
                raise TypeError("a candidate is a route and a confidence")
            if not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
                raise ValueError("a candidate's confidence must be a number in [0, 1]")
            if self._routes is not None and name not in self._routes and name != NONE:
                raise ValueError(f"unknown route {name!r}")
            candidates.append((name, float(confidence)))
        if candidates and candidates[0][0] != route:
            raise ValueError("the winner must come first")
        return tuple(candidates)

    def get(self, query: str) -> CachedDecision | None:
        """The local tier only (never waits)."""
        return self._cache.get(normalise(query))

    async def get_shared(self, query: str) -> CachedDecision | None:
        """The Redis tier (after a local miss); None when there is none or it is down."""
        key = normalise(query)
        if self.shared is None or not key:
            return None
        return await self.shared.fetch(key)

    def put(
        self,
        query: str,
        route: str,
        origin: str,
        confidence: float = 1.0,
        candidates: Candidates = (),
    ) -> None:
        """`candidates`: the few routes the deciding stage showed, the winner first; kept
        as given, so pass the small tuple the event showed, not the whole ranking."""
        key = normalise(query)
        if key:
            decision = CachedDecision(route, origin, confidence, candidates)
            self._cache.set(key, decision)
            if self.shared is not None:
                self.shared.publish(key, decision)

    def clear(self) -> None:
        self._cache.clear()

    def __len__(self) -> int:
        return len(self._cache)


class DecisionCacheStage:
    """Answers from the cache, recording `intent_cached` where it does."""

    name = "intent_cached"

    def __init__(self, cache: DecisionCache) -> None:
        self.cache = cache

    def reset(self) -> None:
        """Forget every remembered decision (a replay starts from nothing)."""
        self.cache.clear()

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        if context.discourse is not None:
            # "what about tomorrow?" means something else in every conversation.
            return None
        hit = self.cache.get(query)
        if hit is not None:
            record(
                Step.INTENT_CACHED,
                query=query,
                decision=hit.route,
                origin=hit.origin,
                **_confidence(hit),
            )
            return Decision(hit.route, self.name, confidence=hit.confidence, ranked=hit.ranked())
        if self.cache.shared is None:
            return None
        hit = await self.cache.get_shared(query)
        if hit is None:
            return None
        # Decided by another worker or replica.
        record(
            Step.INTENT_CACHED,
            query=query,
            decision=hit.route,
            origin=hit.origin,
            tier="shared",
            **_confidence(hit),
        )
        return Decision(hit.route, self.name, confidence=hit.confidence, ranked=hit.ranked())


def _encode(decision: CachedDecision) -> dict[str, Any]:
    """A decision for the shared tier, its candidates included."""
    return {
        "route": decision.route,
        "origin": decision.origin,
        "confidence": decision.confidence,
        "candidates": [list(candidate) for candidate in decision.candidates],
    }


def _confidence(hit: CachedDecision) -> dict[str, Any]:
    """The cached decision's own confidence and what it beat: the same question gets the
    same answer, and the same account of it."""
    ranked = hit.ranked()
    return {
        "confidence": round(hit.confidence, 4),
        "candidates": ranked.candidates(len(ranked.routes)),
    }
