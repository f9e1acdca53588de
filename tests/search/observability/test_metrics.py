"""`GET /metrics`: Prometheus text format, counted from the recorded events only.

The end-to-end tests drive the real app over HTTP (in-process ASGI) and check every
counter against the explanation chains the same requests returned; the parser is
prometheus-client's own. The unit test feeds a hand-written chain to show the metrics
read events and nothing else (steps the scripted sources can't produce: decision-cache
hits, skipped sources).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from search.api.app import create_app
from search.observability.metrics import MetricsObserver
from search.traces.records import TraceRecord
from tests.support.app import asgi_client, scripted_config

KEYWORDS = {"ha": ["lights"], "web": ["news"], "forecast": ["weather"]}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} from the exposition text."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(data: dict[Any, float], name: str, **labels: str) -> float:
    return data.get((name, tuple(sorted(labels.items()))), 0.0)


def config(**routing: Any):
    return scripted_config(
        {
            "kiwix": {},
            "ha": {"fail": "unavailable", "fallback": ["web"]},
            "forecast": {"fail": "empty", "fallback": ["kiwix"]},
            "web": {"items": 3, "delay_s": 0.02},
            "down": {"fail": "error"},
        },
        keywords={**KEYWORDS, "down": ["broken"]},
        **routing,
    )


async def test_counters_match_the_chains_the_requests_returned() -> None:
    app = create_app(config())
    queries = [
        "are the lights on",  # ha fails -> fallback to web
        "are the lights on",  # ha fails again; web from the result cache
        "what's the weather",  # forecast empty -> fallback to kiwix
        "tell me about tides",  # intent_default -> kiwix
        "is it broken",  # every part failed: 502
    ]
    chains: list[list[dict[str, Any]]] = []
    statuses: list[int] = []
    async with asgi_client(app) as client:
        for query in queries:
            response = await client.post("/search", json={"query": query, "explain": True})
            statuses.append(response.status_code)
            chains.append(response.json()["explanation"])
        scrape = await client.get("/metrics")
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
    data = samples(scrape.text)
    events = [e for chain in chains for e in chain]

    assert statuses == [200, 200, 200, 200, 502]
    assert value(data, "search_requests_total", status="200") == 4
    assert value(data, "search_requests_total", status="502") == 1
    assert value(data, "search_request_duration_seconds_count") == 5

    calls = Counter((e["source"], e["outcome"]) for e in events if e["step"] == "source_invoked")
    assert calls[("ha", "error")] == 2 and calls[("web", "ok")] == 1
    for (source, outcome), count in calls.items():
        assert value(data, "search_source_calls_total", source=source, outcome=outcome) == count
        assert (
            value(data, "search_source_call_duration_seconds_count", source=source, outcome=outcome)
            == count
        )
    # The web call slept 20 ms: its latency landed in the histogram, above the 10 ms bucket.
    web = dict(source="web", outcome="ok")
    assert value(data, "search_source_call_duration_seconds_sum", **web) >= 0.02
    assert value(data, "search_source_call_duration_seconds_bucket", le="0.01", **web) == 0
    assert value(data, "search_source_call_duration_seconds_bucket", le="+Inf", **web) == 1

    moves = Counter((e["from_source"], e["to_source"]) for e in events if e["step"] == "fallback")
    assert moves == {("ha", "web"): 2, ("forecast", "kiwix"): 1}
    for (src, dst), count in moves.items():
        assert value(data, "search_fallbacks_total", from_source=src, to_source=dst) == count

    hits = sum(e["step"] == "result_cache_hit" for e in events)
    assert hits >= 1
    assert value(data, "search_cache_hits_total", kind="result") == hits
    assert value(data, "search_cache_hits_total", kind="decision") == 0

    stages = Counter(e["step"] for e in events if e["step"].startswith("intent_"))
    assert stages["intent_keyword"] == 4 and stages["intent_default"] == 1
    for stage, count in stages.items():
        assert value(data, "search_intent_decisions_total", stage=stage) == count
    errors = Counter(e["error_type"] for e in events if e["step"] == "error")
    for error_type, count in errors.items():
        assert value(data, "search_errors_total", error_type=error_type) == count
    assert value(data, "search_dropped_events_total") == 0


async def test_dropped_events_are_counted_and_the_chain_is_truncated() -> None:
    app = create_app(config(max_events=10))
    query = "; ".join(["are the lights on"] * 6)
    async with asgi_client(app) as client:
        body = (await client.post("/search", json={"query": query, "explain": True})).json()
        data = samples((await client.get("/metrics")).text)
    assert body["dropped_events"] > 0 and len(body["explanation"]) == 10
    assert value(data, "search_dropped_events_total") == body["dropped_events"]


async def test_every_surface_counts_and_apps_do_not_share_registries() -> None:
    first, second = create_app(config()), create_app(config())
    async with asgi_client(first) as one, asgi_client(second) as two:
        await one.post("/search", json={"query": "tell me about tides"})
        await one.post("/search", json={"query": "tell me about tides", "dry_run": True})
        a = samples((await one.get("/metrics")).text)
        b = samples((await two.get("/metrics")).text)
    assert value(a, "search_requests_total", status="200") == 2
    assert value(b, "search_requests_total", status="200") == 0
    # Known label sets are exported as zeros before anything happened (rate() needs them).
    assert ("search_cache_hits_total", (("kind", "decision"),)) in b


def test_the_observer_reads_events_and_nothing_else() -> None:
    observer = MetricsObserver()
    chain = [
        {
            "step": "intent_cached",
            "seq": 0,
            "t_ms": 0.1,
            "part": "0",
            "query": "q",
            "decision": "web",
        },
        {
            "step": "source_skipped",
            "seq": 1,
            "t_ms": 0.2,
            "part": "0",
            "source": "web",
            "query": "q",
            "reason": "circuit_open",
        },
        {
            "step": "fallback",
            "seq": 2,
            "t_ms": 0.3,
            "part": "0",
            "from_source": "web",
            "to_source": "kiwix",
            "query": "q",
            "reason": "circuit_open",
        },
        {
            "step": "source_invoked",
            "seq": 3,
            "t_ms": 250.3,
            "part": "0",
            "source": "kiwix",
            "query": "q",
            "elapsed_ms": 250.0,
            "outcome": "timeout",
            "result_count": 0,
        },
        {
            "step": "intent_future_stage",
            "seq": 4,
            "t_ms": 251.0,
            "part": "1",
            "query": "r",
            "decision": "kiwix",
        },
    ]
    observer.observe(TraceRecord("t" * 32, 0.0, "q", 504, 260.0, chain, dropped_events=7))
    data = samples(observer.exposition().decode())
    assert value(data, "search_requests_total", status="504") == 1
    assert value(data, "search_cache_hits_total", kind="decision") == 1
    assert value(data, "search_intent_decisions_total", stage="intent_cached") == 1
    assert value(data, "search_intent_decisions_total", stage="intent_future_stage") == 1
    assert value(data, "search_source_skips_total", source="web", reason="circuit_open") == 1
    assert value(data, "search_fallbacks_total", from_source="web", to_source="kiwix") == 1
    assert value(data, "search_source_calls_total", source="kiwix", outcome="timeout") == 1
    assert (
        value(
            data,
            "search_source_call_duration_seconds_bucket",
            source="kiwix",
            outcome="timeout",
            le="0.25",
        )
        == 1
    )
    assert (
        value(
            data,
            "search_source_call_duration_seconds_bucket",
            source="kiwix",
            outcome="timeout",
            le="0.1",
        )
        == 0
    )
    assert value(data, "search_dropped_events_total") == 7


def test_tallied_durations_expose_as_prometheus_own_histogram_would() -> None:
    """Requests are tallied between scrapes; the exposition equals a prometheus-client
    Histogram that observed each duration itself, bucket edges included, and a second
    scrape adds only what came after the first."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from search.observability.metrics import REQUEST_BUCKETS_S

    durations_ms = [0.0, 4.9, 5.0, 5.1, 10.0, 99.0, 250.0, 30_000.0, 31_000.0, -1.0]
    observer = MetricsObserver()
    registry = CollectorRegistry()
    reference = Histogram(
        "search_request_duration_seconds", "reference", buckets=REQUEST_BUCKETS_S, registry=registry
    )
    for i, ms in enumerate(durations_ms):
        observer.observe(TraceRecord(f"{i:032x}", 0.0, "q", 200, ms, []))
        reference.observe(max(ms, 0.0) / 1000.0)
        if i == 4:  # a scrape halfway: nothing is counted twice
            observer.exposition()

    def durations(text: str) -> dict[Any, float]:
        return {
            key: round(number, 9)
            for key, number in samples(text).items()
            if key[0].startswith("search_request_duration_seconds")
            and not key[0].endswith("_created")
        }

    ours = durations(observer.exposition().decode())
    theirs = durations(generate_latest(registry).decode())
    assert ours == theirs
    assert value(ours, "search_request_duration_seconds_count") == len(durations_ms)
    assert (
        value(samples(observer.exposition().decode()), "search_requests_total", status="200") == 10
    )


async def test_openapi_documents_metrics_ui_and_mcp() -> None:
    async with asgi_client(create_app(config())) as client:
        paths = (await client.get("/openapi.json")).json()["paths"]
    assert {"/metrics", "/ui", "/mcp"} <= set(paths)
    assert "text/plain" in paths["/metrics"]["get"]["responses"]["200"]["content"]
