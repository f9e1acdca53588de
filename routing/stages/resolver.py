"""Intent resolution: stages in order, the first that decides wins, and says so itself.

Each stage records its own `intent_*` event at the point where it decides; the resolver
only records `intent_default` when no stage decided. There is no other place that knows
why a part went where it went.

The order (built in `routing.stages.build`): keyword -> decision cache -> semantic -> LLM ->
session -> default. A keyword decision on a query that leans on the conversation is
escalated to the LLM when one is configured (`discourse_escalated` on both events).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from typing import Any, NamedTuple

from routing.chain.events import record
from routing.chain.steps import Step
from routing.language.discourse import dependency
from routing.stages.confidence import ConfidenceModel, Ranked, declined, load_model
from routing.stages.keyword_rules import NONE, KeywordMatch, KeywordRules
from routing.stages.sessions import SessionStore
from routing.types import Decision, Escalation, IntentStage, ResolveContext

# Pure functions of the query text, remembered for the questions a household repeats
# (bounded); the events are recorded per request, where the result is used.
_MEMO_SIZE = 2048
_dependency = lru_cache(maxsize=_MEMO_SIZE)(dependency)


CLAIM_WEIGHT = 1.0  # a topical word, not a hint ("nearby" weighs 0.75): enough to claim a clause


class _Ranking(NamedTuple):
    """What the keyword stage makes of one text, before recording it."""

    match: KeywordMatch
    ranked: Ranked
    confidence: float  # rounded, as the event shows it
    candidates: tuple[tuple[str, float, float], ...]  # (route, confidence, margin)
    declined: str | None  # why it declines (under `min_confidence`), else None


class KeywordStage:
    """Rules from the resolved routes, weighed by the fitted keyword confidence: decides when
    its winner clears `min_confidence`, else declines (saying so) for the semantic stage.
    Discourse-dependent matches go on to the LLM if any."""

    name = "intent_keyword"

    def __init__(
        self,
        rules: KeywordRules,
        escalation: Escalation | None = None,
        *,
        labels: list[str] | None = None,
        min_confidence: float | None = None,
        model: ConfidenceModel | None = None,
    ) -> None:
        """`labels`: every route the confidence ranks (default: those with rules)."""
        self.rules = rules
        self.escalation = escalation
        self.model = model or load_model()
        self.min_confidence = (
            self.model.min_confidence if min_confidence is None else min_confidence
        )
        self.labels = labels or rules.routes
        self._match = lru_cache(maxsize=_MEMO_SIZE)(rules.match)
        self._scores = lru_cache(maxsize=_MEMO_SIZE)(rules.scores)
        self._ranking = lru_cache(maxsize=_MEMO_SIZE)(self._rank)

    def _rank(self, query: str) -> _Ranking | None:
        """The rules' match and its fitted ranking: a pure function of the text (the rules
        and the model are fixed for the stage's life), so a repeated query ranks once."""
        match = self._scores(query)
        if match is None:
            return None
        labels = [*self.labels, *(r for r in match.scores if r not in self.labels)]
        ranked = self.model.keyword(labels, match.scores)
        candidates = tuple((c["route"], c["confidence"], c["margin"]) for c in ranked.candidates())
        reason = (
            declined("keyword", ranked, self.min_confidence)
            if ranked.confidence < self.min_confidence
            else None
        )
        return _Ranking(match, ranked, round(ranked.confidence, 4), candidates, reason)

    def claim(self, text: str) -> str | None:
        """The route (or "none") the rules give `text` alone by more than a hint ("nearby"
        weighs less than a topic); records nothing."""
        match = self._match(text)
        if match is None or match.scores[match.route] < CLAIM_WEIGHT:
            return None
        return match.route

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        ranking = self._ranking(query)
        if ranking is None:
            return None
        match, ranked = ranking.match, ranking.ranked
        context.keyword = match
        # Each event gets objects of its own (a reader may change its copy).
        shown = {
            "confidence": ranking.confidence,
            "candidates": [
                {"route": route, "confidence": p, "margin": margin}
                for route, p, margin in ranking.candidates
            ],
            "fit": self.model.name,
        }
        matched = list(match.matched)
        if ranking.declined is not None:
            # A tie, or words that point several ways: the semantic stage weighs them too.
            record(
                Step.INTENT_KEYWORD,
                query=query,
                decision=None,
                discourse_escalated=False,
                matched=matched,
                outcome="declined",
                declined=ranking.declined,
                **shown,
            )
            context.ranked = ranked
            return None
        route = ranked.winner
        if route == NONE:
            # "set an alarm", "add it to my playlist": no source serves it; say so, don't route.
            record(
                Step.INTENT_KEYWORD,
                query=query,
                decision=None,
                discourse_escalated=False,
                matched=matched,
                outcome="unserved",
                **shown,
            )
            context.unserved = True
            context.default_reason = "no_match"
            context.default_fields = {"nearest": matched[0] if matched else None}
            context.ranked = ranked
            return None
        escalate = self.escalation is not None and context.discourse is not None
        fields: dict[str, Any] = {}
        if escalate:
            fields["discourse"] = context.discourse
        record(
            Step.INTENT_KEYWORD,
            query=query,
            decision=route,
            discourse_escalated=escalate,
            matched=matched,
            **shown,
            **fields,
        )
        if escalate and self.escalation is not None:
            fresh = await self.escalation.escalate(query, context, route)
            if fresh is not None:
                return fresh
        return Decision(route, self.name, confidence=ranked.confidence)


class Resolver:
    """Runs the stages; falls back to `default_route` with a reason."""

    def __init__(
        self,
        stages: list[IntentStage],
        default_route: str,
        *,
        sessions: SessionStore | None = None,
        fallback_reason: str = "no_match",
        min_confidence: float | None = None,
        fit: str = "shipped",
    ) -> None:
        """`min_confidence`: a decision below it is not `confident` (the control gate then
        withholds a command); default: the fitted artefact's. `fit`: the name of the
        artefact routing runs with, shown on the default's event."""
        self.fit = fit
        self.min_confidence = (
            load_model().min_confidence if min_confidence is None else min_confidence
        )
        self.stages = stages
        self.default_route = default_route
        self.sessions = sessions
        self.fallback_reason = fallback_reason

    def keyword_claims(self) -> Callable[[str], str | None] | None:
        """What the keyword stage would say of a clause, for decomposition (None without one)."""
        for stage in self.stages:
            if isinstance(stage, KeywordStage):
                return stage.claim
        return None

    async def start(self) -> None:
        """Load what stages need (models, clients) once; never at import time."""
        for stage in self.stages:
            start = getattr(stage, "start", None)
            if start is not None:
                await start()

    async def aclose(self) -> None:
        for stage in self.stages:
            close = getattr(stage, "aclose", None)
            if close is not None:
                await close()

    def reset(self) -> None:
        """Forget everything earlier requests taught the stages (cached and learned
        decisions, sessions), so what comes next is decided as if it came first."""
        for stage in self.stages:
            reset = getattr(stage, "reset", None)
            if reset is not None:
                reset()
        if self.sessions is not None:
            self.sessions.clear()

    def stage(self, name: str) -> IntentStage | None:
        """The stage called `name` (e.g. "intent_semantic"), if configured."""
        return next((s for s in self.stages if s.name == name), None)

    def default_reason(self) -> str:
        """Why nothing decided, as far as the configuration tells."""
        for stage in self.stages:
            reason = getattr(stage, "default_reason", None)
            if reason:
                return str(reason)
        return self.fallback_reason

    async def resolve(self, query: str, context: ResolveContext) -> Decision:
        context.discourse = _dependency(query)
        for stage in self.stages:
            if context.unserved:
                break  # a stage found that no source serves this: the default says so
            decision = await stage.decide(query, context)
            if decision is not None:
                if decision.confidence is not None and decision.confidence < self.min_confidence:
                    # An LLM's or a session's fixed confidence under a stricter threshold.
                    decision = replace(decision, confident=False)
                if self.sessions is not None:
                    self.sessions.remember(context.session_id, query, decision)
                return decision
        ranked = context.ranked
        route = None if context.unserved else self.default_route
        # Its confidence is the one the declining stage gave the route it ends at.
        confidence = dict(ranked.routes).get(route or NONE, 0.0) if ranked else 0.0
        shown = {
            "confidence": round(confidence, 4),
            "candidates": ranked.candidates() if ranked else [],
            "fit": self.fit,
        }
        if context.unserved:
            # A stage judged it something no source serves ("set an alarm"): no source is
            # asked, rather than the default answering with whatever it finds.
            record(
                Step.INTENT_DEFAULT,
                query=query,
                decision=None,
                reason="unserved",
                outcome="unserved",
                **shown,
                **context.default_fields,
            )
            return Decision(None, "intent_default", confident=False, confidence=confidence)
        # A stage declined: no stage after it (no LLM) was sure either.
        reason = context.default_reason or (
            "low_confidence" if ranked is not None else self.default_reason()
        )
        record(
            Step.INTENT_DEFAULT,
            query=query,
            decision=self.default_route,
            reason=reason,
            **shown,
            **context.default_fields,
        )
        return Decision(
            self.default_route, "intent_default", confident=False, confidence=confidence
        )
