"""A part about the world whose source the stages could not tell: time tells.

(A question about the world, or a phrase typed as into a search box, "2015 national book
award winners": which parts the reading reads is routing.dispatch.live's to say.)

The semantic stage weighs the encyclopedia (a snapshot) against the live web by likeness
to their exemplars, and the two are close in meaning: "who coaches the national team"
and "who coached the national team in 1990" differ in one word. So it often declines
between them ("kiwix 0.45, web 0.40") while being sure, taken together, that the part is
a question for one of them. What tells them apart is whether the answer changes with
time, which the time-sensitivity reading measures (routing.dispatch.live: the cue words
and the fitted model). This stage, after every other has passed and before the default,
asks that reading and routes the part to the live source when its answer changes, to
the snapshot when it does not.

Its confidence is the two routes' summed confidence times how likely the reading is
right (the model's probability, or one minus it for a fixed answer; a cue's measured
precision); below `min_confidence` it declines like any stage, and the default follows.
It does nothing when no reading is wired in (no live route, or no model to read a
fixed answer by), when the part is unserved, or when the semantic model did not know the
query's words (its candidates then say nothing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from routing.chain.events import record
from routing.chain.steps import Step
from routing.stages.confidence import Ranked
from routing.types import Decision, ResolveContext


@dataclass(frozen=True, slots=True)
class TimeReading:
    """Whether a question's answer changes with time, how likely that is right, and the
    two routes it chooses between."""

    sensitive: bool
    likely: float  # how likely `sensitive` is right
    snapshot_route: str
    live_route: str
    cue: str | None = None
    kind: str | None = None
    probability: float | None = None  # the model's, when it read the question

    @property
    def route(self) -> str:
        return self.live_route if self.sensitive else self.snapshot_route


# The part's text and its embedding (None: not computed) -> the reading, or None when
# there is none to give (no live route configured, a command, no model).
Reading = Callable[[str, Any], Awaitable[TimeReading | None]]


class WorldStage:
    """Routes a question about the world by whether its answer changes with time, when
    the stages before it were sure of the pair of routes but not of which."""

    name = "intent_world"

    def __init__(self, min_confidence: float, reading: Reading | None = None) -> None:
        self.min_confidence = min_confidence
        self.reading = reading  # wired by the router, which owns the live redirect

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        ranked = context.ranked
        if self.reading is None or ranked is None or context.unserved or context.unknown_words:
            return None
        reading = await self.reading(query, context.embedding)
        if reading is None:
            return None
        shares = dict(ranked.routes)
        world = min(
            1.0, shares.get(reading.snapshot_route, 0.0) + shares.get(reading.live_route, 0.0)
        )
        confidence = round(world * reading.likely, 4)
        if world < self.min_confidence or confidence < self.min_confidence:
            return None
        route = reading.route
        other = reading.snapshot_route if reading.sensitive else reading.live_route
        # The pair's share split by the reading; the other routes keep theirs (sums to 1).
        pair = ((route, confidence), (other, round(world - confidence, 4)))
        rest = tuple((r, p) for r, p in ranked.routes if r not in (route, other))
        chosen = Ranked(tuple(sorted((*pair, *rest), key=lambda item: -item[1])))
        record(
            Step.INTENT_WORLD,
            query=query,
            decision=route,
            world=round(world, 4),
            time_sensitive=reading.sensitive,
            cue=reading.cue,
            kind=reading.kind,
            probability=None if reading.probability is None else round(reading.probability, 4),
            confidence=confidence,
            candidates=chosen.candidates(),
            threshold=self.min_confidence,
        )
        return Decision(route, self.name, confidence=confidence, ranked=chosen)
