"""`/metrics` for the outcomes that are not a source call: unserved parts, withheld commands,
refused input, and source calls whose duration a truncated chain no longer has.

The end-to-end tests drive the real app over HTTP (in-process ASGI) and check the counters
against the explanation chains the same requests returned.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from search.api.app import create_app
from search.observability.metrics import MetricsObserver
from search.traces.records import TraceRecord
from tests.search.observability.test_metrics import samples, value
from tests.support.app import asgi_client, scripted_config


def config(**routing: Any):
    return scripted_config(
        {
            "kiwix": {},
            "ha": {
                "fail": "unavailable",
                "fallback": ["web"],
                "control_prefix": "turn on",
                "allow_control": True,
            },
            "web": {"items": 3},
            "forecast": {},
        },
        keywords={"ha": ["lights", "light"], "forecast": ["rains"], "web": ["news"]},
        none_keywords=["remind"],
        **routing,
    )


async def test_unserved_parts_and_withheld_commands_are_counted_refusals_are_not() -> None:
    app = create_app(config())
    asked: list[tuple[dict[str, Any], int]] = [
        ({"query": "remind me to call mom"}, 200),  # unserved
        ({"query": "remind me to call mom"}, 200),
        ({"query": "turn on the kitchen light", "dry_run": True}, 200),  # withheld
        ({"query": "if it rains, turn on the porch light"}, 200),  # withheld: conditional
        ({"query": "tell me about tides"}, 200),  # decided by the default route
    ]
    chains: list[list[dict[str, Any]]] = []
    async with asgi_client(app) as client:
        for body, status in asked:
            response = await client.post("/search", json={**body, "explain": True})
            assert response.status_code == status, response.text
            chains.append(response.json()["explanation"])
        refused = await client.post("/search", json={"query": "   "})
        assert refused.status_code == 422
        data = samples((await client.get("/metrics")).text)
    events = [e for chain in chains for e in chain]

    # One per unserved part, under the stage whose verdict it was; not a decision.
    ended = [e for e in events if e["step"] == "intent_default" and e["reason"] == "unserved"]
    assert len(ended) == 2
    assert value(data, "search_unserved_total", stage="intent_keyword") == 2
    assert value(data, "search_unserved_total", stage="intent_semantic") == 0  # shown as zero
    decided = Counter(
        e["step"] for e in events if e["step"].startswith("intent_") and e["decision"]
    )
    assert decided["intent_default"] == 1
    for stage, count in decided.items():
        assert value(data, "search_intent_decisions_total", stage=stage) == count

    withheld = Counter(
        (e["source"], e["reason"]) for e in events if e["step"] == "control_withheld"
    )
    assert sum(withheld.values()) == 2
    assert {"conditional"} <= {reason for _, reason in withheld}
    for (source, reason), count in withheld.items():
        assert value(data, "search_control_withheld_total", source=source, reason=reason) == count

    # The 422 never reached routing: requests_total counts the five that did.
    assert value(data, "search_requests_total", status="200") == 5
    assert value(data, "search_requests_total", status="422") == 0


async def test_source_calls_past_max_events_are_counted_untimed() -> None:
    app = create_app(config(max_events=10))
    query = "; ".join(["are the lights on"] * 6)  # ha fails, web answers: many calls
    async with asgi_client(app) as client:
        body = (await client.post("/search", json={"query": query, "explain": True})).json()
        data = samples((await client.get("/metrics")).text)
    assert body["dropped_events"] > 0
    kept = Counter(
        (e["source"], e["outcome"]) for e in body["explanation"] if e["step"] == "source_invoked"
    )
    untimed_total = 0.0
    for source, outcome in [("ha", "error"), ("web", "ok")]:
        labels = {"source": source, "outcome": outcome}
        calls = value(data, "search_source_calls_total", **labels)
        timed = value(data, "search_source_call_duration_seconds_count", **labels)
        untimed = value(data, "search_source_calls_untimed_total", **labels)
        assert timed == kept[(source, outcome)]  # the histogram has the kept calls only
        assert calls == timed + untimed  # and the counters say what it left out
        untimed_total += untimed
    assert untimed_total > 0


def event(step: str, seq: int, part: str, **fields: Any) -> dict[str, Any]:
    return {"step": step, "seq": seq, "t_ms": float(seq), "part": part, "query": "q", **fields}


def test_unserved_is_counted_under_the_verdict_of_its_own_part() -> None:
    """Parts run concurrently, so their events interleave: each unserved part is paired
    with the verdict recorded in that part. A semantic 'unserved' that a later stage
    overruled (a follow-up) counts nothing; a withheld reason outside the gate's set is
    'other'."""
    chain = [
        event("intent_keyword", 0, "0", decision=None, outcome="unserved"),
        event("intent_llm", 1, "1", decision=None, outcome="no_source"),
        event("intent_semantic", 2, "2", decision=None, outcome="unserved"),
        event("intent_default", 3, "1", decision=None, reason="unserved", outcome="unserved"),
        event("intent_session", 4, "2", decision="web"),
        event("intent_default", 5, "0", decision=None, reason="unserved", outcome="unserved"),
        event("intent_keyword", 6, "3", decision=None, outcome="declined"),
        event("intent_default", 7, "3", decision="kiwix", reason="low_confidence"),
        event("control_withheld", 8, "3", source="ha", reason="made_up"),
    ]
    observer = MetricsObserver()
    observer.observe(TraceRecord("t" * 32, 0.0, "q", 200, 1.0, chain))
    data = samples(observer.exposition().decode())
    assert value(data, "search_unserved_total", stage="intent_keyword") == 1
    assert value(data, "search_unserved_total", stage="intent_llm") == 1
    assert value(data, "search_unserved_total", stage="intent_semantic") == 0
    assert value(data, "search_intent_decisions_total", stage="intent_default") == 1
    assert value(data, "search_intent_decisions_total", stage="intent_session") == 1
    assert value(data, "search_control_withheld_total", source="ha", reason="other") == 1
