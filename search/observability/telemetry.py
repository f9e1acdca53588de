"""OpenTelemetry export of the recorded chain: one OTel trace per request.

Only built when `telemetry.otlp_endpoint` is set. `OtelObserver` is a `RequestObserver`:
when a request has finished it turns the request's *recorded* events into spans, so
Jaeger or Tempo shows exactly what `/traces` and an explanation show:

- one span per request (`search`), whose trace id IS the request's `trace_id`, so the id
  in a response, a log line and Jaeger's search box is the same;
- one child span per part (`part 1`, with `part 1.0` nested under `part 1`), from the
  earliest to the latest thing its events (and its sub-parts' events) recorded;
- one child span of the part per `source_invoked`, with real start and end times;
- every other event as a span event on its part's span (the request's for part ""),
  at its own time, carrying its fields as attributes.

Timing. `started_at` is the request's wall clock (`time.time()`) taken right before its
route log started its monotonic clock, and every event's `t_ms` is on that monotonic
clock. `source_invoked` is recorded right after the awaited call, and `elapsed_ms` is
timed around the call itself (after waiting for a concurrency slot), so the call ran
from `t_ms - elapsed_ms` to `t_ms`: wall start = started_at + (t_ms - elapsed_ms) / 1000.
The offset between the two clocks' zero points is a few microseconds.

Logs. `install_log_correlation()` stamps every log record with `trace_id` and `span_id`
(and the `otelTraceID` / `otelSpanID` names OpenTelemetry's logging integration uses):
the request's trace id, and the id of the span of the part that was running. Part and
request span ids are derived from (trace id, part path), so they are known while the
request runs, before its spans exist.

Nothing here imports OpenTelemetry at module level: the service imports
`current_trace_id` from here whether telemetry is configured or not.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from routing.chain.events import current_part, part_key
from routing.chain.steps import Step
from search.traces.records import TraceRecord

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from search.config import Config

log = logging.getLogger("search.observability.telemetry")

# The trace id of the request being handled; the service sets it for the request's
# duration (see `Service.search`). Log records read it through the record factory.
current_trace_id: ContextVar[str | None] = ContextVar("search_trace_id", default=None)

SCOPE = "search.router"
_SOURCE_STEP = Step.SOURCE_INVOKED
_ERROR_OUTCOMES = frozenset({"error", "timeout"})


# --- ids -----------------------------------------------------------------------------


def otel_trace_id(trace_id: str) -> int:
    """The request's id as a 128-bit OTel trace id (it is already 32 hex digits)."""
    try:
        value = int(trace_id, 16)
        if len(trace_id) == 32 and value:
            return value
    except ValueError:
        pass
    return int.from_bytes(hashlib.sha256(trace_id.encode()).digest()[:16], "big") or 1


def part_span_id(trace_id: str, part: str) -> int:
    """The span id of part `part` ("" = the request span): derived, so logs know it early."""
    digest = hashlib.sha256(f"{trace_id}/{part}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def parent_part(path: str) -> str:
    """'1.0' -> '1', '1' -> '' (the request)."""
    return path.rsplit(".", 1)[0] if "." in path else ""


# --- log correlation -----------------------------------------------------------------

_factory_lock = threading.Lock()
_factory_installed = False


def log_ids() -> tuple[str, str]:
    """(trace_id, span_id) as hex for the request running in this context, or ("", "")."""
    trace_id = current_trace_id.get()
    if not trace_id:
        return "", ""
    return (
        format(otel_trace_id(trace_id), "032x"),
        format(part_span_id(trace_id, current_part()), "016x"),
    )


def install_log_correlation() -> None:
    """Stamp every log record with the running request's trace and span id (idempotent).

    A record factory rather than a handler filter: it works for every handler a user
    configures (`%(trace_id)s` in a format), not only for handlers we know about.
    """
    global _factory_installed
    with _factory_lock:
        if _factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            trace_id, span_id = log_ids()
            record.trace_id = record.otelTraceID = trace_id
            record.span_id = record.otelSpanID = span_id
            return record

        logging.setLogRecordFactory(factory)
        _factory_installed = True


# --- the exporter --------------------------------------------------------------------


def traces_endpoint(endpoint: str) -> str:
    """`http://tempo:4318` -> `http://tempo:4318/v1/traces`; a full signal URL is kept."""
    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


def attribute_value(value: Any) -> Any:
    """An OTel attribute value: primitives as they are, anything else as JSON text."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and value:
        kinds = {type(v) for v in value}
        if len(kinds) == 1 and kinds <= {bool, int, float, str}:
            return list(value)
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


def event_attributes(event: dict[str, Any]) -> dict[str, Any]:
    """Every field of the event (None left out: OTel has no null attribute)."""
    return {k: attribute_value(v) for k, v in event.items() if v is not None}


def call_window(event: dict[str, Any]) -> tuple[float, float]:
    """(start_ms, end_ms) of what an event covers: a source call its timed window, any
    other event its instant."""
    end = float(event.get("t_ms", 0.0))
    elapsed = event.get("elapsed_ms")
    if event.get("step") == _SOURCE_STEP and isinstance(elapsed, (int, float)):
        return max(end - float(elapsed), 0.0), end
    return end, end


def part_bounds(chain: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each part's [first start, last end] over its own events and its sub-parts'."""
    bounds: dict[str, list[float]] = {}
    for event in chain:
        start, end = call_window(event)
        path = str(event.get("part", ""))
        while path:
            span = bounds.setdefault(path, [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
            path = parent_part(path)
    return bounds


class _PlannedIds:
    """An IdGenerator that hands out ids planned for the next span, else random ones."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        self._random = RandomIdGenerator()
        self._local = threading.local()

    def plan(self, trace_id: int | None, span_id: int | None) -> None:
        self._local.trace_id, self._local.span_id = trace_id, span_id

    def generate_trace_id(self) -> int:
        planned = getattr(self._local, "trace_id", None)
        self._local.trace_id = None
        return planned if planned is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        planned = getattr(self._local, "span_id", None)
        self._local.span_id = None
        return planned if planned is not None else self._random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return True  # uuid4 hex: the low 56 bits are random


def build_tracer_provider(
    config: Config, exporter: SpanExporter | None = None, *, batch: bool = True
) -> tuple[TracerProvider, _PlannedIds]:
    """A provider of our own (never the global one) exporting to `telemetry.otlp_endpoint`.

    `exporter` replaces the OTLP exporter (tests pass the SDK's in-memory one); `batch`
    chooses the BatchSpanProcessor (a background thread: export never blocks a request)
    over the synchronous SimpleSpanProcessor.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    telemetry = config.telemetry
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = telemetry.otlp_endpoint or ""
        if urlsplit(endpoint).scheme not in ("http", "https") or not urlsplit(endpoint).netloc:
            from search.config import ConfigError

            raise ConfigError(
                f"telemetry.otlp_endpoint: {endpoint!r} is not an http(s) URL "
                "(the OTLP/HTTP collector, e.g. http://127.0.0.1:4318)"
            )
        exporter = OTLPSpanExporter(endpoint=traces_endpoint(endpoint), timeout=telemetry.timeout_s)
    ids = _PlannedIds()
    provider = TracerProvider(
        resource=Resource.create({"service.name": telemetry.service_name}),
        id_generator=ids,  # type: ignore[arg-type]
    )
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider, ids


class OtelObserver:
    """Turns each finished request's chain into an OTel trace (see the module docstring).

    Building a request's spans costs about a millisecond of CPU, so `observe` only queues
    the record: one worker thread builds the spans (their times come from the record,
    not from when they are built) and hands them to the span processor.
    """

    def __init__(
        self,
        provider: TracerProvider,
        ids: _PlannedIds,
        *,
        redact: bool = False,
        max_pending: int = 10_000,
    ) -> None:
        """`redact` follows `trace.redact`: every text of the user's (any field outside
        `search.traces.rows.KEPT_FIELDS`, words quoted in messages) leaves the process as
        a pseudonym only, under a key of this process; past `max_pending` queued requests
        (an exporter far behind) traces are dropped."""
        self.provider = provider
        self.ids = ids
        self.redact = redact
        self.tracer = provider.get_tracer(SCOPE)
        self.max_pending = max_pending
        self.dropped = 0
        self._queue: queue.SimpleQueue[TraceRecord | threading.Event | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def observe(self, trace: TraceRecord) -> None:
        """Queue `trace` for the worker; never blocks the event loop."""
        if self._queue.qsize() >= self.max_pending:
            self.dropped += 1
            return
        self._ensure_worker()
        self._queue.put(trace)

    def _ensure_worker(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="otel-spans", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self.export(item)
            except Exception:  # noqa: BLE001 - one odd record must not stop the exporter
                log.exception("building the OpenTelemetry spans of %s failed", item.trace_id)

    def flush(self, timeout: float = 30.0) -> None:
        """Block until every request observed so far has become spans."""
        if self._thread is None or not self._thread.is_alive():
            return
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def export(self, trace: TraceRecord) -> None:
        """Build and end the spans of one finished request (on the worker thread)."""
        from opentelemetry import trace as otel
        from opentelemetry.trace import SpanKind, Status, StatusCode

        chain = trace.chain
        query: str = trace.query
        error = trace.error
        if self.redact:
            from search.traces.rows import redact

            redacted = redact({"query": query, "chain": chain, "error": error})
            query, chain, error = redacted["query"], redacted["chain"], redacted["error"]

        t0 = int(trace.started_at * 1e9)

        def at(ms: float) -> int:
            return t0 + int(ms * 1e6)

        bounds = part_bounds(chain)
        trace_int = otel_trace_id(trace.trace_id)

        self.ids.plan(trace_int, part_span_id(trace.trace_id, ""))
        root = self.tracer.start_span(
            "search",
            context=otel.set_span_in_context(otel.INVALID_SPAN),
            kind=SpanKind.SERVER,
            start_time=t0,
            attributes=event_attributes(
                {
                    "search.trace_id": trace.trace_id,
                    "search.query": query,
                    "search.status_code": trace.status_code,
                    "search.dry_run": trace.dry_run,
                    "search.dropped_events": trace.dropped_events,
                    "search.event_count": len(chain),
                    "search.replay_of": trace.replay_of,
                }
            ),
        )
        spans = {"": root}
        part_queries: dict[str, str] = {}
        for event in chain:
            part = str(event.get("part", ""))
            if part and part not in part_queries and isinstance(event.get("query"), str):
                part_queries[part] = event["query"]
        for path in sorted(bounds, key=part_key):  # parents sort before their children
            start_ms, _ = bounds[path]
            self.ids.plan(None, part_span_id(trace.trace_id, path))
            attributes = {"search.part": path}
            if path in part_queries:
                attributes["search.query"] = part_queries[path]
            spans[path] = self.tracer.start_span(
                f"part {path}",
                context=otel.set_span_in_context(spans[parent_part(path)]),
                kind=SpanKind.INTERNAL,
                start_time=at(start_ms),
                attributes=attributes,
            )

        for event in chain:
            part = str(event.get("part", ""))
            owner = spans.get(part, root)
            if event.get("step") == _SOURCE_STEP:
                start_ms, end_ms = call_window(event)
                call = self.tracer.start_span(
                    f"source {event.get('source')}",
                    context=otel.set_span_in_context(owner),
                    kind=SpanKind.CLIENT,
                    start_time=at(start_ms),
                    attributes=event_attributes(event),
                )
                if event.get("outcome") in _ERROR_OUTCOMES:
                    reason = str(event.get("reason") or event.get("outcome"))
                    call.set_status(Status(StatusCode.ERROR, reason))
                call.end(end_time=at(end_ms))
            else:
                owner.add_event(
                    str(event.get("step")),
                    attributes=event_attributes(event),
                    timestamp=at(float(event.get("t_ms", 0.0))),
                )
                if event.get("step") == Step.ERROR and owner is not root:
                    owner.set_status(Status(StatusCode.ERROR, str(event.get("error_type"))))

        for path in sorted(bounds, key=part_key, reverse=True):  # children end first
            spans[path].end(end_time=at(bounds[path][1]))
        if trace.status_code != 200:
            message = (error or {}).get("type", str(trace.status_code))
            root.set_status(Status(StatusCode.ERROR, message))
        root.end(end_time=t0 + int(max(trace.duration_ms, 0.0) * 1e6))

    def shutdown(self) -> None:
        """Build what is queued, export what is batched, stop (the app's shutdown)."""
        self.flush()
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(30.0)
        self.provider.shutdown()


def build_otel_observer(
    config: Config, exporter: SpanExporter | None = None, *, batch: bool = True
) -> OtelObserver:
    provider, ids = build_tracer_provider(config, exporter, batch=batch)
    install_log_correlation()
    return OtelObserver(provider, ids, redact=config.trace.redact)


def telemetry_observers(config: Config) -> list[OtelObserver]:
    """The OpenTelemetry observer when `telemetry.otlp_endpoint` is set, else nothing."""
    if not config.telemetry.otlp_endpoint:
        return []
    return [build_otel_observer(config)]
