"""Fitting with the household's labels: the pieces `search fit` calls, and what it reports.

- `training_rows`: the stored labels as `(text, route, weight)` rows, one per query (the
  latest label wins, see search/correction/labels.py), weighted `LABEL_WEIGHT` times a shipped
  corpus row. A label stored redacted is left out: the store kept only its pseudonym.
- `label_overrides` / `with_labels`: the rows as routing data, so routing can use them
  without a model of their own: each labelled query becomes an exemplar of its route (the
  semantic stage then sends paraphrases there too) and a whole-query keyword phrase of
  weight `PHRASE_WEIGHT` (the exact words go there whatever the shipped rules say). A
  phrase matches only a query that contains all of it, so an unrelated query is untouched.
- `label_accuracy`: accuracy on the labelled set, under any router (before and after).
- `changed_decisions`: the stored traces whose routing would change, as rows of trace,
  query (its pseudonym on a redacted store, which cannot be re-routed), part, old, new.

- `labels_report`: all of the above for one store, as `search fit` prints it.
- `write_artefact` / `with_artefact`: the household's fitted rows in the data directory
  (beside the trace store, `routing-labels.json`), and a config with them applied.

A router is `async (query) -> [(part, route)]`, route `none` for an unserved part;
`dry_run_router(config)` builds one from a config (dry run, no trace stored).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routing.stages.route_data import RouteOverride, rule_key
from search.config import Config, ConfigError
from search.correction.labels import NONE, Label, effective_labels, is_pseudonym, part_decisions

LABEL_WEIGHT = 3.0  # one household label counts as much as this many shipped rows
PHRASE_WEIGHT = 20.0  # above any shipped keyword score a short query reaches

Router = Callable[[str], Awaitable[list[tuple[str, str]]]]


@dataclass(frozen=True, slots=True)
class TrainingRow:
    text: str
    route: str
    weight: float


def training_rows(labels: Iterable[Label], weight: float = LABEL_WEIGHT) -> list[TrainingRow]:
    """The effective labels as rows to fit on (redacted ones left out)."""
    return [
        TrainingRow(label.query, label.route, weight)
        for label in effective_labels(labels)
        if not label.redacted and not is_pseudonym(label.query)
    ]


def label_overrides(rows: Iterable[TrainingRow]) -> dict[str, RouteOverride]:
    """Per route, the labelled queries as exemplars and whole-query keyword phrases."""
    exemplars: dict[str, list[str]] = {}
    seen: set[str] = set()
    for row in rows:
        key = rule_key(row.text)
        if not key or key in seen:
            continue
        seen.add(key)
        exemplars.setdefault(row.route, []).append(row.text.strip())
    return {
        route: RouteOverride(
            exemplars=texts, keywords=[f"{rule_key(text)} ^{PHRASE_WEIGHT:g}" for text in texts]
        )
        for route, texts in exemplars.items()
    }


def with_labels(config: Config, rows: Sequence[TrainingRow]) -> Config:
    """`config` with the labelled rows added to its routes' data (the config is unchanged).

    A labelled query's text is dropped from every other route's added exemplars first, so
    relabelling a query moves it instead of leaving it on both routes.
    """
    if not rows:
        return config
    added = label_overrides(rows)
    labelled = {rule_key(text) for o in added.values() for text in o.exemplars}
    routes = {
        name: o.model_copy(
            update={"exemplars": [t for t in o.exemplars if rule_key(t) not in labelled]}
        )
        for name, o in config.routing.routes.items()
    }
    for route, extra in added.items():
        base = routes.get(route, RouteOverride())
        routes[route] = base.model_copy(
            update={
                "exemplars": [*base.exemplars, *extra.exemplars],
                "keywords": [*base.keywords, *extra.keywords],
            }
        )
    routing = config.routing.model_copy(
        update={
            "routes": routes,
            "labelled": [*config.routing.labelled, *(row.text for row in rows)],
        }
    )
    return config.model_copy(update={"routing": routing})


# --- routers and the report ------------------------------------------------------------


@asynccontextmanager
async def dry_run_router(config: Config) -> AsyncIterator[Router]:
    """A router over `config`: a Service started without sources, dry runs, no traces."""
    from search.service import Service
    from search.traces.records import NullTraceSink

    service = Service(config, traces=NullTraceSink())
    await service.start(sources=False)

    async def route(query: str) -> list[tuple[str, str]]:
        outcome = await service.search(query, dry_run=True)
        found = []
        for index, result in enumerate(outcome.results):
            if result.condition is not None:
                found.append((f"{index}.0", result.condition))
            found.append((str(index), result))
        return [
            (part, NONE if r.status == "unserved" or r.route is None else r.route)
            for part, r in found
        ]

    try:
        yield route
    finally:
        await service.aclose()


async def label_accuracy(rows: Sequence[TrainingRow], router: Router) -> float:
    """The share of labelled queries whose every part goes to the labelled route."""
    if not rows:
        return 1.0
    right = 0
    for row in rows:
        parts = await router(row.text)
        right += bool(parts) and all(route == row.route for _, route in parts)
    return right / len(rows)


@dataclass(frozen=True, slots=True)
class ChangedDecision:
    trace_id: str
    query: str  # the part's query as stored (a pseudonym when redacted)
    part: str
    old: str
    new: str


async def changed_decisions(
    traces: Iterable[dict[str, Any]], router: Router
) -> tuple[list[ChangedDecision], int]:
    """Parts of stored traces whose route differs under `router` from what was recorded,
    and how many traces could not be re-routed (stored redacted)."""
    changed: list[ChangedDecision] = []
    redacted = 0
    for trace in traces:
        if trace.get("redacted") or is_pseudonym(str(trace.get("query", ""))):
            redacted += 1
            continue
        recorded = part_decisions(trace.get("chain") or [])
        now = dict(await router(str(trace["query"])))
        for part, decision in sorted(recorded.items()):
            old = decision.decision or NONE
            new = now.get(part)
            if new is not None and new != old:
                changed.append(
                    ChangedDecision(str(trace["trace_id"]), decision.query, part, old, new)
                )
    return changed, redacted


def stored_originals(store: Any, limit: int = 10_000) -> list[dict[str, Any]]:
    """The recorded (not replayed) traces of a store, oldest first."""
    from search.traces.store import TraceFilter

    found: list[dict[str, Any]] = []
    cursor: int | None = None
    while len(found) < limit:
        page = store.list_traces(
            TraceFilter(originals_only=True, limit=500, cursor=cursor, oldest_first=True)
        )
        for summary in page["traces"]:
            trace = store.get_trace(summary["trace_id"])
            if trace is not None:
                found.append(trace)
        if not page["next_cursor"]:
            break
        cursor = int(page["next_cursor"])
    return found[:limit]


def report_lines(
    before: float,
    after: float,
    rows: int,
    changed: list[ChangedDecision],
    redacted_traces: int = 0,
    redacted_labels: int = 0,
) -> list[str]:
    """What `search fit` prints about the labels."""
    from search.traces.render import aligned

    lines = [f"labelled set: {rows} queries; accuracy before {before:.1%}, after {after:.1%}"]
    if redacted_labels:
        lines.append(f"  ({redacted_labels} label(s) stored redacted were left out)")
    if changed:
        lines.append(f"stored decisions that change: {len(changed)}")
        table = [("trace", "part", "query", "old", "new")]
        table += [
            (
                c.trace_id,
                c.part,
                c.query if len(c.query) <= 60 else c.query[:57] + "...",
                c.old,
                c.new,
            )
            for c in changed
        ]
        lines.append(aligned(table))
    else:
        lines.append("no stored decision changes")
    if redacted_traces:
        lines.append(f"({redacted_traces} stored redacted trace(s) could not be re-routed)")
    return lines


async def labels_report(config: Config, store: Any) -> tuple[list[TrainingRow], Config, list[str]]:
    """Everything `search fit` needs about the labels: the rows, `config` with them, and the
    report (accuracy on the labelled set before and after; the stored decisions that
    change). Loads the model twice (before, after); stores nothing."""
    labels = store.labels()
    rows = training_rows(labels)
    redacted_labels = len(effective_labels(labels)) - len(rows)
    fitted = with_labels(config, rows)
    traces = stored_originals(store)
    async with dry_run_router(config) as router:
        before = await label_accuracy(rows, router)
    async with dry_run_router(fitted) as router:
        after = await label_accuracy(rows, router)
        changed, redacted_traces = await changed_decisions(traces, router)
    lines = report_lines(before, after, len(rows), changed, redacted_traces, redacted_labels)
    return rows, fitted, lines


# --- the user's artefact: beside the trace store, not in the package ----------------------

ARTEFACT_NAME = "routing-labels.json"
CONFIDENCE_NAME = "routing-confidence.json"  # the weights `search fit` fitted here


def artefact_path(config: Config) -> Path:
    """Where the household's fitted labels live: the trace store's directory (the data
    directory), so a package upgrade never replaces them."""
    return Path(os.path.abspath(os.path.expanduser(config.trace.path))).parent / ARTEFACT_NAME


def confidence_path(config: Config) -> Path:
    """Where `search fit` writes the household's fitted weights: beside the labels."""
    return artefact_path(config).with_name(CONFIDENCE_NAME)


def write_artefact(path: Path, rows: Sequence[TrainingRow]) -> None:
    """The rows, written whole or not at all (a temporary file renamed over the old one).

    It holds the labelled rows, not routing data derived from the shipped corpus: every
    `search fit` recomputes the rest against the shipped data of the installed version.
    """
    body = {
        "version": 1,
        "rows": [{"text": r.text, "route": r.route, "weight": r.weight} for r in rows],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(body, handle, ensure_ascii=False, indent=1)
    os.chmod(temp, 0o600)  # the household's own phrasing, like the trace store
    os.replace(temp, path)


def read_artefact(path: Path) -> list[TrainingRow]:
    """The fitted rows, or none when there is no artefact (never fitted)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [
            TrainingRow(str(r["text"]), str(r["route"]), float(r["weight"])) for r in data["rows"]
        ]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"{path}: not a fitted labels file ({exc}); run `search fit` again to rewrite it"
        ) from None


def with_artefact(config: Config) -> Config:
    """`config` with the household's fitted labels, when `search fit` has written them
    (a label of a route no longer configured is left out)."""
    from routing.stages.build import route_descriptions

    weights = confidence_path(config)
    if config.routing.confidence_path is None and weights.exists():
        routing = config.routing.model_copy(update={"confidence_path": str(weights)})
        config = config.model_copy(update={"routing": routing})
    rows = read_artefact(artefact_path(config))
    known = {*route_descriptions(config), NONE}
    return with_labels(config, [row for row in rows if row.route in known])
