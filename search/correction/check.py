"""`search check FILE`: pin how phrasings route, the way Home Assistant's intent tests do.

FILE is YAML, either a mapping `query: route` or a list of `{query, route}` (what
`search label --export` writes). Each query is routed as a dry run (no source is called,
nothing is acted on); `got` is the route its part went to, `none` when it was judged
something no source serves. A query that splits into several parts matches only when
every part went to the expected route.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from search.correction.labels import INTENT_STEPS, NONE
from search.query_text import query_problem

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CheckFileError(ValueError):
    """The file cannot be read as expectations (exit 2); the message says where."""


@dataclass(frozen=True, slots=True)
class Expectation:
    query: str
    route: str


@dataclass(frozen=True, slots=True)
class CheckRow:
    query: str
    expected: str
    got: str
    stage: str
    confidence: float | None

    @property
    def ok(self) -> bool:
        return self.got == self.expected


def _entry(where: str, query: Any, route: Any, routes: set[str], max_chars: int) -> Expectation:
    if not isinstance(query, str):
        raise CheckFileError(f"{where}: the query must be a string")
    problem = query_problem(query, max_chars)
    if problem is not None:
        raise CheckFileError(f"{where}: {problem}")
    if not isinstance(route, str) or route not in routes:
        known = ", ".join(sorted(routes))
        raise CheckFileError(f"{where}: route {route!r} is not a route (known: {known})")
    return Expectation(query, route)


def parse_expectations(
    text: str, routes: Iterable[str], max_chars: int, name: str = "FILE"
) -> list[Expectation]:
    """Expectations from YAML text; CheckFileError names what is wrong."""
    known = {*routes, NONE}
    try:
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise CheckFileError(f"{name}: not valid YAML: {exc}") from None
    found: list[Expectation] = []
    if isinstance(data, dict):
        for query, route in data.items():
            found.append(_entry(f"{name}: {query!r}", query, route, known, max_chars))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            where = f"{name}[{index}]"
            if not isinstance(item, dict) or set(item) != {"query", "route"}:
                raise CheckFileError(f"{where}: must be a mapping with exactly query and route")
            found.append(_entry(where, item["query"], item["route"], known, max_chars))
    else:
        raise CheckFileError(
            f"{name}: must be a mapping query: route, or a list of {{query, route}}"
        )
    if not found:
        raise CheckFileError(f"{name}: holds no queries")
    return found


def read_expectations(path: str, routes: Iterable[str], max_chars: int) -> list[Expectation]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CheckFileError(f"{path}: cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CheckFileError(f"{path}: not UTF-8 text") from None
    return parse_expectations(text, routes, max_chars, path)


def _confidence(chain: list[dict[str, Any]], part: str) -> float | None:
    """The deciding intent event's `confidence`, where the stages record one."""
    value = None
    for event in chain:
        confidence = event.get("confidence")
        if (
            event.get("step") in INTENT_STEPS
            and event.get("part") == part
            and isinstance(confidence, (int, float))
        ):
            value = float(confidence)
    return value


def check_row(expectation: Expectation, outcome: Any) -> CheckRow:
    """The row for one dry-run `outcome` (a Service search result)."""
    parts = []
    for index, result in enumerate(outcome.results):
        if result.condition is not None:
            parts.append((f"{index}.0", result.condition))
        parts.append((str(index), result))
    routes = [NONE if r.status == "unserved" or r.route is None else r.route for _, r in parts]
    stages = [r.stage or "-" for _, r in parts]
    confidences = [_confidence(outcome.chain, part) for part, _ in parts]
    if len(parts) == 1:
        return CheckRow(expectation.query, expectation.route, routes[0], stages[0], confidences[0])
    got = routes[0] if len(set(routes)) == 1 else " + ".join(routes)
    known = [c for c in confidences if c is not None]
    return CheckRow(
        expectation.query, expectation.route, got, " + ".join(stages), min(known) if known else None
    )
