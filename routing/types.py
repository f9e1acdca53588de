"""The types the intent stages share: a decision, what a stage may look at, a stage.

Apart from `routing.stages.resolver` (the stages and the resolver) so that modules the resolver
uses (sessions, the decision cache, the semantic and LLM stages) can name them without
importing the resolver back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from routing.stages.confidence import Ranked
from routing.stages.keyword_rules import KeywordMatch


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a part goes (a source or fusion route), and which stage said so."""

    route: str | None  # None: no configured source serves it (`unserved`)
    stage: str
    # Whether `confidence` cleared routing.min_confidence: the control gate withholds a
    # state-changing command when it did not (routing/dispatch/control.py).
    confident: bool = True
    confidence: float | None = None  # calibrated, 0-1 (routing/stages/confidence.py)
    # What it beat: every candidate route with its confidence, on the same scale (None when
    # the stage ranked nothing, as a household's label or a session's follow-up).
    ranked: Ranked | None = None

    @property
    def unserved(self) -> bool:
        return self.route is None


@dataclass(slots=True)
class ResolveContext:
    """What a stage may look at besides the query text, and what stages tell later ones."""

    # The session store's key: the client's address and its session_id, so two clients
    # sending the same session_id never continue each other's conversation.
    session_id: str | None = None
    dry_run: bool = False
    read_only: bool = False  # commands must not run (see routing.dispatch.control)
    authorized: bool = False  # the requester may act (see routing.dispatch.control)
    # The whole request the part is of: condition words anywhere in it withhold a command.
    request: str = ""
    # Whether the session keeps this turn (a dry run changes nothing, sessions included).
    remember: bool = True
    # Set by a stage that tried and failed (e.g. "llm_failed"), so the default says why.
    default_reason: str | None = None
    # Extra fields for the `intent_default` event (e.g. the nearest "none" exemplar).
    default_fields: dict[str, Any] = field(default_factory=dict)
    # A stage found the query is something no source serves ("set an alarm"): later
    # stages (LLM, session) leave it to the default.
    unserved: bool = False
    # The kind of discourse dependency of the query ("follow_up", "why", ...), or None.
    discourse: str | None = None
    # The query's embedding, once the semantic stage computed it (reused by the LLM stage).
    embedding: Any = None
    # The keyword rules' scores for the query (the semantic stage's confidence reads them).
    keyword: KeywordMatch | None = None
    # The candidates of the last stage that declined, for the default to show.
    ranked: Ranked | None = None
    # How many of the query's words the semantic model does not know, when that made it
    # decline: its candidates then say nothing about the query, and nothing reads them.
    unknown_words: int = 0


class IntentStage(Protocol):
    name: str

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        """A decision (after recording its event), or None to pass to the next stage."""


class Escalation(Protocol):
    """What a keyword decision is escalated to (the LLM stage)."""

    async def escalate(
        self, query: str, context: ResolveContext, keyword_route: str
    ) -> Decision | None:
        """A fresh decision (its event recorded), or None to keep the keyword's."""
