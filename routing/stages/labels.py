"""The household's labels as the first intent stage: a labelled query goes where it says.

A label is the household's correction of one part ("how is the garden shed" should have
gone to `ha`). It holds exactly for the words it was given (compared after
`routing.language.text.normalise`: case, spacing and punctuation aside) and for nothing
else: it is no exemplar, so it moves no other query's similarities, and it is not in the
fit of the confidence weights, so no other decision's confidence changes. That is what
"a few labels help and never hurt" needs: a label cannot be outvoted by the rules it
corrects, and it cannot lower routing it was not about.

The stage runs before every other (the decision cache included: an answer cached before
the label must not win over it). `none` means "no source serves this": the part ends
unserved, as a keyword `none` rule would end it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from routing.chain.events import record
from routing.chain.steps import Step
from routing.language.text import normalise
from routing.stages.confidence import ConfidenceModel, Ranked
from routing.stages.route_data import NONE
from routing.types import Decision, ResolveContext

LABEL_CONFIDENCE = 1.0  # the household's own word for exactly these words


@dataclass(frozen=True, slots=True)
class HouseholdRouting:
    """What a household's `search fit` gives routing: its labels, the confidence weights
    to use (None: the shipped ones) and a name for the whole, shown on the chain."""

    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    model: ConfidenceModel | None = None
    name: str = "shipped"

    @classmethod
    def of(
        cls, labels: Mapping[str, str], model: ConfidenceModel | None, name: str
    ) -> HouseholdRouting:
        """`labels`: query text -> route (or `none`); later entries win."""
        table = {normalise(text): route for text, route in labels.items() if normalise(text)}
        return cls(MappingProxyType(table), model, name)

    def route_for(self, query: str) -> str | None:
        return self.labels.get(normalise(query)) if self.labels else None


class LabelStage:
    """Decides a part whose words the household labelled; passes on every other part."""

    name = "intent_label"

    def __init__(self, household: HouseholdRouting, routes: set[str]) -> None:
        """`routes`: the configured routes; a label of a route no longer configured (a
        source removed since) is not applied, so the part is routed as if unlabelled."""
        self.household = household
        self.routes = routes

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        route = self.household.route_for(query)
        if route is None or (route != NONE and route not in self.routes):
            return None
        shown = {
            "confidence": LABEL_CONFIDENCE,
            "candidates": [{"route": route, "confidence": LABEL_CONFIDENCE, "margin": 0.0}],
            "fit": self.household.name,
        }
        if route == NONE:
            record(
                Step.INTENT_LABEL,
                query=query,
                decision=None,
                label=NONE,
                outcome="unserved",
                **shown,
            )
            context.unserved = True
            # the part ends unserved at the default, which states the label's confidence
            context.ranked = Ranked(((NONE, LABEL_CONFIDENCE),))
            return None
        record(Step.INTENT_LABEL, query=query, decision=route, label=route, **shown)
        return Decision(route, self.name, confidence=LABEL_CONFIDENCE)
