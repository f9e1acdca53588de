"""Intent resolution: stages in order, the first that decides wins, and says so itself.

Each stage records its own `intent_*` event at the point where it decides; the resolver
only records `intent_default` when no stage decided. There is no other place that knows
why a part went where it went.

The order (built in `routing.stages.build`): label -> keyword (routing.stages.keyword) ->
decision cache -> semantic -> LLM -> session -> world (routing.stages.world) -> default. A keyword decision on a query that leans on the conversation is
escalated to the LLM when one is configured (`discourse_escalated` on both events).

A stage that finds no source serves a part ends it unserved, with one exception: when
only the semantic stage's likeness said so, a follow-up with a session turn to follow
is heard by the session stage first (`SessionStage.over_likeness`), whose event records
what it overrules. Without a session nothing of this runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

from routing.chain.events import record
from routing.chain.steps import Step
from routing.language.discourse import dependency
from routing.stages.confidence import load_model
from routing.stages.keyword import KeywordStage
from routing.stages.keyword_rules import NONE
from routing.stages.sessions import SessionStage, SessionStore
from routing.types import Decision, IntentStage, ResolveContext

# Pure functions of the query text, remembered for the questions a household repeats
# (bounded); the events are recorded per request, where the result is used.
_MEMO_SIZE = 2048
_dependency = lru_cache(maxsize=_MEMO_SIZE)(dependency)


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

    def _session_stage(self) -> SessionStage | None:
        return next((s for s in self.stages if isinstance(s, SessionStage)), None)

    async def resolve(self, query: str, context: ResolveContext) -> Decision:
        context.discourse = _dependency(query)
        judged_by: str | None = None  # the stage that found no source serves the part
        for stage in self.stages:
            if context.unserved:
                break  # a stage found that no source serves this: the default says so
            decision = await stage.decide(query, context)
            if decision is not None:
                return self._decided(query, context, decision)
            if context.unserved:
                judged_by = stage.name
        if judged_by == Step.INTENT_SEMANTIC and context.session_id:
            # Likeness is weak evidence against a conversation: a bare follow-up ("why?",
            # "tell me more") nearest to a far `none` exemplar follows its session's turn,
            # and the session stage's event says what it overrules.
            session = self._session_stage()
            decision = await session.over_likeness(query, context) if session else None
            if decision is not None:
                context.unserved = False
                return self._decided(query, context, decision)
        return self._default(query, context)

    def _decided(self, query: str, context: ResolveContext, decision: Decision) -> Decision:
        if decision.confidence is not None and decision.confidence < self.min_confidence:
            # A session's fixed confidence under a stricter threshold (the other stages
            # decline below it themselves).
            decision = replace(decision, confident=False)
        if self.sessions is not None and context.remember:
            self.sessions.remember(context.session_id, query, decision)
        return decision

    def _default(self, query: str, context: ResolveContext) -> Decision:
        ranked = context.ranked
        route = None if context.unserved else self.default_route
        # Its confidence is the one the declining stage gave the route it ends at.
        confidence = dict(ranked.routes).get(route or NONE, 0.0) if ranked else 0.0
        shown = {
            "confidence": round(confidence, 4),
            # the route it ends at first, as every decision's candidates are shown
            "candidates": ranked.candidates_for(route or NONE) if ranked else [],
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
