"""Faults injected at random into real HTTP sources, under concurrency, over loopback.

SearXNG and Open-Meteo cannot run here, so `FaultySearxng` / `FaultyOpenMeteo`
(tests/support/faulty.py) speak their documented wire formats on 127.0.0.1 and draw a
fault per request from a seeded RNG: timeouts, 401, 403, 429, 500, 502, 503, a body that
is not JSON, JSON of the wrong shape, an empty result. A third source points at a closed
port (connection refused). The last resort is the real libzim source over the real demo
ZIM. The service runs as `python -m search serve` in its own process; requests go through
uvicorn over real HTTP.

What must hold: no 500 ever; every response is a result or the contract's error body;
every `source_invoked` outcome and every `fallback` reason is the one the server's
injected fault implies (matched per request by the query text the server received);
the circuit breaker opens after N consecutive failures, skips with the time left, and a
half-open probe brings the source back; the per-source concurrency bound holds, counted
at the server.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from search.config import parse_config
from tests.support.app import assert_contract_event, build_app, uvicorn_server
from tests.support.faulty import (
    ChainAudit,
    FaultyOpenMeteo,
    FaultySearxng,
    ServerProcess,
)
from tests.support.wire_servers import Fault, closed_port_url

SEED = 20240907
TIMEOUT_S = 5.0  # the HTTP sources' timeout_s; the timeout fault delays 6 s
TOPICS = (
    "the statue of liberty",
    "mount everest",
    "marie curie",
    "the eiffel tower",
    "alan turing",
    "the great wall of china",
    "isaac newton",
    "machu picchu",
)
SUCCESS_KEYS = {"query", "trace_id", "results", "cached", "fallback_occurred", "explanation"}


def service_config(web: str, forecast: str, zim: Path, **routing: Any) -> dict[str, Any]:
    """web -> kiwix, forecast -> kiwix, archive (closed port) -> web -> kiwix."""
    http = {"timeout_s": TIMEOUT_S, "circuit_failures": 3, "circuit_cooldown_s": 0.5}
    return {
        "routing": {
            "default_source": "kiwix",
            "semantic": {"enabled": False},
            "keywords": {"web": ["news"], "forecast": ["weather"], "archive": ["archive"]},
            "request_deadline_s": 30,
            **routing,
        },
        "trace": {"enabled": False},
        "sources": {
            "kiwix": {"type": "zim", "paths": [str(zim)]},
            "web": {"type": "searxng", "url": web, "fallback": ["kiwix"], **http},
            "forecast": {
                "type": "open_meteo",
                "url": forecast,
                "latitude": 52.52,
                "longitude": 13.41,
                "fallback": ["kiwix"],
                **http,
            },
            "archive": {
                "type": "searxng",
                "url": closed_port_url(),
                "fallback": ["web"],
                "timeout_s": TIMEOUT_S,
                "circuit_failures": 0,
            },
        },
    }


def query_for(i: int) -> str:
    """A unique query (its token `z<i>q` is in every part); every fifth one has 3 parts."""
    tok = f"z{i:05d}q"
    topic, other = TOPICS[i % len(TOPICS)], TOPICS[(i // 5) % len(TOPICS)]
    return [
        f"find news about {topic} {tok}",
        f"what is the weather tomorrow {tok}",
        f"search the archive for {topic} {tok}",
        f"tell me about {topic} {tok}",
        f"find news about {topic} {tok} and what is the weather tomorrow {tok} "
        f"and search the archive for {other} {tok}",
    ][i % 5]


def assert_contract_response(status: int, body: dict[str, Any], query: str) -> None:
    """200 with the result shape, or 502/504 with the contract's error body; never 500."""
    assert status in (200, 502, 504), (status, body)
    if status == 200:
        assert set(body) >= SUCCESS_KEYS, body
        assert body["query"] == query
        for part in body["results"]:
            assert part["status"] in ("ok", "empty", "error"), part
            for item in part["items"]:
                assert isinstance(item["title"], str) and isinstance(item["text"], str)
    else:
        assert set(body) == {"error", "trace_id", "dropped_events", "explanation"}, body
        assert isinstance(body["error"]["type"], str) and isinstance(body["error"]["message"], str)
    chain = body["explanation"]
    assert isinstance(chain, list)
    for event in chain:
        assert_contract_event(event)
    assert [e["seq"] for e in chain] == list(range(len(chain)))
    if status == 200:
        assert body["fallback_occurred"] == any(e["step"] == "fallback" for e in chain)


async def test_random_faults_under_concurrency(demo_zim: Path, tmp_path: Path) -> None:
    """300 requests, 100 in flight at a time, each source call drawing a random fault."""
    total, in_flight = 300, 100
    with FaultySearxng() as web, FaultyOpenMeteo() as forecast:
        web.arm_random(SEED)
        forecast.arm_random(SEED + 1)
        config = service_config(web.url, forecast.url, demo_zim)
        with ServerProcess(config, tmp_path) as server:
            gate = asyncio.Semaphore(in_flight)
            # Idle connections expire on our side before uvicorn's 5 s keep-alive timeout
            # closes them on its side (a request sent into a closing connection fails).
            limits = httpx.Limits(
                max_connections=in_flight, max_keepalive_connections=in_flight, keepalive_expiry=2.0
            )
            async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as client:

                async def ask(i: int) -> tuple[str, int, dict[str, Any]]:
                    query = query_for(i)
                    async with gate:
                        response = await client.post(
                            "/search", json={"query": query, "explain": True}
                        )
                    return query, response.status_code, response.json()

                started = time.monotonic()
                answers = await asyncio.gather(*(ask(i) for i in range(total)))
                wall_s = time.monotonic() - started
            await asyncio.sleep(0.2)  # let requests the client gave up on reach the log
        audit = ChainAudit(
            keyed={"web": web},
            unkeyed={"forecast": forecast},
            refused=frozenset({"archive"}),
            timeouts={"web": TIMEOUT_S, "forecast": TIMEOUT_S, "archive": TIMEOUT_S, "kiwix": 5.0},
            cooldowns={"web": 0.5, "forecast": 0.5},
        )
        for query, status, body in answers:
            assert_contract_response(status, body, query)
            audit.check_chain(body["explanation"])
        calls = sum(audit.calls.values())
        load_budget = max(3, calls // 50)
        forecast_load = audit.check_unkeyed("forecast", max_load_timeouts=load_budget)
        web_faults = web.fault_counts()
    assert audit.load_timeouts + forecast_load <= load_budget, audit
    # The dice really rolled every fault, and the chains really saw them.
    assert set(web_faults) >= {
        "ok",
        "timeout",
        "401",
        "403",
        "429",
        "500",
        "502",
        "503",
        "not_json",
        "wrong_shape",
        "empty",
    }, web_faults
    assert audit.calls["archive"] >= total // 5 and audit.calls["kiwix"] > 0
    statuses = {status for _, status, _ in answers}
    assert statuses <= {200, 502, 504}
    print(
        f"\n{total} requests in {wall_s:.1f}s; calls {dict(audit.calls)}; "
        f"circuit skips {audit.skipped}; load timeouts {audit.load_timeouts + forecast_load}"
    )


# --- circuit breaker -----------------------------------------------------------------------


def breaker_config(web: str, zim: Path, failures: int, cooldown_s: float) -> Any:
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "semantic": {"enabled": False},
                "keywords": {"web": ["news"]},
            },
            "trace": {"enabled": False},
            "sources": {
                "kiwix": {"type": "zim", "paths": [str(zim)]},
                "web": {
                    "type": "searxng",
                    "url": web,
                    "timeout_s": 3.0,
                    "fallback": ["kiwix"],
                    "circuit_failures": failures,
                    "circuit_cooldown_s": cooldown_s,
                },
            },
        }
    )


def web_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e
        for e in body["explanation"]
        if e.get("source") == "web" and e["step"] in ("source_invoked", "source_skipped")
    ]


async def post(client: httpx.AsyncClient, query: str) -> dict[str, Any]:
    response = await client.post("/search", json={"query": query, "explain": True})
    assert response.status_code == 200, response.text
    return response.json()


async def test_circuit_opens_skips_and_half_open_probe_brings_it_back(
    demo_zim: Path,
) -> None:
    cooldown = 1.0
    counter = iter(range(1000))

    def q() -> str:
        return f"find news about mount everest z{next(counter):04d}q"

    with FaultySearxng() as web:
        app = build_app(breaker_config(web.url, demo_zim, failures=3, cooldown_s=cooldown))
        with uvicorn_server(app) as base:
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                web.set_fault(Fault.status(500))
                for _ in range(3):  # three consecutive failures open the circuit
                    body = await post(client, q())
                    (call,) = web_events(body)
                    assert (call["step"], call["outcome"], call["reason"]) == (
                        "source_invoked",
                        "error",
                        "server_error",
                    )
                query = q()
                body = await post(client, query)
                (skip,) = web_events(body)
                assert skip["step"] == "source_skipped" and skip["reason"] == "circuit_open"
                assert 0 < skip["time_left_s"] <= cooldown
                assert web.faults_for(query) == []  # really not called
                fallback = next(e for e in body["explanation"] if e["step"] == "fallback")
                assert fallback["reason"] == "circuit_open"
                assert body["results"][0]["source"] == "kiwix"
                assert body["results"][0]["items"][0]["title"] == "Mount Everest"

                # Half-open: one probe goes through; it fails, so the circuit re-opens.
                await asyncio.sleep(skip["time_left_s"] + 0.05)
                (probe,) = web_events(await post(client, q()))
                assert probe["step"] == "source_invoked" and probe["outcome"] == "error"
                (skip,) = web_events(await post(client, q()))
                assert skip["step"] == "source_skipped" and skip["time_left_s"] > cooldown / 2

                # The fault clears; the next probe succeeds and closes the circuit.
                web.clear_faults()
                await asyncio.sleep(skip["time_left_s"] + 0.05)
                body = await post(client, q())
                (probe,) = web_events(body)
                assert probe["step"] == "source_invoked" and probe["outcome"] == "ok"
                assert body["results"][0]["source"] == "web"
                for _ in range(3):
                    (call,) = web_events(await post(client, q()))
                    assert call["step"] == "source_invoked" and call["outcome"] == "ok"


async def test_half_open_admits_exactly_one_probe(demo_zim: Path) -> None:
    """While the probe is in flight, concurrent requests are skipped (time left 0)."""
    with FaultySearxng() as web:
        app = build_app(breaker_config(web.url, demo_zim, failures=2, cooldown_s=0.5))
        with uvicorn_server(app) as base:
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                web.set_fault(Fault.status(503))
                for i in range(2):
                    await post(client, f"find news about paris z{i}q")
                web.clear_faults()
                web.set_fault(Fault.delay(0.8), times=1)  # the probe answers slowly, but well
                await asyncio.sleep(0.6)
                web.reset_counts()
                bodies = await asyncio.gather(
                    *(post(client, f"find news about rome z{10 + i}q") for i in range(6))
                )
    calls = [e for b in bodies for e in web_events(b)]
    invoked = [e for e in calls if e["step"] == "source_invoked"]
    skipped = [e for e in calls if e["step"] == "source_skipped"]
    assert len(invoked) == 1 and invoked[0]["outcome"] == "ok", calls
    assert len(skipped) == 5 and all(e["reason"] == "circuit_open" for e in skipped), calls
    assert all(e["time_left_s"] == 0.0 for e in skipped)
    assert web.max_in_flight == 1 and len(web.injected) == 1


# --- bounds ----------------------------------------------------------------------------------


async def test_per_source_concurrency_bound_holds_at_the_server(demo_zim: Path) -> None:
    """max_concurrency 2 for web and 3 for forecast: the servers never see more at once."""
    with FaultySearxng() as web, FaultyOpenMeteo() as forecast:
        config = parse_config(
            {
                "routing": {
                    "default_source": "kiwix",
                    "semantic": {"enabled": False},
                    "keywords": {"web": ["news"], "forecast": ["weather"]},
                },
                "trace": {"enabled": False},
                "sources": {
                    "kiwix": {"type": "zim", "paths": [str(demo_zim)]},
                    "web": {
                        "type": "searxng",
                        "url": web.url,
                        "timeout_s": 5,
                        "max_concurrency": 2,
                    },
                    "forecast": {
                        "type": "open_meteo",
                        "url": forecast.url,
                        "latitude": 48.85,
                        "longitude": 2.35,
                        "timeout_s": 5,
                        "max_concurrency": 3,
                    },
                },
            }
        )
        web.set_fault(Fault.delay(0.15))
        forecast.set_fault(Fault.delay(0.15))
        with uvicorn_server(build_app(config)) as base:
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                started = time.monotonic()
                bodies = await asyncio.gather(
                    *(
                        post(
                            client,
                            f"find news about tokyo z{i}q and what is the weather tomorrow z{i}q",
                        )
                        for i in range(12)
                    )
                )
                wall_s = time.monotonic() - started
    outcomes = {
        (e["source"], e["outcome"])
        for b in bodies
        for e in b["explanation"]
        if e["step"] == "source_invoked"
    }
    assert outcomes == {("web", "ok"), ("forecast", "ok")}
    assert web.max_in_flight == 2, web.max_in_flight
    assert forecast.max_in_flight == 3, forecast.max_in_flight
    assert len(web.injected) == 12 and len(forecast.injected) == 12
    assert wall_s >= 6 * 0.15  # 12 web calls, two at a time


async def test_request_deadline_answers_504_with_the_partial_chain(demo_zim: Path) -> None:
    with FaultySearxng() as web:
        config = breaker_config(web.url, demo_zim, failures=5, cooldown_s=1.0)
        config = config.model_copy(
            update={"routing": config.routing.model_copy(update={"request_deadline_s": 0.5})}
        )
        web.set_fault(Fault.delay(2.0))
        with uvicorn_server(build_app(config)) as base:
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                started = time.monotonic()
                response = await client.post(
                    "/search", json={"query": "find news about rome z1q", "explain": True}
                )
                elapsed = time.monotonic() - started
    assert response.status_code == 504
    body = response.json()
    assert set(body) == {"error", "trace_id", "dropped_events", "explanation"}
    assert body["error"]["type"] == "deadline_exceeded"
    steps = [e["step"] for e in body["explanation"]]
    assert steps[0] == "intent_keyword" and steps[-1] == "error"
    assert elapsed < 1.9  # answered at the deadline, not after the source's delay
