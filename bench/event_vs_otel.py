"""One recorded route event against one OpenTelemetry span event, side by side in one run.

Ours: `record("source_invoked", ...)` inside an open request log (a ContextVar lookup,
the clock, one dict, one tuple appended), as the package runs it: compiled
(routing/chain/_fastrecord.c) where it was built with a C compiler, else the Python
reference; the Python reference is timed beside it either way. Theirs: the OpenTelemetry SDK's `span.add_event` with the same five
attributes on a recording span (a `TracerProvider` with the default always-on sampler
and a `SimpleSpanProcessor` into an `InMemorySpanExporter`, so nothing leaves the process).
Also shown: `trace.get_current_span().add_event(...)`, which, like `record()`, finds its
target through the context rather than holding it.

Also shown: the same call made to an empty function that takes the same keyword arguments,
the floor under any keyword-argument API written in Python (the call, its frame and its
keyword dict), so what `record()` itself adds is visible apart from what calling it costs.

Each round opens a fresh log and a fresh span, times `BENCH_EVENTS` events into each (100:
under the SDK's default limit of 128 events per span, so neither side drops), and closes
them outside the timing. Rounds alternate which side goes first; reported are the medians
of the per-round ns/event and their ratio. Target: ours at least 20x cheaper.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit, env_int, median, order  # noqa: E402
from routing.chain.events import FAST_RECORD, record, record_in_python, route_log  # noqa: E402

ROUNDS = env_int("BENCH_EVENT_ROUNDS", 400)
EVENTS = env_int("BENCH_EVENTS", 100)
TARGET = 20.0


def _calls(fn: Callable[..., None], n: int) -> float:
    """ns per call of `fn` with `record`'s step and five keyword fields."""
    start = time.perf_counter_ns()
    for i in range(n):
        fn(
            "source_invoked",
            source="kiwix",
            query="who wrote war and peace",
            elapsed_ms=1.25,
            outcome="ok",
            result_count=i,
        )
    return (time.perf_counter_ns() - start) / n


def ours(n: int) -> float:
    """ns per `record()` into a live request log."""
    with route_log(max_events=n + 10):
        return _calls(record, n)


def ours_in_python(n: int) -> float:
    """ns per event of the Python reference, into a live request log."""
    with route_log(max_events=n + 10):
        return _calls(record_in_python, n)


def _empty(step: str, **fields: object) -> None:
    """What `record` is called like, doing nothing: the cost of the call alone."""


def call_floor(n: int) -> float:
    """ns per call of an empty function called as `record` is."""
    return _calls(_empty, n)


def otel_span(tracer: trace.Tracer, n: int) -> float:
    """ns per `span.add_event` on a recording span held by the caller."""
    span = tracer.start_span("request")
    assert span.is_recording()
    start = time.perf_counter_ns()
    for i in range(n):
        span.add_event(
            "source_invoked",
            {
                "source": "kiwix",
                "query": "who wrote war and peace",
                "elapsed_ms": 1.25,
                "outcome": "ok",
                "result_count": i,
            },
        )
    elapsed = (time.perf_counter_ns() - start) / n
    span.end()
    return elapsed


def otel_current(tracer: trace.Tracer, n: int) -> float:
    """ns per `get_current_span().add_event`: found through the context, like `record()`."""
    with tracer.start_as_current_span("request") as span:
        assert span.is_recording()
        start = time.perf_counter_ns()
        for i in range(n):
            trace.get_current_span().add_event(
                "source_invoked",
                {
                    "source": "kiwix",
                    "query": "who wrote war and peace",
                    "elapsed_ms": 1.25,
                    "outcome": "ok",
                    "result_count": i,
                },
            )
        return (time.perf_counter_ns() - start) / n


def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    for _ in range(20):  # warm up both paths
        ours(EVENTS), otel_span(tracer, EVENTS), otel_current(tracer, EVENTS)
        exporter.clear()
    samples: dict[str, list[float]] = {
        "ours": [],
        "otel": [],
        "otel_current": [],
        "floor": [],
        "python": [],
    }
    for r in range(ROUNDS):
        for name in order(r, ("ours", "otel")):
            samples[name].append(ours(EVENTS) if name == "ours" else otel_span(tracer, EVENTS))
        samples["otel_current"].append(otel_current(tracer, EVENTS))
        samples["floor"].append(call_floor(EVENTS))
        samples["python"].append(ours_in_python(EVENTS))
        exporter.clear()
    med = {name: median(values) for name, values in samples.items()}
    ratio = med["otel"] / med["ours"]
    built = "compiled" if FAST_RECORD else "the Python reference: no compiled record()"
    print(f"one recorded event (record() into a live log): {med['ours']:7.0f} ns ({built})")
    print(f"  the Python reference, record_in_python():      {med['python']:7.0f} ns")
    print(f"  calling an empty Python function the same way: {med['floor']:5.0f} ns")
    print(f"OpenTelemetry span.add_event (recording span):   {med['otel']:7.0f} ns")
    print(f"OpenTelemetry get_current_span().add_event:      {med['otel_current']:7.0f} ns")
    print(
        f"ratio otel/ours: {ratio:.1f}x cheaper (target >= {TARGET:g}x); "
        f"vs current-span form {med['otel_current'] / med['ours']:.1f}x "
        f"[{ROUNDS} rounds x {EVENTS} events, medians]"
    )
    emit(
        "event_vs_otel",
        ours_ns=med["ours"],
        otel_ns=med["otel"],
        otel_current_ns=med["otel_current"],
        call_floor_ns=med["floor"],
        python_ns=med["python"],
        compiled=FAST_RECORD,
        ratio=ratio,
        ratio_current=med["otel_current"] / med["ours"],
        target=TARGET,
        passed=ratio >= TARGET,
        rounds=ROUNDS,
        events_per_round=EVENTS,
    )


if __name__ == "__main__":
    main()
