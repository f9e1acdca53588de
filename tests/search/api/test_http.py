"""POST /search end to end over real HTTP: in-process ASGI and uvicorn on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from search.traces.records import MemoryTraceSink
from tests.support.app import (
    CONTRACT_FIELDS,
    asgi_client,
    assert_contract_event,
    build_app,
    scripted_config,
    uvicorn_server,
)

KEYWORDS = {"forecast": ["weather", "rain"], "ha": ["lights", "windows"], "web": ["news"]}


def home_config(keywords: dict[str, list[str]] | None = None, **routing: Any):
    return scripted_config(
        {
            "kiwix": {},
            "forecast": {"fallback": ["web"]},
            "ha": {"fail": "unavailable", "fallback": ["web"]},
            "web": {"items": 3},
        },
        keywords=keywords or KEYWORDS,
        **routing,
    )


async def post(client: httpx.AsyncClient, body: Any, **kwargs: Any) -> httpx.Response:
    return await client.post("/search", json=body, **kwargs)


async def test_every_step_appears_where_it_should_with_the_contract_fields() -> None:
    app = build_app(
        home_config(fusion={"both": ["kiwix", "web"]}, keywords={**KEYWORDS, "both": ["compare"]})
    )
    query = (
        "what is the wether today and also lights status; "
        "if it rains tomorrow, are the windows open? compare tides"
    )
    async with asgi_client(app) as client:
        response = await post(client, {"query": query, "explain": True})
        again = await post(client, {"query": "What is the  wether today", "explain": True})
        unknown = await post(client, {"query": "tell me about tides", "explain": True})
    assert response.status_code == 200
    body = response.json()
    chain = body["explanation"]
    for event in chain:
        assert_contract_event(event)
    assert [e["seq"] for e in chain] == list(range(len(chain)))
    seen = {e["step"] for e in chain}
    assert {
        "decomposed",
        "conditional_detected",
        "intent_keyword",
        "source_invoked",
        "fallback",
        "fusion",
    } <= seen
    decomposed = chain[0]
    assert decomposed["step"] == "decomposed" and decomposed["part"] == ""
    assert decomposed["parts"][:2] == ["what is the wether today", "lights status"]
    # The typo still routes to forecast, by keyword, in part 0.
    (typo,) = [e for e in chain if e["step"] == "intent_keyword" and e["part"] == "0"]
    assert typo["decision"] == "forecast"
    # ha refuses, web answers part 1.
    (fallback,) = [e for e in chain if e["step"] == "fallback" and e["part"] == "1"]
    assert (
        fallback["part"],
        fallback["from_source"],
        fallback["to_source"],
        fallback["reason"],
    ) == ("1", "ha", "web", "connection_refused")
    # The condition is a sub-part that runs before the consequence.
    (cond,) = [e for e in chain if e["step"] == "conditional_detected"]
    assert (cond["condition"], cond["consequence"]) == ("it rains tomorrow", "are the windows open")
    cond_path = cond["part"]
    first_condition = min(e["seq"] for e in chain if e["part"] == f"{cond_path}.0")
    first_consequence = min(e["seq"] for e in chain if e["part"] == f"{cond_path}.1")
    assert first_condition < first_consequence
    results = body["results"]
    assert [r["query"] for r in results] == [
        "what is the wether today",
        "lights status",
        "are the windows open",
        "compare tides",
    ]
    assert results[2]["condition"]["query"] == "it rains tomorrow"
    assert results[2]["condition"]["source"] == "forecast"
    assert results[3]["source"] == "both"
    assert body["fallback_occurred"] is True and body["cached"] is False
    # A repeated question is answered from the result cache.
    cached = again.json()
    assert cached["cached"] is True
    assert [e["step"] for e in cached["explanation"]] == ["intent_keyword", "result_cache_hit"]
    # Nothing decides: default with a reason.
    (default,) = unknown.json()["explanation"][:1]
    assert default["step"] == "intent_default"
    assert default["decision"] == "kiwix" and default["reason"]


async def test_explanation_is_null_unless_asked_and_the_recording_is_the_same() -> None:
    sink = MemoryTraceSink()
    app = build_app(home_config(), traces=sink)
    async with asgi_client(app) as client:
        plain = (await post(client, {"query": "lights status and also weather"})).json()
        explained = (
            await post(client, {"query": "lights status and also weather", "explain": True})
        ).json()
    assert plain["explanation"] is None
    assert explained["explanation"]

    def shape(chain: list[dict]) -> list[dict]:
        return [{k: v for k, v in e.items() if k not in {"t_ms", "elapsed_ms"}} for e in chain]

    recorded_plain = sink.get(plain["trace_id"]).chain
    recorded_explained = sink.get(explained["trace_id"]).chain
    # The second request hits the cache for forecast and web: compare the steps that
    # don't depend on cache state, then the full chain against the one returned.
    assert shape(recorded_explained) == shape(explained["explanation"])
    assert [e["step"] for e in recorded_plain][:3] == [e["step"] for e in recorded_explained][:3]
    assert plain["fallback_occurred"] is True


async def test_the_recorded_chain_is_identical_with_or_without_explain() -> None:
    for explain in (False, True):
        sink = MemoryTraceSink()
        app = build_app(home_config(), traces=sink)
        async with asgi_client(app) as client:
            body = (await post(client, {"query": "lights status", "explain": explain})).json()
        chain = sink.get(body["trace_id"]).chain
        steps = [(e["step"], e.get("source"), e.get("outcome")) for e in chain]
        assert steps == [
            ("intent_keyword", None, None),
            ("source_invoked", "ha", "error"),
            ("fallback", None, None),
            ("source_invoked", "web", "ok"),
        ]


async def test_an_exhausted_chain_gives_502_with_the_partial_chain() -> None:
    config = scripted_config(
        {"kiwix": {"fail": "error", "fallback": ["web"]}, "web": {"fail": "unavailable"}}
    )
    async with asgi_client(build_app(config)) as client:
        response = await post(client, {"query": "who was ada lovelace", "explain": True})
        quiet = await post(client, {"query": "who was ada lovelace"})
    assert response.status_code == 502
    body = response.json()
    assert set(body) == {"error", "trace_id", "dropped_events", "explanation"}
    assert body["error"]["type"] == "all_parts_failed"
    steps = [e["step"] for e in body["explanation"]]
    assert steps == [
        "intent_default",
        "source_invoked",
        "fallback",
        "source_invoked",
        "error",
        "error",
    ]
    assert quiet.status_code == 502 and quiet.json()["explanation"] is None


async def test_one_failing_part_does_not_hide_the_others() -> None:
    config = scripted_config({"kiwix": {}, "ha": {"fail": "crash"}}, keywords={"ha": ["lights"]})
    async with asgi_client(build_app(config)) as client:
        response = await post(
            client, {"query": "lights status; who was ada lovelace", "explain": True}
        )
    assert response.status_code == 200
    first, second = response.json()["results"]
    assert first["status"] == "error" and first["source"] is None
    assert first["error"]["type"] == "error"
    assert second["status"] == "ok" and second["source"] == "kiwix"


async def test_an_answered_condition_keeps_a_failed_consequence_from_being_a_502() -> None:
    """ "If it rains tomorrow, close the windows" with ha failing: the condition's answer is
    an answer, so the request is a 200 with the failed part, not "every part failed"."""
    config = scripted_config(
        {"kiwix": {}, "web": {}, "ha": {"fail": "error"}},
        keywords={"ha": ["windows"], "web": ["rains"]},
    )
    async with asgi_client(build_app(config)) as client:
        response = await post(client, {"query": "if it rains tomorrow, close the windows"})
        both = await post(client, {"query": "close the windows"})
    assert response.status_code == 200, response.text
    (part,) = response.json()["results"]
    assert part["status"] == "error" and part["condition"]["status"] == "ok"
    assert both.status_code == 502  # with nothing answered it still is


async def test_the_request_deadline_gives_504_with_the_error_last() -> None:
    config = scripted_config({"kiwix": {"delay_s": 5, "timeout_s": 10}}, request_deadline_s=0.3)
    async with asgi_client(build_app(config)) as client:
        response = await post(client, {"query": "slow; slower", "explain": True})
    assert response.status_code == 504
    body = response.json()
    assert body["error"]["type"] == "deadline_exceeded"
    assert body["explanation"][-1]["step"] == "error"
    assert body["explanation"][0]["step"] == "decomposed"
    # the calls the deadline cut off are in the chain, before the error that ended it
    cut = [e for e in body["explanation"] if e["step"] == "source_invoked"]
    assert sorted(e["part"] for e in cut) == ["0", "1"]
    for event in cut:
        assert (event["source"], event["outcome"], event["reason"]) == (
            "kiwix",
            "timeout",
            "cancelled",
        )
        assert 200 <= event["elapsed_ms"] < 5000


async def test_dry_run_plans_without_calling_sources() -> None:
    app = build_app(home_config())
    async with asgi_client(app) as client:
        body = (
            await post(
                client,
                {"query": "lights status and also weather", "dry_run": True, "explain": True},
            )
        ).json()
    assert [r["status"] for r in body["results"]] == ["planned", "planned"]
    assert [r["source"] for r in body["results"]] == ["ha", "forecast"]
    assert not [e for e in body["explanation"] if e["step"] == "source_invoked"]
    assert [e["step"] for e in body["explanation"]].count("planned") == 2
    assert app.state.service.sources["ha"].calls == 0


async def test_the_log_bound_counts_dropped_events() -> None:
    config = scripted_config({"kiwix": {}}, max_events=10, max_parts=12)
    query = "; ".join(f"question number {i}" for i in range(12))
    async with asgi_client(build_app(config)) as client:
        body = (await post(client, {"query": query, "explain": True})).json()
    assert len(body["explanation"]) == 10
    assert body["dropped_events"] > 0
    assert len(body["results"]) == 12


BAD_INPUTS = [
    (b"not json", 400, "body"),
    (b"[1, 2]", 422, "body"),
    (b"{}", 422, "query"),
    (b'{"query": 5}', 422, "query"),
    (b'{"query": null}', 422, "query"),
    (b'{"query": ""}', 422, "query"),
    (b'{"query": "   \\t "}', 422, "query"),
    (b'{"query": "x", "explain": "yes"}', 422, "explain"),
    (b'{"query": "x", "dry_run": 1}', 422, "dry_run"),
    (b'{"query": "x", "colour": "red"}', 422, "colour"),
    (b'{"query": "x", "session_id": ""}', 422, "session_id"),
    (b'{"query": "' + b"a" * 1001 + b'"}', 422, "query"),
    (b'{"query": "' + b"a" * 70000 + b'"}', 413, "body"),
    (b"\xff\xfe", 400, "body"),
]


@pytest.mark.parametrize(("raw", "status", "field"), BAD_INPUTS)
async def test_bad_input_gets_a_4xx_naming_the_field(raw: bytes, status: int, field: str) -> None:
    async with asgi_client(build_app(home_config())) as client:
        response = await client.post(
            "/search", content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"type", "message"}
    assert error["message"].startswith(field), error
    assert "Traceback" not in response.text


async def test_unknown_routes_and_methods_get_json_errors() -> None:
    async with asgi_client(build_app(home_config())) as client:
        missing = await client.get("/nope")
        wrong = await client.get("/search")
        health = await client.get("/healthz")
        schema = await client.get("/openapi.json")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
    assert wrong.status_code == 405
    assert health.json()["status"] == "ok"
    paths = schema.json()["paths"]
    assert {"/search", "/healthz", "/openapi.json"} <= set(paths)
    assert "SearchRequest" in schema.json()["components"]["schemas"]


def test_200_concurrent_requests_over_loopback_never_see_each_others_events() -> None:
    config = scripted_config(
        {
            "kiwix": {"delay_s": 0.01, "record_in_thread": True},
            "ha": {"fail": "error", "fallback": ["kiwix"], "delay_s": 0.005},
        },
        keywords={"ha": ["lights"]},
        **{"max_events": 1000},
    )
    app = build_app(config)

    async def main(base: str) -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/search",
                        json={
                            "query": f"lights number {i} and also zebra fact {i}",
                            "explain": True,
                        },
                    )
                    for i in range(200)
                )
            )

    with uvicorn_server(app) as base:
        responses = asyncio.run(main(base))
    for i, response in enumerate(responses):
        assert response.status_code == 200, response.text
        chain = response.json()["explanation"]
        own = {
            f"lights number {i}",
            f"zebra fact {i}",
            f"lights number {i} and also zebra fact {i}",
        }
        queries = {e["query"] for e in chain if "query" in e}
        assert queries <= own, f"request {i} saw {queries - own}"
        assert [e["seq"] for e in chain] == list(range(len(chain)))
        assert sum(e["step"] == "worker_thread" for e in chain) == 2
        assert {e["step"] for e in chain} <= set(CONTRACT_FIELDS) | {
            "worker_thread",
            "source_skipped",
        }


async def test_an_api_token_is_required_everywhere_but_healthz() -> None:
    config = home_config()
    config.server.api_token = SecretStr("s3cret-token-value")
    async with asgi_client(build_app(config)) as client:
        anonymous = await post(client, {"query": "lights"})
        wrong = await post(client, {"query": "lights"}, headers={"authorization": "Bearer nope"})
        right = await post(
            client, {"query": "lights"}, headers={"authorization": "Bearer s3cret-token-value"}
        )
        health = await client.get("/healthz")
        schema = await client.get("/openapi.json")
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert "s3cret" not in wrong.text
    assert anonymous.json()["error"]["type"] == "unauthorized"
    assert right.status_code == 200
    assert health.status_code == 200
    assert schema.status_code == 401


async def test_a_split_made_by_the_keyword_rules_says_so_in_the_chain() -> None:
    """The grammar keeps "... and hall lights too" with the question before it; the
    rules claim the two sides for forecast and ha, so it splits, and `decomposed` says why."""
    app = build_app(home_config())
    async with asgi_client(app) as client:
        claimed = (
            await post(
                client,
                {
                    "query": "will it rain in oslo and hall lights too",
                    "explain": True,
                    "dry_run": True,
                },
            )
        ).json()
        grammar = (
            await post(
                client,
                {
                    "query": "will it rain in oslo and turn on the lights",
                    "explain": True,
                    "dry_run": True,
                },
            )
        ).json()
    (event,) = [e for e in claimed["explanation"] if e["step"] == "decomposed"]
    assert event["parts"] == ["will it rain in oslo", "hall lights too"]
    assert event["claimed"] == [{"part": 1, "routes": ["forecast", "ha"]}]
    assert [r["route"] for r in claimed["results"]] == ["forecast", "ha"]
    (event,) = [e for e in grammar["explanation"] if e["step"] == "decomposed"]
    assert event["parts"] == ["will it rain in oslo", "turn on the lights"]
    assert "claimed" not in event  # the grammar split this one


async def test_every_part_status_the_service_answers_is_one_its_schema_names() -> None:
    """An unserved request and a withheld command answer statuses a client generated from
    /openapi.json must accept."""
    config = scripted_config(
        {"kiwix": {}, "ha": {"control_prefix": "unlock", "allow_control": False}},
        keywords={"ha": ["door"]},
        shipped_routes=True,  # none.yaml: "set an alarm" is something no source serves
    )
    async with asgi_client(build_app(config)) as client:
        unserved = await client.post("/search", json={"query": "set an alarm for 7 am"})
        withheld = await client.post("/search", json={"query": "unlock the front door"})
        schema = (await client.get("/openapi.json")).json()
    part = schema["components"]["schemas"]["PartResult"]["properties"]
    statuses = set(part["status"]["enum"])
    assert "withheld" in part
    seen = {part["status"] for r in (unserved, withheld) for part in r.json()["results"]}
    assert {"unserved", "withheld"} <= seen, (unserved.json(), withheld.json())
    assert seen <= statuses
