"""Prometheus metrics, counted from each finished request's recorded chain.

`MetricsObserver` is a `RequestObserver`: it reads the events the request recorded and
never looks at routing itself, so `/metrics` can't disagree with `/traces` or an
explanation. Each app gets its own `CollectorRegistry` (not prometheus-client's global
one), so tests and embedders can build many apps in one process.

Under `search serve --workers N` each worker counts in its own memory-mapped files in a
directory the parent process creates (prometheus-client's multiprocess mode, chosen by
`PROMETHEUS_MULTIPROC_DIR`), and `/metrics` from any worker sums them all: a scrape sees
the whole server, whichever worker answers it.

What a truncated chain means here: events past `routing.max_events` are not kept in the
chain, but what they did is (`TraceRecord.dropped`: their step, source and outcome), so
source calls, fallbacks, cache hits, withheld commands and unserved parts are counted all
the same; a dropped intent event names no stage's confidence, a dropped source call no
duration (it is counted in `search_source_calls_untimed_total` instead of the latency
histogram), and `search_dropped_events_total` says how many were dropped.

Only requests that reached the router are counted from chains: input the HTTP layer
refuses (bad JSON or fields, an empty query, too many parts, a foreign Origin or Host, a
missing token) is answered before there is a chain, and is counted apart, by status and
error type, in `search_refused_total` (`refused`, called by search/api/refusals.py).
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from routing.chain.events import FIELDS, PART, STEP
from routing.chain.steps import Step
from routing.dispatch.control import Withheld
from search.traces.records import TraceRecord

__all__ = ["INTENT_STEPS", "MULTIPROCESS_ENV", "MetricsObserver", "metrics_route"]

# Set (by `search serve --workers N`) before the workers import prometheus-client.
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

# The intent steps of the contract; a stage added later is counted under its own step name
# as long as it starts with "intent_".
INTENT_STEPS = (
    Step.INTENT_LABEL,
    Step.INTENT_KEYWORD,
    Step.INTENT_CACHED,
    Step.INTENT_SESSION,
    Step.INTENT_SEMANTIC,
    Step.INTENT_LLM,
    Step.INTENT_WORLD,
    Step.INTENT_DEFAULT,
)
# Source calls take milliseconds (ZIM lookups) to seconds (LLM-backed or remote sources).
LATENCY_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
REQUEST_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# The stages whose verdict can be "no configured source serves this" (the LLM says it as
# `outcome: no_source`); `intent_default` then ends the part unserved, once per part.
UNSERVED_STAGES = (Step.INTENT_LABEL, Step.INTENT_KEYWORD, Step.INTENT_SEMANTIC, Step.INTENT_LLM)
_UNSERVED_VERDICTS = frozenset({"unserved", "no_source"})
# A withheld command's reason, from the gate's closed set (anything else: "other").
WITHHELD_REASONS = frozenset(reason.value for reason in Withheld)


class MetricsObserver:
    """Counts what each request's chain says happened."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry
        self.requests = Counter(
            "search_requests",
            "Requests that reached the router (/search, MCP tools), by the HTTP status they "
            "ended with (200; 422 more parts than routing.max_parts; 502 every part failed; "
            "504 deadline; 499 the client cancelled it on the way). Input the HTTP layer refuses (bad JSON or fields, an empty query, "
            "403, 413, 415, a missing token) never reaches it: see search_refused_total.",
            ["status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "search_request_duration_seconds",
            "Duration of a request, from its route log.",
            buckets=REQUEST_BUCKETS_S,
            registry=r,
        )
        self.source_calls = Counter(
            "search_source_calls",
            "Real source calls (source_invoked), by source and outcome.",
            ["source", "outcome"],
            registry=r,
        )
        self.source_seconds = Histogram(
            "search_source_call_duration_seconds",
            "Elapsed time of source calls, timed around the call (source_invoked.elapsed_ms). "
            "Calls past routing.max_events have no recorded time and are left out: "
            "search_source_calls_total = this _count + search_source_calls_untimed_total.",
            ["source", "outcome"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.source_calls_untimed = Counter(
            "search_source_calls_untimed",
            "Source calls counted in search_source_calls_total but not in the latency "
            "histogram: past routing.max_events, where no duration is kept.",
            ["source", "outcome"],
            registry=r,
        )
        self.source_skips = Counter(
            "search_source_skips",
            "Sources skipped without a call (source_skipped), by reason.",
            ["source", "reason"],
            registry=r,
        )
        self.shared_state_degraded = Counter(
            "search_shared_state_degraded",
            "Requests that fell back to local state because Redis was unreachable, by component.",
            ["component", "reason"],
            registry=r,
        )
        self.fallbacks = Counter(
            "search_fallbacks",
            "Fallback chain moves, by from and to source.",
            ["from_source", "to_source"],
            registry=r,
        )
        self.cache_hits = Counter(
            "search_cache_hits",
            "Cache hits by kind: 'result' (result_cache_hit), 'decision' (intent_cached).",
            ["kind"],
            registry=r,
        )
        self.intent_decisions = Counter(
            "search_intent_decisions",
            "Routing decisions (a route chosen) by the intent stage that made them; a part "
            "judged unserved is counted in search_unserved_total instead.",
            ["stage"],
            registry=r,
        )
        self.unserved = Counter(
            "search_unserved",
            "Parts answered as unserved (no configured source serves them, none called), "
            "by the intent stage whose verdict it was.",
            ["stage"],
            registry=r,
        )
        self.control_withheld = Counter(
            "search_control_withheld",
            "State-changing commands not carried out (control_withheld), by source and the "
            "gate's first reason (dry_run, conditional, not_authorized, ...).",
            ["source", "reason"],
            registry=r,
        )
        self.errors = Counter(
            "search_errors",
            "error events (a part or the request failed), by error type.",
            ["error_type"],
            registry=r,
        )
        self.refusals = Counter(
            "search_refused",
            "Requests the HTTP layer answered with a 4xx before or instead of routing, by "
            "status and error type (forbidden_host, forbidden_origin, unauthorized, "
            "unsupported_media_type, invalid_json, invalid_request, body_too_large, "
            "too_many_parts, not_found, ...). Not in search_requests_total.",
            ["status", "type"],
            registry=r,
        )
        self.dropped_events = Counter(
            "search_dropped_events",
            "Events not stored because a request's chain hit routing.max_events.",
            registry=r,
        )
        # Pre-create the label-less series and the known kinds so a scrape shows zeros
        # (rate() over a series that appears late misses its first increments).
        for kind in ("result", "decision"):
            self.cache_hits.labels(kind=kind)
        for stage in INTENT_STEPS:
            self.intent_decisions.labels(stage=stage)
        for stage in UNSERVED_STAGES:
            self.unserved.labels(stage=stage)
        # What requests counted since the last scrape: {counter series: amount} and
        # {histogram series: [sum, count per bucket]}. A request adds to these plain dicts,
        # a scrape (or `flush`) adds them to the Prometheus series: one increment per series
        # per scrape rather than several locked calls per request. Their size is bounded by
        # the number of series, not of requests. Under a multi-worker server a scrape reads
        # every worker's files, so each worker adds its counts as it goes, not deferred.
        self._lock = threading.Lock()  # observe may run in any thread
        self._counts: dict[Any, float] = {}
        self._histograms: dict[Any, list[float]] = {}
        self._deferred = not os.environ.get(MULTIPROCESS_ENV)
        # The series every request counts into, looked up once.
        self._by_status: dict[int, Any] = {}
        self._by_intent: dict[str, Any] = {}
        self._result_hits = self._series(self.cache_hits, "result")
        self._decision_hits = self._series(self.cache_hits, "decision")
        self._others: dict[str, Callable[[dict[str, Any]], None]] = {
            Step.SOURCE_INVOKED: self._source_invoked,
            Step.FALLBACK: self._fallback,
            Step.SOURCE_SKIPPED: self._source_skipped,
            Step.SHARED_STATE_DEGRADED: self._shared_state_degraded,
            Step.ERROR: self._error,
            Step.CONTROL_WITHHELD: self._control_withheld,
        }

    def _series(self, metric: Any, *labels: str) -> Any:
        """The child series for these label values, looked up once: `labels()` validates
        and locks on every call, which costs more than the increment itself."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe(self, trace: TraceRecord) -> None:
        code = trace.status_code
        with self._lock:
            requests = self._by_status.get(code)
            if requests is None:
                requests = self._by_status[code] = self._series(self.requests, str(code))
            self._count(requests)
            self._observe(self.request_seconds, max(trace.duration_ms, 0.0) / 1000.0)
            if trace.dropped_events:
                self._count(self.dropped_events, trace.dropped_events)
            # The commonest steps first (every request has an intent step; a cache hit, one
            # per part); the rest by a table rather than a chain of comparisons.
            others = self._others
            unserved = False
            for step, event in trace.step_fields():
                if step == Step.RESULT_CACHE_HIT:
                    self._count(self._result_hits)
                elif step.startswith("intent_"):
                    if event.get("decision") is None:
                        # A stage that looked but did not decide (a semantic miss), or the
                        # part ends unserved: counted by the stage that judged it, below.
                        if step == Step.INTENT_DEFAULT and event.get("reason") == "unserved":
                            unserved = True
                        continue
                    decisions = self._by_intent.get(step)
                    if decisions is None:
                        decisions = self._by_intent[step] = self._series(
                            self.intent_decisions, step
                        )
                    self._count(decisions)
                    if step == Step.INTENT_CACHED:
                        self._count(self._decision_hits)
                else:
                    count = others.get(step)
                    if count is not None:
                        count(event)
            if unserved:
                self._unserved(trace)
            if not self._deferred:
                self._flush_locked()

    def refused(self, status: int, kind: str) -> None:
        """One request refused by the HTTP layer (search/api/refusals.py)."""
        with self._lock:
            self._count(self._series(self.refusals, str(status), kind))
            if not self._deferred:
                self._flush_locked()

    def _count(self, series: Any, amount: float = 1) -> None:
        """`amount` more on a counter series (the caller holds the lock)."""
        self._counts[series] = self._counts.get(series, 0) + amount

    def _observe(self, histogram: Any, value: float) -> None:
        """One observation of a histogram series, tallied by bucket (the caller holds the
        lock): the bucket is the first upper bound at or above the value, as
        prometheus-client's own `observe` picks it."""
        tally = self._histograms.get(histogram)
        bounds = histogram._upper_bounds  # ascending, ending with +Inf
        if tally is None:
            tally = self._histograms[histogram] = [0.0] * (len(bounds) + 1)
        tally[0] += value
        tally[1 + bisect_left(bounds, value)] += 1

    def flush(self) -> None:
        """Add what was tallied since the last flush to the Prometheus series."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        counts, self._counts = self._counts, {}
        histograms, self._histograms = self._histograms, {}
        for series, amount in counts.items():
            series.inc(amount)
        # prometheus-client has no call that adds many observations at once; its own
        # `observe` adds to these same values (the sum, then one bucket's count).
        for histogram, tally in histograms.items():
            histogram._sum.inc(tally[0])
            for bucket, count in zip(histogram._buckets, tally[1:], strict=True):
                if count:
                    bucket.inc(count)

    def _unserved(self, trace: TraceRecord) -> None:
        """Each unserved part (its `intent_default`, reason "unserved") under the stage
        whose verdict in the same part it follows. Rare, so the parts are read only here;
        events past max_events have no part and pair up in the order they came."""
        judged: dict[str | None, str] = {}
        for part, step, event in _with_parts(trace):
            if step == Step.INTENT_DEFAULT:
                stage = judged.pop(part, step)
                if event.get("reason") == "unserved":
                    self._count(self._series(self.unserved, stage))
            elif (
                step.startswith("intent_")
                and event.get("decision") is None
                and event.get("outcome") in _UNSERVED_VERDICTS
            ):
                judged[part] = step

    def _control_withheld(self, event: dict[str, Any]) -> None:
        reason = str(event.get("reason"))
        labels = (str(event.get("source")), reason if reason in WITHHELD_REASONS else "other")
        self._count(self._series(self.control_withheld, *labels))

    def _source_invoked(self, event: dict[str, Any]) -> None:
        labels = (str(event.get("source")), str(event.get("outcome")))
        self._count(self._series(self.source_calls, *labels))
        elapsed = event.get("elapsed_ms")
        if isinstance(elapsed, (int, float)):
            self._observe(
                self._series(self.source_seconds, *labels), max(float(elapsed), 0.0) / 1000.0
            )
        else:  # past max_events: the tally keeps no duration
            self._count(self._series(self.source_calls_untimed, *labels))

    def _fallback(self, event: dict[str, Any]) -> None:
        labels = (str(event.get("from_source")), str(event.get("to_source")))
        self._count(self._series(self.fallbacks, *labels))

    def _source_skipped(self, event: dict[str, Any]) -> None:
        labels = (str(event.get("source")), str(event.get("reason")))
        self._count(self._series(self.source_skips, *labels))

    def _shared_state_degraded(self, event: dict[str, Any]) -> None:
        labels = (str(event.get("component")), str(event.get("reason")))
        self._count(self._series(self.shared_state_degraded, *labels))

    def _error(self, event: dict[str, Any]) -> None:
        self._count(self._series(self.errors, str(event.get("error_type"))))

    def exposition_registry(self) -> CollectorRegistry:
        """What a scrape reads: this app's registry, or every worker's files summed."""
        self.flush()
        directory = os.environ.get(MULTIPROCESS_ENV)
        if not directory:
            return self.registry
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)
        return registry

    def exposition(self) -> bytes:
        """The Prometheus text format of everything counted so far."""
        return generate_latest(self.exposition_registry())


def _with_parts(trace: TraceRecord) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
    """(part, step, fields) per event in order, then the dropped ones (part None)."""
    recorded = trace.recorded
    if recorded is not None:
        for entry in recorded.entries:
            yield entry[PART], entry[STEP], entry[FIELDS]
    else:
        for event in trace.chain:
            yield str(event.get("part", "")), str(event.get("step")), event
    for step, fields, count in trace.dropped:
        for _ in range(count):
            yield None, step, fields


def metrics_route(observer: MetricsObserver) -> Route:
    """`GET /metrics`: Prometheus text format 0.0.4 (OpenMetrics if the scraper asks for
    it in `Accept`), from this app's registry."""

    async def metrics(request: Request) -> Response:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        if content_type.startswith("text/plain"):
            content_type = CONTENT_TYPE_PLAIN_0_0_4
        registry = observer.exposition_registry()
        return Response(encoder(registry), headers={"Content-Type": content_type})

    return Route("/metrics", metrics, methods=["GET"])
