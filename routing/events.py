"""The route-event channel: a per-request log in a ContextVar, appended to where things happen.

The explanation chain is *recorded*, never rebuilt: code that makes a decision, hits a
cache or calls a source calls `record(step, **fields)` right there. A request opens one
`RouteLog` with `route_log()` before any fan-out; tasks made by `asyncio.gather` copy the
context, so they share the same log object, and `run_in_thread` carries the context into
worker threads. `part_scope` tags every event with the sub-query it belongs to.

Recording is always on. Whether the chain is *returned* is the caller's business.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_MAX_EVENTS = 1000

# Steps that end a part or the request: always kept, even past the bound, so a failed
# chain always says why it failed.
_ALWAYS_KEPT = frozenset({"error"})


class RouteLog:
    """The ordered, bounded list of events of one request.

    Past `max_events` further events are counted in `dropped_events` instead of stored;
    `step_counts` counts every recorded step, stored or dropped, so the route statistics
    (`cached`, `fallback_occurred`) stay true even when the chain was truncated.
    """

    __slots__ = (
        "events", "dropped_events", "max_events", "step_counts", "started", "captures", "_lock"
    )

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.events: list[dict[str, Any]] = []
        self.dropped_events = 0
        self.max_events = max_events
        self.step_counts: dict[str, int] = {}
        self.started = time.perf_counter()
        # (source, query, items) of every real source answer, for `trace.capture_results`.
        self.captures: list[tuple[str, str, list[Any]]] = []
        self._lock = threading.Lock()

    def append(self, step: str, part: str, fields: dict[str, Any]) -> None:
        # Hot path: one lock, one dict. Microsecond resolution via int(), because
        # round(x, 3) costs more than the rest of the append on a slow core.
        t_ms = int((time.perf_counter() - self.started) * 1_000_000) / 1000.0
        with self._lock:
            counts = self.step_counts
            counts[step] = counts.get(step, 0) + 1
            events = self.events
            if len(events) >= self.max_events and step not in _ALWAYS_KEPT:
                self.dropped_events += 1
                return
            events.append({"step": step, "seq": len(events), "t_ms": t_ms, "part": part, **fields})

    def happened(self, step: str) -> bool:
        """Whether `step` was recorded at least once in this request."""
        return self.step_counts.get(step, 0) > 0

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def snapshot(self) -> list[dict[str, Any]]:
        """A copy of the chain so far (events are never mutated after recording)."""
        with self._lock:
            return list(self.events)


class NullRouteLog(RouteLog):
    """A recorder that keeps nothing: the baseline for measuring what recording costs."""

    __slots__ = ()

    def append(self, step: str, part: str, fields: dict[str, Any]) -> None:
        return None


_log: contextvars.ContextVar[RouteLog | None] = contextvars.ContextVar("route_log", default=None)
_part: contextvars.ContextVar[str] = contextvars.ContextVar("route_part", default="")


def record(step: str, **fields: Any) -> None:
    """Append one event to the current request's chain; a no-op outside a request."""
    log = _log.get()
    if log is not None:
        log.append(step, _part.get(), fields)


def capture(source: str, query: str, items: list[Any]) -> None:
    """Keep a source's answer with the request (stored only if capture is configured)."""
    log = _log.get()
    if log is not None:
        log.captures.append((source, query, items))


def current_log() -> RouteLog | None:
    return _log.get()


def current_part() -> str:
    return _part.get()


@contextmanager
def route_log(
    max_events: int = DEFAULT_MAX_EVENTS, factory: Callable[[int], RouteLog] = RouteLog
) -> Iterator[RouteLog]:
    """Scope a fresh log to the enclosed request. Open it before any fan-out."""
    log = factory(max_events)
    token = _log.set(log)
    part_token = _part.set("")
    try:
        yield log
    finally:
        _part.reset(part_token)
        _log.reset(token)


@contextmanager
def part_scope(path: str) -> Iterator[None]:
    """Tag events recorded inside with the sub-query path ("0", "1.0", ...)."""
    token = _part.set(path)
    try:
        yield
    finally:
        _part.reset(token)


async def run_in_thread(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work in a worker thread *with the request's context*.

    The one way routing and sources hand work to threads: `asyncio.to_thread` copies the
    context, so events recorded in the thread reach the request's log and part.
    (`loop.run_in_executor` does not copy it; never use it directly.)
    """
    return await asyncio.to_thread(func, *args, **kwargs)


def bind_context(func: Callable[P, T]) -> Callable[P, T]:
    """Wrap `func` to run in a copy of the *current* context, for executors that don't."""
    context = contextvars.copy_context()

    def bound(*args: P.args, **kwargs: P.kwargs) -> T:
        return context.run(func, *args, **kwargs)

    return bound
