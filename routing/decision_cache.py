"""The routing-decision cache: the same question, asked again, is routed without thinking.

Keyed on the normalised query (case, spacing, curly quotes and end punctuation don't make a
different question). Bounded and expiring (a `TTLCache`). Only fresh, confident decisions
of the semantic and LLM stages are stored: keyword rules are cheaper than a lookup, and a
default is never cached, so a later LLM (or a recovered one) still gets its chance.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from routing.events import record
from routing.intents import Decision, ResolveContext
from routing.ttl_cache import TTLCache

_SPACE = re.compile(r"\s+")
_EDGE = " \t\r\n.,;:!?¿¡\"'“”‘’()"


def normalise(query: str) -> str:
    """The cache key of a query."""
    text = query.replace("’", "'").replace("‘", "'").lower()
    return _SPACE.sub(" ", text).strip(_EDGE)


@dataclass(frozen=True, slots=True)
class CachedDecision:
    route: str
    origin: str  # the stage that made the decision: intent_semantic | intent_llm


class DecisionCache:
    """normalised query -> the decision a thinking stage made for it."""

    def __init__(
        self, max_entries: int, ttl_s: float, now: Callable[[], float] = time.monotonic
    ) -> None:
        self._cache: TTLCache[str, CachedDecision] = TTLCache(max_entries, ttl_s, now)

    def get(self, query: str) -> CachedDecision | None:
        return self._cache.get(normalise(query))

    def put(self, query: str, route: str, origin: str) -> None:
        key = normalise(query)
        if key:
            self._cache.set(key, CachedDecision(route, origin))

    def clear(self) -> None:
        self._cache.clear()

    def __len__(self) -> int:
        return len(self._cache)


class DecisionCacheStage:
    """Answers from the cache, recording `intent_cached` where it does."""

    name = "intent_cached"

    def __init__(self, cache: DecisionCache) -> None:
        self.cache = cache

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        if context.discourse is not None:
            # "what about tomorrow?" means something else in every conversation.
            return None
        hit = self.cache.get(query)
        if hit is None:
            return None
        record("intent_cached", query=query, decision=hit.route, origin=hit.origin)
        return Decision(hit.route, self.name)
