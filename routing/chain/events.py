"""The route-event channel: a per-request log in a ContextVar, appended to where things happen.

The explanation chain is *recorded*, never rebuilt: code that makes a decision, hits a
cache or calls a source calls `record(step, **fields)` right there. A request opens one
`RouteLog` with `route_log()` before any fan-out; tasks made by `asyncio.gather` copy the
context, so they share the same log object, and `run_in_thread` (and the worker pools of
`sources.workers`) carry the context into worker threads. `part_scope` tags every event
with the sub-query it belongs to.

Recording is always on, so an event must cost next to nothing: `record` is compiled
(routing/chain/_fastrecord.c, built by the install where a C compiler is found), with
`record_in_python` as the reference it must match and the fallback. Whether the chain is
*returned* is the caller's business.
"""

from __future__ import annotations

import asyncio
import contextvars
import operator
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, NamedTuple, ParamSpec, Protocol, TypeVar

from routing.chain.steps import ALWAYS_KEPT, Step

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_MAX_EVENTS = 1000

_clock = time.perf_counter
# This module runs on every event of every request, so it keeps Python-level calls out
# of the hot path: an entry is a plain tuple laid out as `Entry` (building a named tuple
# costs a second allocation and a call; a plain one is one instruction, and encodes as a
# JSON array without a fallback), and steps are read by `map` with a C getter rather than
# a Python loop.
# An entry's fields, as `Entry` names them (Final: each indexes with its own type).
AT: Final = 0
PART: Final = 1
STEP: Final = 2
FIELDS: Final = 3
SEQ: Final = 4
_step_of = operator.itemgetter(STEP)


# The fields of an event that route statistics (metrics, the trace store's filters) read.
STATISTIC_FIELDS: Final = (
    "source",
    "decision",
    "from_source",
    "to_source",
    "route",
    "sources",
    "outcome",
    "reason",
)


def _hashable(value: Any) -> Any:
    """A field's value as a dictionary key can hold it (lists as tuples, others as text)."""
    if isinstance(value, list):
        return tuple(map(str, value))
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


class RouteLog:
    """The ordered, bounded list of events of one request.

    Past `max_events` further events are not stored; their steps are kept in
    `dropped_steps`, so `dropped_events` is exact and the route statistics (`cached`,
    `fallback_occurred`) stay true even when the chain was truncated.

    Appends come from the event loop and from worker threads without a lock: an entry
    goes in with one `list.append`, atomic under the GIL, so an event's place in the list
    *is* its `seq`, the order of recording. An event kept past the bound (an `error`)
    carries its true ordinal, counting the dropped ones. (Two threads racing at the
    bound may keep one event more than `max_events`.)

    An append stores a tuple around the caller's own keyword dict; the event dicts of
    the chain are built only when someone reads it (`snapshot`, `RecordedChain`), so a
    request nobody explains or stores pays for the recording and nothing else.
    """

    __slots__ = ("entries", "dropped_steps", "dropped_tally", "max_events", "started", "captures")

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        # Never rebound: `route_log` hands this very list (and `max_events`) to `record`.
        self.entries: list[EntryRow] = []
        self.dropped_steps: list[str] = []
        # What the route statistics read of the dropped events (their sources, outcomes),
        # counted per distinct (step, fields): bounded by the sources, not the events.
        self.dropped_tally: dict[tuple[str, tuple[tuple[str, Any], ...]], int] = {}
        self.max_events = max_events
        self.started = time.perf_counter()
        # (source, query, items) of every real source answer, for `trace.capture_results`.
        self.captures: list[tuple[str, str, list[Any]]] = []

    def past_bound(self, step: str, part: str, fields: dict[str, Any]) -> None:
        """An event past `max_events` (`record` appends the others itself): counted, and
        kept only if it must be."""
        if step in ALWAYS_KEPT:  # a failed chain always says why it failed
            seq = len(self.entries) + len(self.dropped_steps)
            self.entries.append((_clock(), part, step, fields, seq))
        else:
            self.dropped_steps.append(step)
            kept = tuple((k, _hashable(fields[k])) for k in STATISTIC_FIELDS if k in fields)
            key = (step, kept)
            self.dropped_tally[key] = self.dropped_tally.get(key, 0) + 1

    def dropped_summary(self) -> list[tuple[str, dict[str, Any], int]]:
        """(step, the fields statistics read, how many) for the events past the bound, so
        a stored trace and the metrics count what a truncated chain no longer shows."""
        return [
            (step, {k: list(v) if isinstance(v, tuple) else v for k, v in kept}, count)
            for (step, kept), count in self.dropped_tally.items()
        ]

    @property
    def dropped_events(self) -> int:
        return len(self.dropped_steps)

    def happened(self, step: str) -> bool:
        """Whether `step` was recorded at least once in this request, kept or dropped."""
        return step in map(_step_of, self.entries) or step in self.dropped_steps

    def steps(self) -> set[str]:
        """Every step recorded in this request, kept or dropped (the route statistics)."""
        return {*map(_step_of, self.entries), *self.dropped_steps}

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def freeze(self) -> RecordedChain:
        """The chain so far, fixed; its event dicts are built on first read."""
        return RecordedChain(self.entries[:], self.started)

    def snapshot(self) -> list[dict[str, Any]]:
        """A copy of the chain so far as event dicts, in seq order."""
        return self.freeze().events()


class Entry(NamedTuple):
    """The layout of one recorded event as `record` stores it (as a plain tuple of these
    fields: `EntryRow`); the event dict is built only when read."""

    at: float  # perf_counter at recording
    part: str
    step: str
    fields: dict[str, Any]  # the keyword fields given to `record`
    seq: int | None = None  # set past the bound; before it, seq is the entry's index


EntryRow = tuple[float, str, str, dict[str, Any], "int | None"]


class RecordedChain:
    """A finished request's entries; `events()` builds (once) the chain's event dicts.

    Readers that need the chain as dicts (the response when explained, the trace store's
    writer process) call `events()`; readers that only count steps (the metrics) use
    `step_fields()`, which builds nothing.
    """

    __slots__ = ("entries", "started", "_events")

    def __init__(self, entries: list[EntryRow], started: float) -> None:
        """`entries` as `RouteLog` holds them (taken as they are: this runs per request)."""
        self.entries = entries
        self.started = started
        self._events: list[dict[str, Any]] | None = None

    @classmethod
    def from_rows(cls, rows: list[list[Any]], started: float) -> RecordedChain:
        """A chain from its entries as lists, as they come back from JSON."""
        return cls([(row[0], row[1], row[2], row[3], row[4]) for row in rows], started)

    def step_fields(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(step, the event's own fields) per event, in order, without building events."""
        for entry in self.entries:
            yield entry[STEP], entry[FIELDS]

    def events(self) -> list[dict[str, Any]]:
        events = self._events
        if events is None:
            started = self.started
            # Microsecond resolution via int(): round(x, 3) costs more than the event.
            events = [
                {
                    "step": step,
                    "seq": index if seq is None else seq,
                    "t_ms": int((at - started) * 1_000_000) / 1000.0,
                    "part": part,
                    **fields,
                }
                for index, (at, part, step, fields, seq) in enumerate(self.entries)
            ]
            self._events = events  # two racing readers build equal lists; either wins
        return events


class NullRouteLog(RouteLog):
    """A recorder that keeps nothing: the baseline for measuring what recording costs.

    Every event finds it "past its bound" and is thrown away there, so `record` does all
    its work up to the point of storing the event.
    """

    __slots__ = ()

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        super().__init__(0)

    def past_bound(self, step: str, part: str, fields: dict[str, Any]) -> None:
        return None


# What `record` needs, in one ContextVar read with one lookup: the request's entries list,
# its bound, the log itself (for events past the bound) and the part being run. Holding
# the list and the bound here, not only on the log, spares two attribute loads per event;
# outside a request the bound is 0 and the log None, so `record` drops the event without
# a separate test. (`RouteLog.max_events` is read once, when the request's scope opens.)
_Scope = tuple[list[EntryRow], int, RouteLog | None, str]
_scope: contextvars.ContextVar[_Scope] = contextvars.ContextVar(
    "route_scope", default=([], 0, None, "")
)


class Recorder(Protocol):
    def __call__(self, step: Step, /, **fields: Any) -> None: ...


def record_in_python(step: Step, /, **fields: Any) -> None:
    """Append one event to the current request's chain; a no-op outside a request.

    The reference implementation: `record` is the same function compiled
    (routing/chain/_fastrecord.c) where the package was built with it."""
    # Inline, no method call: this runs for every event of every request.
    entries, limit, log, part = _scope.get()
    if len(entries) < limit:
        entries.append((_clock(), part, step, fields, None))
    elif log is not None:
        log.past_bound(step, part, fields)


record: Recorder = record_in_python
try:
    from routing.chain import _fastrecord
except ImportError:  # installed without a C compiler: the Python version, a little dearer
    FAST_RECORD = False
else:
    _fastrecord.bind(_scope)
    record = _fastrecord.record
    FAST_RECORD = True


def capture(source: str, query: str, items: list[Any]) -> None:
    """Keep a source's answer with the request (stored only if capture is configured)."""
    log = _scope.get()[2]
    if log is not None:
        log.captures.append((source, query, items))


def current_log() -> RouteLog | None:
    return _scope.get()[2]


def current_part() -> str:
    return _scope.get()[3]


def part_key(path: str) -> tuple[int, ...]:
    """'1.10' after '1.2': part paths in numeric order, parents before their children;
    the request ('') first."""
    return tuple(int(p) if p.isdigit() else 0 for p in path.split(".")) if path else ()


class route_log:  # noqa: N801 - used as a function: `with route_log() as log:`
    """Scope a fresh log to the enclosed request. Open it before any fan-out.

    A class rather than a generator-based context manager: it runs on every request,
    and a generator costs several times as much to enter and leave.
    """

    __slots__ = ("_log", "_token")

    def __init__(
        self, max_events: int = DEFAULT_MAX_EVENTS, factory: Callable[[int], RouteLog] = RouteLog
    ) -> None:
        self._log = factory(max_events)

    def __enter__(self) -> RouteLog:
        log = self._log
        self._token = _scope.set((log.entries, log.max_events, log, ""))
        return log

    def __exit__(self, *exc_info: object) -> None:
        _scope.reset(self._token)


class part_scope:  # noqa: N801 - used as a function: `with part_scope("1"):`
    """Tag events recorded inside with the sub-query path ("0", "1.0", ...)."""

    __slots__ = ("_path", "_token")

    def __init__(self, path: str) -> None:
        self._path = path

    def __enter__(self) -> None:
        entries, limit, log, _ = _scope.get()
        self._token = _scope.set((entries, limit, log, self._path))

    def __exit__(self, *exc_info: object) -> None:
        _scope.reset(self._token)


async def run_in_thread(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work in a worker thread *with the request's context*.

    For occasional blocking work (start-up, the trace store): `asyncio.to_thread` copies
    the context, so events recorded in the thread reach the request's log and part.
    (`loop.run_in_executor` does not copy it; never use it directly.) Source calls and
    model inference have bounded pools of their own (`sources.workers`), so neither can
    queue behind the other.
    """
    return await asyncio.to_thread(func, *args, **kwargs)


def bind_context(func: Callable[P, T]) -> Callable[P, T]:
    """Wrap `func` to run in a copy of the *current* context, for executors that don't."""
    context = contextvars.copy_context()

    def bound(*args: P.args, **kwargs: P.kwargs) -> T:
        return context.run(func, *args, **kwargs)

    return bound
