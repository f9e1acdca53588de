"""The routing pipeline for one request: conditions, decomposition, intents, dispatch.

Parts run concurrently (`asyncio.gather`); each runs inside `part_scope(path)` so its
events carry its part path. A part that fails gets status "error" and the others still
answer; the caller decides what a request where every part failed means.

A condition is looked up, never evaluated: its consequence is answered beside it, so a
consequence that is a command ("if it rains, close the windows") is withheld by the
control gate (`routing.dispatch.control`) rather than carried out whatever the weather. A part no
source serves ("set an alarm") is answered as such: status "unserved", no source called.
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from routing.chain.events import part_scope, record
from routing.chain.steps import Step
from routing.config import TimeSensitiveConfig
from routing.dispatch.control import Circumstances
from routing.dispatch.dispatcher import Answer, Dispatcher
from routing.dispatch.live import LiveRedirect
from routing.language.conditional import Conditional, extract_conditional
from routing.language.decompose import CONDITION_OPENERS, Claims, decompose_claimed
from routing.stages.resolver import Resolver
from routing.stages.sessions import session_key
from routing.stages.time_sensitivity import load_time_model
from routing.stages.world import WorldStage
from routing.types import ResolveContext

log = logging.getLogger(__name__)


class TooManyParts(ValueError):
    """The query splits into more parts than `routing.max_parts`.

    Raised once the query is decomposed (cheap) and before any part is resolved or sent
    to a source (embedding and source calls are not cheap): one request of hundreds of
    parts must not take the workers every other client's requests need.
    """

    field = "query"

    def __init__(self, parts: int, limit: int) -> None:
        self.parts = parts
        self.limit = limit
        super().__init__(
            f"query: {parts} parts, more than the maximum of {limit} (routing.max_parts)"
        )


# The (router, query) whose part count this request checked last: a surface checks first
# (to refuse before a model loads, a trace is written or a source is called) and
# `Router.run`, which checks for every other caller, does not check it again (any other
# query it checks anew). A ContextVar, so it is the request's own (each request runs in
# its own task).
_parts_checked: ContextVar[tuple[int, str] | None] = ContextVar("parts_checked", default=None)


@dataclass(slots=True)
class PartResult:
    """One entry of the response's `results`."""

    query: str
    source: str | None
    status: str  # ok | empty | error | planned | unserved | withheld
    items: list[dict[str, Any]] = field(default_factory=list)
    route: str | None = None
    stage: str | None = None
    error: dict[str, str] | None = None
    condition: PartResult | None = None
    # How sure routing is of `route`: the deciding stage's calibrated confidence, scaled by
    # how likely a time redirect is right when one moved the part (routing/dispatch/live.py)
    confidence: float | None = None
    withheld: dict[str, Any] | None = None
    # The question the part was asked as, when it was a follow-up rewritten from the
    # session ("how tall is it?" -> "how tall is the eiffel tower?").
    rewritten: str | None = None
    # On a condition: it reads "unless" (the consequence holds when it does not).
    negated: bool = False
    # On a dry run: the sources the part would try, and those out now (Dispatcher.plan).
    plan: dict[str, Any] | None = None
    # A snapshot answered a question meant for the live source (`snapshot_answered`).
    may_be_out_of_date: bool = False

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "query": self.query,
            "source": self.source,
            "status": self.status,
            "items": self.items,
            "route": self.route,
        }
        if self.stage is not None:
            data["stage"] = self.stage  # the intent step that decided the route
        if self.confidence is not None:  # as the deciding event states it (4 places)
            data["confidence"] = round(self.confidence, 4)
        if self.error is not None:
            data["error"] = self.error
        if self.rewritten is not None:
            data["rewritten"] = self.rewritten
        if self.withheld is not None:
            data["withheld"] = self.withheld
        if self.negated:
            data["negated"] = True
        if self.plan is not None:
            data["plan"] = self.plan
        if self.may_be_out_of_date:
            data["may_be_out_of_date"] = True
        if self.condition is not None:
            data["condition"] = self.condition.to_dict()
        return data


@dataclass(frozen=True, slots=True)
class _Unit:
    """A top-level piece of the query: a plain part, or a conditional with its sub-parts."""

    text: str
    conditional: Conditional | None = None


def _starts_with_condition(text: str) -> bool:
    lowered = text.lstrip().lower()
    return any(lowered.startswith(word + " ") for word in CONDITION_OPENERS)


# Parsing is a pure function of the text, and a household asks the same few questions over
# and over: remembering the last answers (bounded) takes it off the repeated request's path.
# The events are still recorded by the request, where the parse is used.
_MEMO_SIZE = 2048


Claimed = tuple[tuple[int, str, str], ...]  # (part index, route before, its route)


@lru_cache(maxsize=_MEMO_SIZE)
def _top_level(
    query: str, claims: Claims | None = None
) -> tuple[Conditional | None, tuple[str, ...], Claimed]:
    """A leading condition (if any), the parts of the rest, and the parts the keyword rules
    alone split off (with the routes they claimed)."""
    found = extract_conditional(query) if _starts_with_condition(query) else None
    rest = found.remainder if found is not None else query
    pieces = decompose_claimed(rest, claims) if rest.strip() else []
    offset = 1 if found is not None else 0  # the condition is unit 0
    claimed = tuple((index + offset, *routes) for index, (_, routes) in enumerate(pieces) if routes)
    return found, tuple(text for text, _ in pieces), claimed


_conditional_in = lru_cache(maxsize=_MEMO_SIZE)(extract_conditional)


def _live_redirect(
    resolver: Resolver, dispatcher: Dispatcher, config: TimeSensitiveConfig
) -> LiveRedirect:
    """The redirect, reading questions with the time-sensitivity model through the semantic
    stage's encoder when both are there (and the config does not switch the model off)."""
    semantic = resolver.stage("intent_semantic")
    embed = getattr(semantic, "embed", None)
    model = None
    # what each cue kind's verdict is worth, as the shipped fit measured it (cues are words:
    # their precision holds whichever embedding model runs, or none)
    shipped = load_time_model()
    cue_precision = dict(shipped.report.get("kind_precision", {})) if shipped else {}
    if config.model and embed is not None:
        if _bundled_model(semantic):
            model = shipped
        else:
            log.warning(
                "routing.time_sensitive: the time-sensitivity model was fitted in the bundled "
                "embedding model's space; with routing.semantic.model_path of another model "
                "only the cue words decide"
            )
    return LiveRedirect(dispatcher, config, model, embed, cue_precision)


def _bundled_model(semantic: Any) -> bool:
    """Whether the semantic stage embeds with the bundled model (the space the
    time-sensitivity model was fitted in): no `model_path`, or the bundled one's."""
    path = getattr(getattr(semantic, "config", None), "model_path", None)
    if not path:
        return True
    from routing.stages.embedder import default_model_path

    return Path(path).resolve() == Path(default_model_path()).resolve()


class Router:
    """Turns a query into part results, recording every step on the way."""

    def __init__(
        self,
        resolver: Resolver,
        dispatcher: Dispatcher,
        max_parts: int | None = None,
        time_sensitive: TimeSensitiveConfig | None = None,
        max_query_chars: int | None = None,
    ) -> None:
        """`max_query_chars` (`server.max_query_chars`): the longest query a source is sent;
        a follow-up whose rewrite would be longer is asked as said."""
        self.resolver = resolver
        self.dispatcher = dispatcher
        self.live = _live_redirect(resolver, dispatcher, time_sensitive or TimeSensitiveConfig())
        world = resolver.stage(WorldStage.name)
        if isinstance(world, WorldStage):
            world.reading = self.live.reading  # the same reading the redirect decides by
        self.claims: Claims | None = resolver.keyword_claims()
        self.max_parts = max_parts
        self.max_query_chars = max_query_chars

    def check_parts(self, query: str) -> int:
        """The number of top-level parts of `query` (a leading condition counts as one);
        raises `TooManyParts` over `max_parts`. Only decomposes (memoised), and marks the
        query checked for the rest of this request, so `run` does not check it again."""
        found, parts, _ = _top_level(query, self.claims)
        count = len(parts) + (found is not None)
        if self.max_parts is not None and count > self.max_parts:
            raise TooManyParts(count, self.max_parts)
        _parts_checked.set((id(self), query))
        return count

    def _units(self, query: str) -> list[_Unit]:
        found, parts, claimed = _top_level(query, self.claims)
        units: list[_Unit] = []
        if found is not None:
            record(
                Step.CONDITIONAL_DETECTED,
                query=query,
                condition=found.condition,
                consequence=found.consequence,
                remainder=found.remainder,
                negated=found.negated,
            )
            units.append(_Unit(query, found))
        units.extend(_Unit(part) for part in parts)
        if len(units) > 1:
            shown = [u.conditional.consequence if u.conditional else u.text for u in units]
            # a split where the grammar saw one request says which routes the rules claimed
            why = (
                {
                    "claimed": [
                        {"part": index, "routes": [before, after]}
                        for index, before, after in claimed
                    ]
                }
                if claimed
                else {}
            )
            record(Step.DECOMPOSED, query=query, parts=shown, **why)
        return units

    async def run(
        self,
        query: str,
        *,
        dry_run: bool = False,
        session_id: str | None = None,
        client: str | None = None,
        read_only: bool = False,
        authorized: bool = False,
        remember: bool | None = None,
    ) -> list[PartResult]:
        """`session_id`: the client's conversation; `client`: who the client is as far as
        the server can tell (its peer address; None for an in-process caller), so that a
        conversation is only ever continued by the client that started it (the context
        carries the store's key, `routing.stages.sessions.session_key`).
        `read_only`: the surface promised not to act; every command is withheld.
        `authorized`: the requester may act at all (never by default).
        `remember`: whether the session keeps this turn (by default not for a dry run, which
        plans and changes nothing; a replay refilling a session says so).
        Over `max_parts`, `TooManyParts` before anything embeds, calls or records, unless
        the surface already checked this query in this request."""
        if _parts_checked.get() != (id(self), query):
            self.check_parts(query)
        units = self._units(query)
        context = ResolveContext(
            session_id=session_key(client, session_id),
            dry_run=dry_run,
            read_only=read_only,
            authorized=authorized,
            request=query,
            remember=not dry_run if remember is None else remember,
        )
        if len(units) == 1:  # no fan-out: skip the task gather would create
            return await self._run_unit("0", units[0], context)
        batches = await asyncio.gather(
            *(self._run_unit(str(i), unit, context) for i, unit in enumerate(units))
        )
        return [result for batch in batches for result in batch]

    async def _run_unit(self, path: str, unit: _Unit, context: ResolveContext) -> list[PartResult]:
        with part_scope(path):
            conditional = unit.conditional
            if conditional is None:
                conditional = _conditional_in(unit.text)
                if conditional is not None:
                    record(
                        Step.CONDITIONAL_DETECTED,
                        query=unit.text,
                        condition=conditional.condition,
                        consequence=conditional.consequence,
                        remainder=conditional.remainder,
                        negated=conditional.negated,
                    )
                else:
                    return [await self._run_part(unit.text, context)]
        results = [await self._run_conditional(path, conditional, context)]
        if unit.conditional is None and conditional.remainder:
            with part_scope(f"{path}.2"):
                results.append(await self._run_part(conditional.remainder, context))
        return results

    async def _run_conditional(
        self, path: str, conditional: Conditional, context: ResolveContext
    ) -> PartResult:
        """The condition runs first; its result rides along with the consequence's, which
        is answered as under a condition (a command in it is withheld)."""
        with part_scope(f"{path}.0"):
            condition = await self._run_part(conditional.condition, context)
        with part_scope(f"{path}.1"):
            consequence = await self._run_part(conditional.consequence, context, conditional=True)
        condition.negated = conditional.negated
        consequence.condition = condition
        return consequence

    async def _run_part(
        self, text: str, shared: ResolveContext, *, conditional: bool = False
    ) -> PartResult:
        """A follow-up is asked as the question it stands for (`rewritten` records it);
        the result keeps the part's own words in `query`."""
        sessions = self.resolver.sessions
        asked = text
        if sessions is not None and shared.session_id:
            asked = await sessions.follow_up(
                text, shared.session_id, self.claims, max_chars=self.max_query_chars
            )
        result = await self._run_asked(
            asked, shared, conditional=conditional, rewritten=asked != text
        )
        if asked != text:
            result.query, result.rewritten = text, asked
        return result

    async def _run_asked(
        self,
        text: str,
        shared: ResolveContext,
        *,
        conditional: bool = False,
        rewritten: bool = False,
    ) -> PartResult:
        # Stages note things on the context, and parts run concurrently: one per part.
        context = ResolveContext(
            session_id=shared.session_id,
            dry_run=shared.dry_run,
            read_only=shared.read_only,
            authorized=shared.authorized,
            request=shared.request,
            remember=shared.remember,
        )
        try:
            decision = await self.resolver.resolve(text, context)
            if decision.route is None:
                return PartResult(
                    text, None, "unserved", stage=decision.stage, confidence=decision.confidence
                )
            # a snapshot's answer to a question of now may be old: a live source answers it
            ruled = context.keyword is not None and context.keyword.route == decision.route
            routed = await self.live.route(
                text,
                decision.route,
                decision.stage,
                context.embedding,
                by_rule=ruled,
                confidence=decision.confidence,
                ranked=decision.ranked,
            )
            circumstances = Circumstances(
                dry_run=context.dry_run,
                conditional=conditional,
                request=context.request,
                confident=decision.confident,
                read_only=context.read_only,
                rewritten=rewritten,
                authorized=context.authorized,
            )
            confidence = routed.confidence if routed.then else decision.confidence
            if context.dry_run:
                plan = self.dispatcher.plan(routed.route, text, routed.then)
                record(
                    Step.PLANNED,
                    query=text,
                    route=routed.route,
                    stage=decision.stage,
                    sources=list(plan.sources),
                    unavailable=dict(plan.unavailable),
                )
                self.dispatcher.withhold_plan(routed.route, text, circumstances)
                return PartResult(
                    text,
                    routed.route,
                    "planned",
                    route=routed.route,
                    stage=decision.stage,
                    confidence=confidence,
                    plan=plan.to_dict(),
                )
            answer: Answer = await self.dispatcher.answer(
                routed.route, text, circumstances, routed.then
            )
        except Exception as exc:  # noqa: BLE001 - one part's bug must not hide the others
            message = str(exc) or type(exc).__name__
            record(Step.ERROR, query=text, error_type=type(exc).__name__, message=message)
            return PartResult(
                text, None, "error", error={"type": type(exc).__name__, "message": message}
            )
        if answer.status == "error":
            error = answer.error or {"type": "error", "message": "failed"}
            record(Step.ERROR, query=text, error_type=error["type"], message=error["message"])
        live = self.live.stands_in(routed, answer.source) if answer.status == "ok" else None
        if live is not None:
            record(Step.SNAPSHOT_ANSWERED, query=text, source=answer.source, live_route=live)
        return PartResult(
            text,
            answer.source,
            answer.status,
            [item.to_dict() for item in answer.items],
            route=routed.route,
            stage=decision.stage,
            error=answer.error,
            withheld=answer.withheld,
            confidence=confidence,
            may_be_out_of_date=live is not None,
        )
