"""Intent resolution: stages in order, the first that decides wins, and says so itself.

Each stage records its own `intent_*` event at the point where it decides; the resolver
only records `intent_default` when no stage decided. There is no other place that knows
why a part went where it went.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from routing.events import record
from routing.keyword import KeywordRules


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a part goes (a source or fusion route), and which stage said so."""

    route: str
    stage: str
    confident: bool = True


@dataclass(slots=True)
class ResolveContext:
    """What a stage may look at besides the query text."""

    session_id: str | None = None
    dry_run: bool = False
    # Set by a stage that tried and failed (e.g. "llm_failed"), so the default says why.
    default_reason: str | None = None


class IntentStage(Protocol):
    name: str

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        """A decision (after recording its event), or None to pass to the next stage."""


class KeywordStage:
    """Rules from `routing.keywords`."""

    name = "intent_keyword"

    def __init__(self, rules: KeywordRules) -> None:
        self.rules = rules

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        match = self.rules.match(query)
        if match is None:
            return None
        record(
            "intent_keyword",
            query=query,
            decision=match.route,
            discourse_escalated=False,
            matched=list(match.matched),
        )
        return Decision(match.route, self.name)


class Resolver:
    """Runs the stages; falls back to `default_route` with a reason."""

    def __init__(self, stages: list[IntentStage], default_route: str) -> None:
        self.stages = stages
        self.default_route = default_route

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

    def default_reason(self) -> str:
        """Why nothing decided, as far as the configuration tells."""
        for stage in self.stages:
            reason = getattr(stage, "default_reason", None)
            if reason:
                return str(reason)
        return "no_match"

    async def resolve(self, query: str, context: ResolveContext) -> Decision:
        for stage in self.stages:
            decision = await stage.decide(query, context)
            if decision is not None:
                return decision
        reason = context.default_reason or self.default_reason()
        record("intent_default", query=query, decision=self.default_route, reason=reason)
        return Decision(self.default_route, "intent_default", confident=False)
