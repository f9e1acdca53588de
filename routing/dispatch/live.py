"""A question whose answer changes with time goes to a live source, not a snapshot.

An offline encyclopedia answers "who is the current mayor" with whoever it was when the
snapshot was taken, and confidently. When the intent stages route such a part to a
snapshot route (`routing.time_sensitive.from_routes`, kiwix) and a live source is
configured (`live_route`, web), the part goes there, with the snapshot as its fallback.
When that source is disabled the part is still routed there, like any part a stage
routes to it, and the snapshot answers after it; with no live source configured the
snapshot is the route. Then the chain says the snapshot's answer may be out of date.
Either way `time_sensitive` is recorded here, where the choice is made.

What says a question is time-sensitive: its cue words (routing/language/time_sensitive.py)
and, when the semantic stage runs, the fitted model over its embedding
(routing/stages/time_sensitivity.py), which finds questions no cue word marks and
confirms the cue kinds that also fire on fixed facts. The event names the cue (or
`kind: "model"` when the model alone said so) and the model's probability. A part the
keyword rules routed has no embedding yet: reading it costs one (about 15 ms on 2 cores),
once per question, since the probability is remembered per normalised text.

A part sent elsewhere no longer has the stage's confidence: the stage was sure of the
snapshot route, not of the live one. Its confidence becomes the stage's in the two routes
together (that it is a question for either) times how likely the redirect is right
(`confidence` on the event, and the part's result): the model's
probability when it alone said so, the share of time-sensitive questions among those its
cue kind marks (as the time model's fit measured it) when a cue said so, the larger of the
two when the model had to confirm the cue, and one minus the model's probability for a
question sent to the snapshot.

The other way, a question about the world that a stage sent to the live route by likeness
to its exemplars (not by a keyword rule), and that no cue word and not the model reads as
changing with time, goes to the snapshot, the live route after it (`time_stable`): "who
won the 1966 world cup" is near "who won the game last night" in meaning, but its answer
is fixed.

Only a question a stage judged encyclopedic is redirected: a part that ended at the
default (nothing judged it) keeps the default, a part the household labelled keeps the
route of its label (the household said where these words go), and a part any source
reads as a command ("turn the lights off now") keeps its route, so time words never move
a command.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from routing.chain.events import record
from routing.chain.steps import Step
from routing.config import TimeSensitiveConfig
from routing.dispatch.dispatcher import Dispatcher
from routing.language.sentences import about_the_world, asks_about_the_world
from routing.language.text import normalise, words
from routing.language.time_sensitive import time_cue
from routing.stages.confidence import Ranked
from routing.stages.time_sensitivity import TimeSensitivityModel, Verdict
from routing.stages.world import TimeReading

Embed = Callable[[str], Awaitable[Any]]  # a text's normalised embedding (None: no model)
_REMEMBERED = 4096  # verdicts kept per process: a household asks the same few questions

DEFAULT = "intent_default"  # the stage that decided nothing
KEPT_STAGES = frozenset({DEFAULT, "intent_label"})  # decisions a time word never moves
# Stages that decide by a rule someone wrote: a live route they name is not second-guessed
# ("latest news" by the keyword rules, a follow-up by the session).
RULED_STAGES = frozenset({"intent_keyword", "intent_session"})
# The stage that chose between the snapshot and the live route by this same reading.
TIMED_STAGE = "intent_world"


@dataclass(frozen=True, slots=True)
class Routed:
    """Where a part goes, and the routes whose chains follow if that fails (only a redirect
    has them: the route it left); then also how sure routing is of the new route (None: not
    known). `no_live_route`: its answer changes with time, but no live route is configured
    to take it, so the snapshot it stays on answers a question of now. (A part redirected
    to the live route says so by its route.)"""

    route: str
    then: tuple[str, ...] = ()
    confidence: float | None = None
    no_live_route: bool = False


def _times(stated: float | None, likely: float | None) -> float | None:
    return None if stated is None or likely is None else round(stated * likely, 4)


class LiveRedirect:
    """Sends time-sensitive parts from a snapshot route to the live one, and questions the
    model reads as fixed from the live route to the snapshot."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        config: TimeSensitiveConfig,
        model: TimeSensitivityModel | None = None,
        embed: Embed | None = None,
        cue_precision: Mapping[str, float] | None = None,
    ) -> None:
        """`model` and `embed` (the semantic stage's encoder): the fitted reading; without
        them only the cue words decide, and nothing is sent to a snapshot. `cue_precision`:
        per cue kind, the share of the questions it marks whose answer changes with time."""
        self.dispatcher = dispatcher
        self.config = config
        self.cue_precision = dict(cue_precision or {})
        self.from_routes = frozenset(config.from_routes)
        self._between = self.from_routes | {config.live_route}  # the routes a redirect weighs
        self.model = model if embed is not None else None
        self.embed = embed
        # the model's probability per normalised text: a pure function of the words
        self._probabilities: OrderedDict[str, float] = OrderedDict()

    def _unavailable(self) -> str | None:
        """Why the live route cannot answer (None when it can)."""
        live = self.config.live_route
        if live in self.dispatcher.fusion:
            return None
        if live not in self.dispatcher.enabled:  # every configured source, enabled or not
            return "not_configured"
        if not self.dispatcher.enabled[live] or live not in self.dispatcher.sources:
            return "disabled"
        return None

    async def _probability(self, text: str, embedding: Any) -> float | None:
        """The model's probability that `text`'s answer changes with time (None: no model,
        not started, or an embedding model other than the one it was fitted for)."""
        if self.model is None or self.embed is None:
            return None
        key = normalise(text)
        probability = self._probabilities.get(key)
        if probability is None:
            vector = embedding if embedding is not None else await self.embed(text)
            if vector is None or len(vector) != self.model.dimension:
                return None
            probability = self.model.probability(vector, key)
            self._probabilities[key] = probability
            if len(self._probabilities) > _REMEMBERED:
                self._probabilities.popitem(last=False)
        return probability

    async def _verdict(self, text: str, embedding: Any) -> Verdict | None:
        """The cue words' verdict, read with the model's when there is one."""
        cue = time_cue(text)
        probability = await self._probability(text, embedding)
        if probability is None or self.model is None:
            return None if cue is None else Verdict(True, None, cue)
        verdict = self.model.judge(cue, probability)
        return verdict if verdict.sensitive else None

    async def route(
        self,
        text: str,
        route: str,
        stage: str,
        embedding: Any = None,
        *,
        by_rule: bool = False,
        confidence: float | None = None,
        ranked: Ranked | None = None,
    ) -> Routed:
        """The route `text` goes to, recording `time_sensitive` when its time words (or the
        model) change it, or would, had a live source been enabled, and `time_stable` when
        the model sends it from the live route to a snapshot. `embedding`: the part's, when
        a stage already computed it. `by_rule`: the keyword rules named `route` too (a
        semantic decision they back is not one by likeness alone). `confidence`: the
        stage's, and `ranked`, what it beat: a redirect states how likely the part is one
        of the two routes at all (`_either`) times how likely the redirect is right."""
        if not self.config.enabled or stage in KEPT_STAGES:
            return Routed(route)
        if stage == TIMED_STAGE:  # already read for time: the snapshot follows the live route
            snapshots = self.config.from_routes[:1] if route == self.config.live_route else []
            return Routed(route, tuple(snapshots), confidence=confidence)
        to_live = route in self.from_routes
        to_snapshot = (
            self.model is not None
            and route == self.config.live_route
            and stage not in RULED_STAGES
            and not by_rule
        )
        # (most parts are neither: a forecast, a command; they pay for nothing below)
        if not (to_live or to_snapshot) or self.dispatcher.is_command(text):
            return Routed(route)
        either = self._either(confidence, ranked)
        if to_live:
            return await self._to_live(text, route, embedding, either)
        return await self._to_snapshot(text, route, embedding, either)

    async def reading(self, text: str, embedding: Any = None) -> TimeReading | None:
        """For a part the stages could not place between the snapshot and the live route
        (routing.stages.world): whether its answer changes with time and how likely that
        is right. None when nothing can say: time-sensitivity off, no snapshot or no live
        route configured, a command, not about the world, or no model (a cue alone says
        when an answer changes, never that it does not). Unlike the redirect, it reads a
        phrase with no question word too ("2015 book award winners", typed as into a
        search box: `about_the_world`): the stages were already sure it is one of the two
        routes', which is what a question word tells the redirect."""
        config = self.config
        if (
            not config.enabled
            or not config.from_routes
            or self._unavailable() == "not_configured"
            or not about_the_world(words(text))
            or self.dispatcher.is_command(text)
        ):
            return None
        pair = (config.from_routes[0], config.live_route)
        verdict = await self._verdict(text, embedding)
        if verdict is not None:
            likely = self._likely(verdict)
            if likely is None:
                return None
            cue = verdict.cue.cue if verdict.cue is not None else None
            return TimeReading(True, likely, *pair, cue, verdict.kind, verdict.probability)
        # not time-sensitive; the model's probability is remembered from `_verdict`
        probability = await self._probability(text, embedding)
        if probability is None:
            return None
        return TimeReading(False, 1.0 - probability, *pair, probability=probability)

    def _either(self, confidence: float | None, ranked: Ranked | None) -> float | None:
        """How likely the part is a question for the snapshot or the live route, the two a
        redirect chooses between: the stage's confidence in both together. Its confidence in
        the one it chose alone counts against the part every question the fit was told is
        the other's ("the current mayor" labelled web where the stage said kiwix), which the
        redirect is for: that product states less than it gets right."""
        if confidence is None or ranked is None:
            return confidence
        return min(1.0, sum(p for route, p in ranked.routes if route in self._between))

    def _likely(self, verdict: Verdict) -> float | None:
        """How likely a time-sensitive verdict is right (None: nothing measured says)."""
        if verdict.cue is None or verdict.kind == "model":
            return verdict.probability
        likely = self.cue_precision.get(verdict.kind)
        confirmed = self.model is not None and verdict.kind in self.model.confirmed_kinds
        if confirmed and verdict.probability is not None:
            return max(likely or 0.0, verdict.probability)
        return likely

    async def _to_live(
        self, text: str, route: str, embedding: Any, confidence: float | None
    ) -> Routed:
        verdict = await self._verdict(text, embedding)
        if verdict is None:
            return Routed(route)
        live = self.config.live_route
        why = self._unavailable()
        # A live source that is configured but disabled is still the part's route, as for
        # any part a stage routes there: the dispatcher skips it (recorded) and the
        # snapshot answers. Only a live route nobody configured is no route at all.
        to_route = route if why == "not_configured" else live
        extra: dict[str, Any] = {} if why is None else {"reason": why}
        if verdict.probability is not None:
            extra["probability"] = round(verdict.probability, 4)
        stated = _times(confidence, self._likely(verdict))
        if to_route != route and stated is not None:
            extra["confidence"] = stated
        record(
            Step.TIME_SENSITIVE,
            query=text,
            cue=verdict.cue.cue if verdict.cue is not None else None,
            kind=verdict.kind,
            from_route=route,
            to_route=to_route,
            live_route=live,
            **extra,
        )
        if to_route == route:
            return Routed(route, no_live_route=True)
        return Routed(live, (route,), confidence=stated)

    def stands_in(self, routed: Routed, source: str | None) -> str | None:
        """The live route that `source`, a snapshot's, answered in place of (None when it
        did not): the part was routed to the live route (by a stage, or by its time words)
        and the live source gave no answer, or it was read as time-sensitive with no live
        route to take it. The answer may be out of date."""
        live = self.config.live_route
        meant_for = live if routed.no_live_route else routed.route
        return live if self.config.snapshot_for_live(meant_for, source) else None

    async def _to_snapshot(
        self, text: str, route: str, embedding: Any, confidence: float | None
    ) -> Routed:
        """A question about the world that a stage judged by likeness (not by a rule) to
        be the live route's, which no cue word and not the model reads as changing with
        time: a snapshot answers it, with the live route after it. The model says "fixed"
        as surely as it says "time-sensitive" alone: at 1 - its threshold."""
        snapshot = self.config.from_routes[0] if self.config.from_routes else None
        if (
            snapshot is None
            or self.model is None
            or not asks_about_the_world(words(text))
            or time_cue(text) is not None
        ):
            return Routed(route)
        probability = await self._probability(text, embedding)
        below = round(1.0 - self.model.threshold, 4)
        if probability is None or probability >= below:
            return Routed(route)
        stated = _times(confidence, 1.0 - probability)
        extra: dict[str, Any] = {} if stated is None else {"confidence": stated}
        record(
            Step.TIME_STABLE,
            query=text,
            from_route=route,
            to_route=snapshot,
            probability=round(probability, 4),
            below=below,
            **extra,
        )
        return Routed(snapshot, (route,), confidence=stated)
