"""A household fit: the stored labels and the weights, checked by the pipeline that routes.

`search fit` (search/correction/fit_cli.py) calls these pieces:

- `applied_labels`: the labels to apply, the latest per query (search/correction/labels.py),
  and those that cannot be, each with why (stored redacted: the store kept a pseudonym, not
  the words; a route no longer configured).
- `household_weights`: the confidence weights for the household's routes. A household's
  labels are corrections that must hold, not evidence to re-weigh every other decision
  by: they never enter the fit of the weights, so a few labels cannot lower the shipped
  corpora's held-out figures or the threshold. The shipped weights are right for the
  shipped routes; routes the household changed (config `routing.routes`) get weights
  fitted for them on the shipped corpora.
- `labels_report`: what the new artefact changes, found by running it: each labelled
  query routed by the same dry-run `Service` that `search route` and `search check` use
  (before and after), and the stored traces replayed by the same sweep `search replay
  --all` runs. A label that would still not hold is listed with the chain's reason.

A router is `async (query) -> [(part, route, stage)]`, route `none` for an unserved part.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from routing.stages.build import route_descriptions
from routing.stages.confidence import ConfidenceModel
from routing.stages.labels import HouseholdRouting
from search.config import Config
from search.correction.household import AppliedLabel
from search.correction.labels import NONE, Label, effective_labels, is_pseudonym

Router = Callable[[str], Awaitable[list[tuple[str, str, str]]]]


@dataclass(frozen=True, slots=True)
class NotApplied:
    label: Label
    why: str


def applied_labels(
    labels: Iterable[Label], config: Config
) -> tuple[list[AppliedLabel], list[NotApplied]]:
    """The effective labels the artefact can apply, and those it cannot (with why)."""
    known = {*route_descriptions(config), NONE}
    applied: list[AppliedLabel] = []
    skipped: list[NotApplied] = []
    for label in effective_labels(labels):
        if label.redacted or is_pseudonym(label.query):
            skipped.append(NotApplied(label, "stored redacted: the store kept no words to match"))
        elif label.route not in known:
            skipped.append(NotApplied(label, f"route {label.route!r} is not configured"))
        else:
            applied.append(
                AppliedLabel(label.query, label.route, label.id, label.trace_id, label.part)
            )
    return applied, skipped


def routes_are_shipped(config: Config) -> bool:
    """Whether the household routes with the shipped route data, for which the shipped
    weights were fitted (the same routes, none added to or disabled)."""
    from routing.stages.build import resolved_routes
    from routing.stages.route_data import shipped_routes

    routing = config.routing
    return (
        routing.shipped_routes
        and not routing.route_overrides()
        and set(resolved_routes(config)) - {NONE} == set(shipped_routes()) - {NONE}
    )


async def household_weights(config: Config) -> tuple[ConfidenceModel | None, dict[str, Any]]:
    """None (the shipped weights) for the shipped routes; else weights fitted for the
    household's routes on the shipped corpora, with the fit's held-out report."""
    if routes_are_shipped(config) or not config.routing.semantic.enabled:
        # (without the semantic stage only the keyword weights decide, and the keyword
        # features of the shipped fit are the same for any route data)
        return None, {}
    from routing.fitting import fit

    return await fit.fit(config)


# --- routing with an artefact, as every command does --------------------------------------


@asynccontextmanager
async def dry_run_router(
    config: Config, household: HouseholdRouting | None
) -> AsyncIterator[Router]:
    """A router over `config` and `household`: a Service started without sources, dry
    runs, no traces."""
    from search.service import Service
    from search.traces.records import NullTraceSink

    service = Service(config, traces=NullTraceSink(), household=household)
    await service.start(sources=False)

    async def route(query: str) -> list[tuple[str, str, str]]:
        outcome = await service.search(query, dry_run=True)
        found = []
        for index, result in enumerate(outcome.results):
            if result.condition is not None:
                found.append((f"{index}.0", result.condition))
            found.append((str(index), result))
        return [
            (part, NONE if r.status == "unserved" or r.route is None else r.route, r.stage or "-")
            for part, r in found
        ]

    try:
        yield route
    finally:
        await service.aclose()


@dataclass(frozen=True, slots=True)
class LabelOutcome:
    """How one labelled query routes under the new artefact."""

    label: AppliedLabel
    before: str
    after: str
    stage: str

    @property
    def holds(self) -> bool:
        return self.after == self.label.route


async def route_labels(labels: Sequence[AppliedLabel], router: Router) -> list[tuple[str, str]]:
    """(route, stage) of each labelled query: every part's, joined with " + " when they differ."""
    found = []
    for label in labels:
        parts = await router(label.query)
        routes = sorted({route for _, route, _ in parts})
        found.append((" + ".join(routes) or "-", " + ".join(sorted({s for *_, s in parts}))))
    return found


@dataclass(slots=True)
class LabelsReport:
    applied: list[AppliedLabel]
    skipped: list[NotApplied]
    outcomes: list[LabelOutcome] = field(default_factory=list)
    changes: list[tuple[str, str]] = field(default_factory=list)
    changed_traces: list[str] = field(default_factory=list)
    replayed: int = 0
    skipped_traces: int = 0

    def accuracy(self, after: bool) -> float:
        if not self.outcomes:
            return 1.0
        right = sum((o.after if after else o.before) == o.label.route for o in self.outcomes)
        return right / len(self.outcomes)

    def lines(self) -> list[str]:
        """What `search fit` prints about the labels."""
        from search.traces.render import aligned

        lines = [
            f"labelled set: {len(self.outcomes)} queries; routed as labelled before "
            f"{self.accuracy(False):.1%}, after {self.accuracy(True):.1%}"
        ]
        failing = [o for o in self.outcomes if not o.holds]
        if failing:
            lines.append(f"labels that would not hold ({len(failing)}):")
            for o in failing:
                lines.append(
                    f"  {o.label.query!r}: labelled {o.label.route}, routes {o.after} ({o.stage})"
                )
        for item in self.skipped:
            lines.append(f"not applied: {item.label.query!r} -> {item.label.route}: {item.why}")
        if self.changes:
            lines.append(
                f"stored decisions that change ({len(self.changed_traces)} trace(s) of "
                f"{self.replayed} replayed, as `search replay --all` will list them):"
            )
            lines.append(aligned([("trace", "change"), *self.changes]))
        else:
            lines.append(f"no stored decision changes ({self.replayed} trace(s) replayed)")
        if self.skipped_traces:
            lines.append(f"({self.skipped_traces} stored redacted trace(s) could not be replayed)")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "labels": len(self.outcomes),
            "before": round(self.accuracy(False), 4),
            "after": round(self.accuracy(True), 4),
            "not_holding": [
                {
                    "query": o.label.query,
                    "route": o.label.route,
                    "routes": o.after,
                    "stage": o.stage,
                }
                for o in self.outcomes
                if not o.holds
            ],
            "not_applied": [
                {"query": s.label.query, "route": s.label.route, "why": s.why} for s in self.skipped
            ],
            "routing_changed": self.changed_traces,
            "changes": [{"trace_id": t, "change": c} for t, c in self.changes],
            "replayed": self.replayed,
        }


async def labels_report(
    config: Config,
    store: Any,
    labels: Sequence[Label],
    current: HouseholdRouting | None,
    new: HouseholdRouting,
    progress: Callable[[str], None] = lambda _: None,
) -> LabelsReport:
    """Route the labelled queries under the current artefact and the new one, and replay
    the stored traces under the new one, exactly as `search replay --all` would."""
    from search.correction.replay import Replayer, original_ids, sweep
    from search.traces.records import NullTraceSink
    from search.traces.store import TraceFilter

    applied, skipped = applied_labels(labels, config)
    report = LabelsReport(applied, skipped)
    progress(f"routing {len(applied)} labelled queries before and after")
    async with dry_run_router(config, current) as router:
        before = await route_labels(applied, router)
    async with dry_run_router(config, new) as router:
        after = await route_labels(applied, router)
    report.outcomes = [
        LabelOutcome(label, was[0], now[0], now[1])
        for label, was, now in zip(applied, before, after, strict=True)
    ]
    if store is not None:
        ids = original_ids(store, TraceFilter(), False, None)
        progress(f"replaying {len(ids)} stored traces under the new artefact")
        async with Replayer(config, NullTraceSink(), history=store, household=new) as replayer:
            found = await sweep(replayer, store, ids)
        report.changes, report.changed_traces = found.changes, found.changed_traces
        report.replayed, report.skipped_traces = found.replayed, len(found.skipped)
    return report
