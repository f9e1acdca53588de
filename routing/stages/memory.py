"""What is kept of a fresh LLM decision for later requests, and where.

The LLM stage decides; keeping the decision is this object's: exactly (the decision cache,
for the same words asked again) and semantically (the semantic stage's `LearnedDecisions`,
for a paraphrase). routing/stages/build.py builds it over the caches the other stages read,
so the LLM stage writes into no other stage's state and needs none of them to decide.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import numpy as np

from routing.types import ResolveContext

if TYPE_CHECKING:
    from routing.stages.decision_cache import Candidates, DecisionCache
    from routing.stages.semantic import LearnedDecisions

Embed = Callable[[str], Awaitable[np.ndarray | None]]


class DecisionMemory:
    """Keeps a decision where the stages before the LLM will find it next time."""

    def __init__(
        self,
        decision_cache: DecisionCache | None = None,
        learned: LearnedDecisions | None = None,
        embed: Embed | None = None,
    ) -> None:
        """`embed`: the query's embedding when the semantic stage did not compute one for
        this request (it declined before embedding, or a keyword escalated)."""
        self.decision_cache = decision_cache
        self.learned = learned
        self.embed = embed

    async def keep(
        self,
        query: str,
        route: str,
        stage: str,
        confidence: float,
        context: ResolveContext,
        candidates: Candidates = (),
    ) -> None:
        """`candidates`: the few routes the decision beat, shown again on a cache hit."""
        if context.discourse is not None:
            return  # the decision depends on the conversation, not just the words
        if self.decision_cache is not None:
            self.decision_cache.put(query, route, stage, confidence, candidates)
        if self.learned is not None:
            vector = context.embedding
            if vector is None and self.embed is not None:
                vector = await self.embed(query)
            if vector is not None:
                self.learned.add(query, route, vector, confidence)
