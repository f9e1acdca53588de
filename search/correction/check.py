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

from search.client_settings import ConfigLoader, DuplicateKeyError
from search.config import MAX_CONFIG_DEPTH, MAX_CONFIG_VALUES
from search.correction.labels import INTENT_STEPS, NONE
from search.query_text import query_problem

# A value shown in a message is cut to this many characters: a file's entry may be huge.
SHOWN_CHARS = 80


class CheckFileError(ValueError):
    """The file cannot be read as expectations (exit 2); the message says where."""


class _CheckLoader(ConfigLoader):
    """The config's loader (safe, libyaml, refuses a key given twice), naming keys quoted:
    a check file's keys are queries, and `a: web` then `a: ha` is two expectations of
    which YAML would silently keep one."""

    quote_keys = True


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


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)` cut to `limit` characters, so a message stays one short line whatever
    the file held. Only a scalar is repr'd (a string is bounded by the file's size); a list
    or mapping is named by its type, as its repr would expand every shared *alias."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return _cut(repr(value), limit)
    return f"a {type(value).__name__}"


def _bounded(data: Any, name: str) -> None:
    """Refuse data whose copy, each *alias expanded, would pass MAX_CONFIG_VALUES values or
    MAX_CONFIG_DEPTH levels (the bounds config.yaml is read with): an alias bomb of a few
    hundred bytes stands for 10^9 values, which a walk or a repr of it would build."""
    budget = MAX_CONFIG_VALUES
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise CheckFileError(
                f"{name}: too large: more than {MAX_CONFIG_VALUES:,} values "
                "(each *alias counted as expanded)"
            )
        if depth > MAX_CONFIG_DEPTH:
            raise CheckFileError(f"{name}: nested too deep (more than {MAX_CONFIG_DEPTH} levels)")
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def _load(text: str, name: str) -> Any:
    """The YAML document in `text`, bounded (`_bounded`); CheckFileError, never a traceback.

    Besides YAMLError, PyYAML lets a ValueError out of a bad implicit or tagged scalar
    (`2024-13-45`, `!!int x`), and the pure-Python loader a RecursionError."""
    try:
        data = yaml.load(text, Loader=_CheckLoader)  # noqa: S506 - a safe loader
    except DuplicateKeyError as dup:
        line = dup.problem_mark.line + 1 if dup.problem_mark else 0
        raise CheckFileError(f"{name}: line {line}: {dup.problem}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise CheckFileError(
            f"{name}: not valid YAML: {_cut(' '.join(str(exc).split()), 300)}"
        ) from None
    except RecursionError:
        raise CheckFileError(f"{name}: not valid YAML: nested too deep") from None
    _bounded(data, name)
    return data


def _entry(where: str, query: Any, route: Any, routes: set[str], max_chars: int) -> Expectation:
    if not isinstance(query, str):
        raise CheckFileError(f"{where}: the query must be a string, not {shown(query)}")
    problem = query_problem(query, max_chars)
    if problem is not None:
        raise CheckFileError(f"{where}: {problem}")
    known = ", ".join(sorted(routes))
    if not isinstance(route, str):
        raise CheckFileError(
            f"{where}: the route must be a route name (one of {known}), not {shown(route)}"
        )
    if route not in routes:
        raise CheckFileError(f"{where}: route {shown(route)} is not a route (known: {known})")
    return Expectation(query, route)


def parse_expectations(
    text: str, routes: Iterable[str], max_chars: int, name: str = "FILE"
) -> list[Expectation]:
    """Expectations from YAML text; CheckFileError names what is wrong."""
    known = {*routes, NONE}
    data = _load(text, name)
    found: list[Expectation] = []
    if isinstance(data, dict):
        for query, route in data.items():
            found.append(_entry(f"{name}: {shown(query)}", query, route, known, max_chars))
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


# The largest file read: a household's expectations are a few hundred lines; the value
# bound (MAX_CONFIG_VALUES) would stop a bigger one anyway, but only after it was parsed,
# which takes gigabytes of memory for a file of tens of MB.
MAX_CHECK_BYTES = 8 * 1024 * 1024


def read_expectations(path: str, routes: Iterable[str], max_chars: int) -> list[Expectation]:
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(MAX_CHECK_BYTES + 1)
    except OSError as exc:
        raise CheckFileError(f"{path}: cannot read it: {exc.strerror}") from None
    if len(raw) > MAX_CHECK_BYTES:
        raise CheckFileError(f"{path}: too large: over {MAX_CHECK_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
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
