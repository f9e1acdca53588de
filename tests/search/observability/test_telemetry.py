"""OpenTelemetry export: each request's recorded chain as one OTel trace.

The tree shape and the timings are checked on the SDK's in-memory exporter; the wiring
in the app (`telemetry.otlp_endpoint`) with the real OTLP/HTTP exporter, against a
loopback collector that decodes the protobuf request exactly as the OTLP/HTTP spec
defines it (POST /v1/traces, `application/x-protobuf`, ExportTraceServiceRequest), since
no Jaeger or Tempo runs here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from routing.chain.events import part_scope
from search.api.app import create_app
from search.config import ConfigError, parse_config
from search.observability.telemetry import (
    build_otel_observer,
    current_trace_id,
    install_log_correlation,
    otel_trace_id,
    part_span_id,
    traces_endpoint,
)
from search.service import Service
from sources.base import Item, Source
from sources.registry import SourceConfig, register_kind
from tests.support.app import asgi_client

# --- a source kind that logs while it answers (to see log records get the ids) ---------


class Config(SourceConfig):
    type: Literal["chatty"]


class Chatty(Source):
    kind = "chatty"

    async def search(self, query: str) -> list[Item]:
        logging.getLogger("tests.chatty").warning("looking up %s", query)
        return [Item("chatty", f"about {query}")]


def build(name: str, config: SourceConfig) -> Source:
    return Chatty(name, config.timeout_s)


register_kind("chatty", __name__)


def config(**extra: Any):
    data: dict[str, Any] = {
        "routing": {
            "default_source": "kiwix",
            "keywords": {
                "ha": ["lights"],
                "web": ["news"],
                "chatty": ["gossip"],
                "forecast": ["rains", "weather"],
            },
            "semantic": {"enabled": False},
        },
        "trace": {"enabled": False},
        "sources": {
            "kiwix": {"type": "scripted"},
            "ha": {"type": "scripted", "fail": "unavailable", "delay_s": 0.03, "fallback": ["web"]},
            "web": {"type": "scripted", "delay_s": 0.05},
            "forecast": {"type": "scripted"},
            "chatty": {"type": "chatty"},
        },
        **extra,
    }
    return parse_config(data)


def ns(seconds: float) -> int:
    return int(seconds * 1e9)


async def run(query: str, **extra: Any) -> tuple[Any, list[ReadableSpan]]:
    exporter = InMemorySpanExporter()
    cfg = config(**extra)
    observer = build_otel_observer(cfg, exporter, batch=False)
    service = Service(cfg, observers=[observer])
    await service.start()
    try:
        outcome = await service.search(query, explain=True)
    finally:
        await service.aclose()
    observer.flush()  # spans are built on the observer's worker thread
    return outcome, list(exporter.get_finished_spans())


async def test_tree_shape_timings_and_event_counts_follow_the_chain() -> None:
    query = "if it rains tomorrow, are the lights on? tell me about tides"
    outcome, spans = await run(query)
    chain = outcome.chain
    by_name = {s.name: s for s in spans}
    root = by_name["search"]
    trace_int = int(outcome.trace_id, 16)

    # One trace, and its id is the request's trace_id.
    assert {s.context.trace_id for s in spans} == {trace_int}
    assert root.parent is None
    assert root.attributes["search.trace_id"] == outcome.trace_id

    # A span per part, nested by path: "0.1" under "0", "0" and "1" under the request.
    parts = {e["part"] for e in chain if e["part"]}
    assert {"0.0", "0.1", "1"} <= parts
    expected_parts = parts | {p.rsplit(".", 1)[0] for p in parts if "." in p}
    part_spans = {s.attributes["search.part"]: s for s in spans if s.name.startswith("part ")}
    assert set(part_spans) == expected_parts
    for path, span in part_spans.items():
        parent = part_spans[path.rsplit(".", 1)[0]] if "." in path else root
        assert span.parent.span_id == parent.context.span_id, path
        assert span.context.span_id == part_span_id(outcome.trace_id, path)

    # A span per source call, under its part, from (t_ms - elapsed_ms) to t_ms.
    invoked = [e for e in chain if e["step"] == "source_invoked"]
    calls = [s for s in spans if s.name.startswith("source ")]
    assert len(calls) == len(invoked) >= 3
    started = ns(root.start_time / 1e9)
    for event in invoked:
        span = next(s for s in calls if s.attributes["seq"] == event["seq"])
        assert span.name == f"source {event['source']}"
        assert span.parent.span_id == part_spans[event["part"]].context.span_id
        assert span.attributes["outcome"] == event["outcome"]
        assert abs(span.end_time - (started + event["t_ms"] * 1e6)) < 2_000
        assert abs((span.end_time - span.start_time) - event["elapsed_ms"] * 1e6) < 2_000
    # Real times: ha slept 30 ms before failing, web 50 ms; web started after ha ended.
    ha = next(s for s in calls if s.name == "source ha")
    web = next(s for s in calls if s.name == "source web")
    assert ha.end_time - ha.start_time >= 30e6 and web.end_time - web.start_time >= 50e6
    assert web.start_time >= ha.end_time
    assert ha.status.status_code is StatusCode.ERROR
    assert web.status.status_code is StatusCode.UNSET

    # Every other event is a span event, on its part's span, with its fields.
    span_events = [(s, ev) for s in spans for ev in s.events]
    assert len(calls) + len(span_events) == len(chain)
    others = [e for e in chain if e["step"] != "source_invoked"]
    for event in others:
        owner = part_spans.get(event["part"], root)
        match = [ev for ev in owner.events if ev.attributes["seq"] == event["seq"]]
        assert len(match) == 1 and match[0].name == event["step"]
        assert match[0].timestamp == started + int(event["t_ms"] * 1e6)
        for key, value in event.items():
            if isinstance(value, (str, int, float, bool)):
                assert match[0].attributes[key] == value
    fallback = next(ev for _, ev in span_events if ev.name == "fallback")
    assert (fallback.attributes["from_source"], fallback.attributes["to_source"]) == ("ha", "web")

    # Parents enclose their children; the request encloses everything.
    for span in spans:
        if span.parent is not None:
            parent = next(s for s in spans if s.context.span_id == span.parent.span_id)
            assert parent.start_time <= span.start_time and span.end_time <= parent.end_time
    assert root.end_time - root.start_time == pytest.approx(outcome.duration_ms * 1e6, abs=2_000)


async def test_a_failed_request_marks_the_request_span() -> None:
    outcome, spans = await run(
        "are the lights on",
        sources={
            "kiwix": {"type": "scripted"},
            "ha": {"type": "scripted", "fail": "error"},
        },
        routing={
            "default_source": "kiwix",
            "keywords": {"ha": ["lights"]},
            "semantic": {"enabled": False},
        },
    )
    assert outcome.status_code == 502
    root = next(s for s in spans if s.name == "search")
    assert root.status.status_code is StatusCode.ERROR
    part = next(s for s in spans if s.name == "part 0")
    assert any(ev.name == "error" for ev in part.events)
    assert part.status.status_code is StatusCode.ERROR


async def test_redact_sends_digests_instead_of_query_text() -> None:
    outcome, spans = await run("tell me about tides", trace={"enabled": False, "redact": True})
    for span in spans:
        texts = [str(v) for v in span.attributes.values()]
        texts += [str(v) for ev in span.events for v in ev.attributes.values()]
        assert not any("tides" in t for t in texts), span.name
    root = next(s for s in spans if s.name == "search")
    assert str(root.attributes["search.query"]).startswith("hmac-sha256:")  # keyed


def test_log_records_carry_the_trace_and_part_span_ids(caplog: pytest.LogCaptureFixture) -> None:
    install_log_correlation()
    token = current_trace_id.set("ab" * 16)
    try:
        with part_scope("1.0"):
            logging.getLogger("tests.telemetry").warning("inside a part")
        logging.getLogger("tests.telemetry").warning("at the request level")
    finally:
        current_trace_id.reset(token)
    logging.getLogger("tests.telemetry").warning("outside any request")
    inside, request_level, outside = caplog.records[-3:]
    assert inside.trace_id == inside.otelTraceID == "ab" * 16
    assert inside.span_id == format(part_span_id("ab" * 16, "1.0"), "016x")
    assert request_level.span_id == format(part_span_id("ab" * 16, ""), "016x")
    assert outside.trace_id == "" and outside.span_id == ""


async def test_a_source_logging_during_a_request_links_to_its_spans(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcome, spans = await run("any gossip today")
    record = next(r for r in caplog.records if r.name == "tests.chatty")
    assert record.trace_id == format(otel_trace_id(outcome.trace_id), "032x")
    part = next(s for s in spans if s.name == "part 0")
    assert record.span_id == format(part.context.span_id, "016x")


# --- the app, with the real OTLP/HTTP exporter ---------------------------------------


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Collector.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture()
def collector() -> Iterator[str]:
    Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_the_app_exports_over_otlp_http_when_an_endpoint_is_set(collector: str) -> None:
    app = create_app(config(telemetry={"otlp_endpoint": collector, "service_name": "test-router"}))
    async with asgi_client(app) as client:
        body = (
            await client.post("/search", json={"query": "are the lights on", "explain": True})
        ).json()
    # Leaving the lifespan shut the provider down, which flushed the batch.
    assert Collector.received, "nothing reached the collector"
    spans = []
    for path, content_type, payload in Collector.received:
        assert path == "/v1/traces" and content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest()
        request.ParseFromString(payload)
        for resource_spans in request.resource_spans:
            attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            assert attrs["service.name"] == "test-router"
            for scope_spans in resource_spans.scope_spans:
                spans.extend(scope_spans.spans)
    assert {s.trace_id.hex() for s in spans} == {body["trace_id"]}
    names = sorted(s.name for s in spans)
    assert names == ["part 0", "search", "source ha", "source web"]
    events = sum(len(s.events) for s in spans) + 2
    assert events == len(body["explanation"])


def test_no_endpoint_means_no_exporter_and_bad_endpoints_are_config_errors() -> None:
    app = create_app(config())
    assert not any(type(o).__name__ == "OtelObserver" for o in app.state.service.observers)
    with pytest.raises(ConfigError, match="telemetry.otlp_endpoint"):
        create_app(config(telemetry={"otlp_endpoint": "tempo:4318"}))
    assert traces_endpoint("http://tempo:4318") == "http://tempo:4318/v1/traces"
    assert traces_endpoint("http://tempo:4318/") == "http://tempo:4318/v1/traces"
    assert traces_endpoint("https://c.example/otlp/v1/traces") == "https://c.example/otlp/v1/traces"
