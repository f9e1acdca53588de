"""Where finished requests go: every request's chain, explained or not.

`TraceSink` is what the service writes to. The persistent store (SQLite) implements it;
`NullTraceSink` keeps nothing (the store switched off) and `MemoryTraceSink` keeps the
last N in memory.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, Protocol

from routing.chain.events import RecordedChain


class TraceRecord:
    """One finished request, as recorded.

    `chain` may be given as the request's `RecordedChain`: its event dicts are then built
    on first read, by whichever consumer reads first (the response, metrics, the store).
    """

    __slots__ = (
        "_chain",
        "captures",
        "dropped",
        "dropped_events",
        "dry_run",
        "duration_ms",
        "error",
        "query",
        "replay_of",
        "results",
        "session_id",
        "started_at",
        "status_code",
        "trace_id",
    )

    def __init__(
        self,
        trace_id: str,
        started_at: float,  # unix seconds
        query: str,
        status_code: int,
        duration_ms: float,
        chain: list[dict[str, Any]] | RecordedChain,
        dropped_events: int = 0,
        error: dict[str, str] | None = None,
        results: list[dict[str, Any]] | None = None,
        dry_run: bool = False,
        replay_of: str | None = None,
        captures: list[tuple[str, str, list[Any]]] | None = None,
        session_id: str | None = None,
        dropped: list[tuple[str, dict[str, Any], int]] | None = None,
    ) -> None:
        self.trace_id = trace_id
        self.started_at = started_at
        self.query = query
        self.status_code = status_code
        self.duration_ms = duration_ms
        self._chain = chain
        self.dropped_events = dropped_events
        self.error = error
        self.results = results if results is not None else []
        self.dry_run = dry_run
        self.replay_of = replay_of
        # (source, query, items) of every real source answer; stored only when
        # `trace.capture_results` is on, so it stays raw (no copying) until then.
        self.captures = captures if captures is not None else []
        # The conversation it belonged to: replay rebuilds the session from earlier turns.
        self.session_id = session_id
        # The events past `routing.max_events`, as (step, the fields statistics read,
        # count) (`RouteLog.dropped_summary`): counted by metrics and the store's filters.
        self.dropped = dropped or []

    @property
    def chain(self) -> list[dict[str, Any]]:
        chain = self._chain
        return chain.events() if isinstance(chain, RecordedChain) else chain

    @property
    def recorded(self) -> RecordedChain | None:
        """The raw recording, when the chain came straight from a request."""
        chain = self._chain
        return chain if isinstance(chain, RecordedChain) else None

    def step_fields(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(step, fields) per event without building the event dicts (for counting); the
        dropped events last, as many times as they were recorded."""
        chain = self._chain
        kept: Iterator[tuple[str, dict[str, Any]]]
        if isinstance(chain, RecordedChain):
            kept = chain.step_fields()
        else:
            kept = ((str(event.get("step")), event) for event in chain)
        if not self.dropped:
            return kept
        return itertools.chain(kept, self._dropped_fields())

    def _dropped_fields(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for step, fields, count in self.dropped:
            for _ in range(count):
                yield step, fields

    def statistic_events(self) -> list[dict[str, Any]]:
        """The chain's events, then one per kind of dropped event (step and the fields
        statistics read): what a trace's filters (fallback, sources, outcomes) match."""
        return self.chain + [{"step": step, **fields} for step, fields, _ in self.dropped]

    def captures_as_dicts(self) -> list[dict[str, Any]]:
        """The captures as stored; a record read back (in the writer) has dicts already."""
        return [
            capture
            if isinstance(capture, dict)
            else {
                "source": capture[0],
                "query": capture[1],
                "items": [item.to_dict() for item in capture[2]],
            }
            for capture in self.captures
        ]


class RequestObserver(Protocol):
    """Metrics and telemetry exporters: they read the recorded chain, never recompute it."""

    def observe(self, trace: TraceRecord) -> None:
        """Called once per finished request, on the event loop; must be quick."""


class TraceSink(Protocol):
    async def start(self) -> None: ...

    def submit(self, trace: TraceRecord) -> None:
        """Hand over a finished trace; must not block the event loop."""

    async def aclose(self) -> None:
        """Flush what was submitted."""


class NullTraceSink:
    async def start(self) -> None:
        return None

    def submit(self, trace: TraceRecord) -> None:
        return None

    async def aclose(self) -> None:
        return None


class MemoryTraceSink:
    """The last `max_traces` traces, in memory (tests and `search query`)."""

    def __init__(self, max_traces: int = 1000) -> None:
        self.max_traces = max_traces
        self.traces: OrderedDict[str, TraceRecord] = OrderedDict()

    async def start(self) -> None:
        return None

    def submit(self, trace: TraceRecord) -> None:
        self.traces[trace.trace_id] = trace
        while len(self.traces) > self.max_traces:
            self.traces.popitem(last=False)

    def get(self, trace_id: str) -> TraceRecord | None:
        return self.traces.get(trace_id)

    async def aclose(self) -> None:
        return None
