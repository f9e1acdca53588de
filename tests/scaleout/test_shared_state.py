"""Shared state through a real Redis: decisions, results and circuits agree across services.

Every test runs against a real `redis-server` (Debian package), started on loopback on a
free port by the suite, with a password, and stopped by its PID. Two `Service` objects
sharing one Redis stand for two workers; the last test starts two real uvicorn worker
processes (`search serve --workers 2`). The LLM stage talks to a loopback server that
speaks the OpenAI chat-completions wire format (`tests/support/chat_server.py`), since no
LLM runs here. Redis failures are real too: the server is killed, or paused (SIGSTOP) so
that it accepts connections and never answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from search.config import Config, ConfigError, parse_config
from search.service import SearchOutcome, Service
from tests.support import redis_server
from tests.support.app import assert_contract_event
from tests.support.chat_server import ChatServer
from tests.support.ports import free_port
from tests.support.redis_server import RedisServer
from tests.support.require import require_service

pytestmark = pytest.mark.usefixtures("redis_installed")


@pytest.fixture
def redis_installed() -> None:
    require_service("redis-server", redis_server.available(), redis_server.MISSING_REASON)


PASSWORD = "redis-pw-7f3a9c"  # recognisable: must never show up in a chain or a log
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with RedisServer(password=PASSWORD) as server:
        yield server


def config(
    redis_url: str,
    *,
    llm_url: str | None = None,
    sources: dict[str, dict[str, Any]] | None = None,
    keywords: dict[str, list[str]] | None = None,
    **cache: Any,
) -> Config:
    """Scripted sources, keyword rules, an optional LLM stage, and Redis as shared state."""
    routing: dict[str, Any] = {
        "default_source": "kiwix",
        "shipped_routes": False,  # only the rules given
        "keywords": keywords or {},
        "semantic": {"enabled": False},
    }
    if llm_url is not None:
        routing["llm"] = {
            "base_url": llm_url,
            "model": "router",
            "timeout_s": 5,
            "bias_check": False,
        }  # one request per decision, counted below
    entries = sources or {"kiwix": {}, "web": {}}
    return parse_config(
        {
            "routing": routing,
            "sources": {name: {"type": "scripted", **entry} for name, entry in entries.items()},
            "cache": {"redis_url": redis_url, **cache},
            "trace": {"enabled": False},
        }
    )


async def ask(service: Service, query: str) -> SearchOutcome:
    outcome = await service.search(query, explain=True, authorized=True)
    for event in outcome.chain:
        assert_contract_event(event)
    return outcome


def steps(outcome: SearchOutcome) -> list[str]:
    return [e["step"] for e in outcome.chain]


def events(outcome: SearchOutcome, step: str) -> list[dict[str, Any]]:
    return [e for e in outcome.chain if e["step"] == step]


async def started(cfg: Config) -> Service:
    service = Service(cfg)
    await service.start()
    return service


async def test_a_decision_made_in_one_service_is_answered_from_the_cache_in_another(
    redis: RedisServer,
) -> None:
    with ChatServer(reply='{"source": "web"}') as llm:
        cfg = config(redis.url, llm_url=llm.base_url)
        first, second = await started(cfg), await started(cfg)
        try:
            made = await ask(first, "Who won the chess olympiad?")
            await first.shared.drain()  # the write-through runs in the background
            reused = await ask(second, "who won the chess olympiad")
            again = await ask(second, "who won the chess olympiad")
        finally:
            await first.aclose()
            await second.aclose()
    assert events(made, "intent_llm")[0]["decision"] == "web"
    [cached] = events(reused, "intent_cached")
    assert cached["decision"] == "web" and cached["origin"] == "intent_llm"
    assert cached["tier"] == "shared"
    assert "intent_llm" not in steps(reused) and len(llm.bodies) == 1
    assert reused.body["results"][0]["source"] == "web"
    # Kept locally for its remaining lifetime: the next ask does not need Redis.
    assert "tier" not in events(again, "intent_cached")[0]
    assert redis.keys("search:decision:*") == ["search:decision:who won the chess olympiad"]


async def test_a_conversation_moving_between_services_keeps_its_session(
    redis: RedisServer,
) -> None:
    """Under `--workers N` the turns of one conversation reach different workers: each
    asks Redis for the session's last turn first, so a worker's own older memory of the
    session does not win over the turn another worker took since."""
    cfg = config(
        redis.url,
        sources={"kiwix": {}, "web": {}, "ha": {}},
        keywords={"web": ["weather"], "ha": ["lights"]},
    )
    first, second = await started(cfg), await started(cfg)
    try:
        await first.search("weather in paris", session_id="kitchen-tablet")
        await first.shared.drain()
        moved = await second.search("what about tomorrow?", session_id="kitchen-tablet")
        await second.search("are the lights on", session_id="kitchen-tablet")
        await second.shared.drain()
        back = await first.search("and in the hallway?", session_id="kitchen-tablet")
        await first.shared.drain()
        off = await second.search("turn them off", session_id="kitchen-tablet", authorized=True)
    finally:
        await first.aclose()
        await second.aclose()
    # each follow-up is asked as the question it stands for, from the turn in Redis
    [inherited] = events(moved, "rewritten")
    assert (inherited["previous_query"], inherited["to"]) == (
        "weather in paris",
        "weather in paris tomorrow",
    )
    assert moved.body["results"][0]["source"] == "web"
    [latest] = events(back, "rewritten")
    assert (latest["previous_query"], latest["to"]) == (
        "are the lights on",
        "are the lights on in the hallway",
    )
    assert back.body["results"][0]["source"] == "ha"
    # the turn's subject travels with it: "them" is the lights of the other worker's turn
    [pronoun] = events(off, "rewritten")
    assert (pronoun["previous_query"], pronoun["carried"], pronoun["to"]) == (
        "are the lights on in the hallway",
        "the lights",
        "turn the lights off",
    )
    assert redis.keys("search:session:*") == ["search:session:kitchen-tablet"]


async def test_a_result_fetched_by_one_service_is_a_cache_hit_in_another(
    redis: RedisServer,
) -> None:
    cfg = config(redis.url, keywords={"web": ["news"]}, result_ttl_s=120)
    first, second = await started(cfg), await started(cfg)
    try:
        fetched = await ask(first, "news about otters")
        await first.shared.drain()
        hit = await ask(second, "News   about otters")
    finally:
        await first.aclose()
        await second.aclose()
    assert events(fetched, "source_invoked")[0]["outcome"] == "ok"
    [event] = events(hit, "result_cache_hit")
    assert event["source"] == "web" and event["tier"] == "shared"
    assert hit.body["cached"] is True and "source_invoked" not in steps(hit)
    assert hit.body["results"][0]["items"] == fetched.body["results"][0]["items"]
    assert second.sources["web"].calls == 0 and first.sources["web"].calls == 1
    [key] = redis.keys("search:result:*")
    with redis.client() as client:
        ttl_ms = client.pttl(key)
    assert 110_000 < ttl_ms <= 120_000  # the Redis TTL is the entry's


async def test_a_per_source_cache_lifetime_of_zero_shares_nothing(redis: RedisServer) -> None:
    cfg = config(
        redis.url, sources={"kiwix": {}, "ha": {"cache_ttl_s": 0}}, keywords={"ha": ["lights"]}
    )
    first, second = await started(cfg), await started(cfg)
    try:
        await ask(first, "lights status")
        await first.shared.drain()
        other = await ask(second, "lights status")
    finally:
        await first.aclose()
        await second.aclose()
    assert "result_cache_hit" not in steps(other) and redis.keys("search:result:*") == []


async def test_a_command_in_one_service_drops_the_cached_answers_of_every_service(
    redis: RedisServer,
) -> None:
    """With control allowed, a source's cached answers live in Redis alone, so a command
    run by one worker takes them away from all (no stale "locked" after an unlock)."""
    sources = {
        "kiwix": {},
        "ha": {"control_prefix": "unlock", "allow_control": True, "cache_ttl_s": 300},
    }
    keywords = {"ha": ["door", "unlock"]}
    first = Service(config(redis.url, sources=sources, keywords=keywords))
    second = Service(config(redis.url, sources=sources, keywords=keywords))
    try:
        await ask(first, "front door status")
        await first.shared.drain()
        hit = await ask(second, "front door status")
        assert events(hit, "result_cache_hit")[0]["tier"] == "shared"
        assert redis.keys("search:result:*")
        acted = await ask(second, "unlock the front door")
        assert "source_invoked" in steps(acted) and not acted.body["cached"]
        assert redis.keys("search:result:*") == []
        fresh = await ask(first, "front door status")
        assert "result_cache_hit" not in steps(fresh)
    finally:
        for service in (first, second):
            await service.aclose()


async def test_a_circuit_opened_by_one_service_makes_another_skip(redis: RedisServer) -> None:
    sources = {
        "kiwix": {},
        "ha": {
            "fail": "unavailable",
            "circuit_failures": 2,
            "circuit_cooldown_s": 30,
            "fallback": ["kiwix"],
        },
    }
    cfg = config(redis.url, sources=sources, keywords={"ha": ["lights"]})
    first, second = await started(cfg), await started(cfg)
    try:
        for n in range(2):
            failed = await ask(first, f"lights {n}")
            assert events(failed, "source_invoked")[0]["outcome"] == "error"
        skipped = await ask(second, "lights 9")
    finally:
        await first.aclose()
        await second.aclose()
    [event] = events(skipped, "source_skipped")
    assert event["source"] == "ha" and event["reason"] == "circuit_open"
    assert 29 < event["time_left_s"] <= 30
    assert events(skipped, "fallback")[0]["reason"] == "circuit_open"
    assert skipped.body["results"][0]["source"] == "kiwix"
    assert second.sources["ha"].calls == 0  # the second service never called it
    assert second.dispatcher.breakers["ha"].state == "closed"  # it learnt that from Redis


async def test_a_success_anywhere_resets_the_consecutive_failures(redis: RedisServer) -> None:
    sources = {
        "kiwix": {},
        "ha": {
            "fail": "unavailable",
            "circuit_failures": 2,
            "circuit_cooldown_s": 30,
            "fallback": ["kiwix"],
        },
    }
    cfg = config(redis.url, sources=sources, keywords={"ha": ["lights"]}, result_ttl_s=0)
    failing, healthy = await started(cfg), await started(cfg)
    source = healthy.sources["ha"]
    source.config = source.config.model_copy(update={"fail": None})  # type: ignore[attr-defined]
    try:
        await ask(failing, "lights 1")  # 1 failure on record
        await ask(healthy, "lights 2")  # a success: consecutive count back to 0
        after_reset = await ask(failing, "lights 3")  # 1 again, below the threshold
        closed_keys = redis.keys("search:breaker:*")
        await ask(failing, "lights 5")  # 2 in a row: open
        now_open = await ask(healthy, "lights 6")
    finally:
        await failing.aclose()
        await healthy.aclose()
    assert events(after_reset, "source_invoked")[0]["outcome"] == "error"
    assert closed_keys == ["search:breaker:ha:failures"]  # counted, not open
    assert events(now_open, "source_skipped")[0]["reason"] == "circuit_open"
    assert healthy.sources["ha"].calls == 1


async def test_a_half_open_circuit_lets_one_probe_through_across_services(
    redis: RedisServer,
) -> None:
    sources = {
        "kiwix": {},
        "ha": {
            "fail": "unavailable",
            "delay_s": 0.2,
            "circuit_failures": 1,
            "circuit_cooldown_s": 0.3,
            "fallback": ["kiwix"],
        },
    }
    cfg = config(redis.url, sources=sources, keywords={"ha": ["lights"]})
    first, second = await started(cfg), await started(cfg)
    try:
        await ask(first, "lights on the porch")  # one failure opens it
        await asyncio.sleep(0.35)  # the cool-down ends: half-open
        a, b = await asyncio.gather(ask(first, "lights 1"), ask(second, "lights 2"))
        reopened = await ask(second, "lights 3")
    finally:
        await first.aclose()
        await second.aclose()
    probed = [o for o in (a, b) if events(o, "source_invoked")[0]["source"] == "ha"]
    waited = [o for o in (a, b) if events(o, "source_skipped")]
    assert len(probed) == 1 and len(waited) == 1  # one probe among both services
    assert events(waited[0], "source_skipped")[0]["time_left_s"] == 0.0
    assert first.sources["ha"].calls + second.sources["ha"].calls == 2
    # The probe failed: the circuit is open again, for a fresh cool-down, everywhere.
    [event] = events(reopened, "source_skipped")
    assert event["reason"] == "circuit_open" and 0.1 < event["time_left_s"] <= 0.3


async def test_redis_killed_mid_run_degrades_to_local_caches(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with ChatServer(reply='{"source": "web"}') as llm:
        cfg = config(redis.url, llm_url=llm.base_url, redis_retry_after_s=30)
        service = await started(cfg)
        try:
            before = await ask(service, "how deep is the mariana trench")
            assert before.status_code == 200 and "shared_state_degraded" not in steps(before)
            redis.stop()  # by PID, mid-run
            started_at = time.perf_counter()
            down = await ask(service, "how tall is mount kilimanjaro")
            elapsed_s = time.perf_counter() - started_at
            local = await ask(service, "how tall is mount kilimanjaro")
        finally:
            await service.aclose()
    assert down.status_code == 200 and down.body["results"][0]["items"]
    degraded = events(down, "shared_state_degraded")
    by_component = {e["component"]: e for e in degraded}
    assert len(degraded) == len(by_component)  # at most once per request and component
    assert by_component["decision_cache"]["reason"] == "connection_error"
    assert set(by_component) == {"decision_cache", "result_cache", "breaker"}
    # The first failure starts the back-off; later calls in it are not even tried.
    assert [e["reason"] for e in degraded[1:]] == ["backoff"] * (len(degraded) - 1)
    assert elapsed_s < 1.0
    # Local caching still works: the decision and the result, from this process's memory.
    assert events(local, "intent_cached")[0]["decision"] == "web"
    assert "tier" not in events(local, "intent_cached")[0]
    assert events(local, "result_cache_hit") and local.body["cached"] is True
    assert len(llm.bodies) == 2
    everything = json.dumps([before.chain, down.chain, local.chain]) + caplog.text
    assert PASSWORD not in everything
    assert "using local state" in caplog.text


async def test_a_stalled_redis_costs_one_timeout_then_backs_off_and_recovers(
    redis: RedisServer,
) -> None:
    cfg = config(
        redis.url, keywords={"web": ["news"]}, redis_timeout_s=0.2, redis_retry_after_s=0.6
    )
    service, other = await started(cfg), await started(cfg)
    try:
        await ask(service, "news warmup")  # the connection pool is open before the stall
        redis.pause()  # accepts, never answers
        try:
            timings = []
            outcomes = []
            for n in range(4):
                started_at = time.perf_counter()
                outcomes.append(await ask(service, f"news {n}"))
                timings.append(time.perf_counter() - started_at)
            await asyncio.sleep(0.65)  # the back-off ends, Redis still stalled
            started_at = time.perf_counter()
            burst = await asyncio.gather(*(ask(service, f"news burst {n}") for n in range(5)))
            burst_s = time.perf_counter() - started_at
        finally:
            redis.resume()
        await asyncio.sleep(0.65)  # the back-off ends
        recovered = await ask(service, "news after the stall")
        await service.shared.drain()
        shared = await ask(other, "news after the stall")
    finally:
        await service.aclose()
        await other.aclose()
    assert all(o.status_code == 200 for o in outcomes)
    first = events(outcomes[0], "shared_state_degraded")
    assert first[0]["reason"] == "timeout" and first[0]["component"] == "result_cache"
    assert 0.15 < timings[0] < 0.6  # one timeout of 0.2 s, not one per Redis call
    assert max(timings[1:]) < 0.1  # backing off: Redis is not tried at all
    for outcome in outcomes[1:]:
        assert {e["reason"] for e in events(outcome, "shared_state_degraded")} == {"backoff"}
    # After the back-off, one trial call pays the timeout; the others do not wait for it.
    reasons = sorted(
        e["reason"]
        for o in burst
        for e in events(o, "shared_state_degraded")
        if e["component"] == "result_cache"
    )
    assert reasons == ["backoff"] * 4 + ["timeout"] and burst_s < 0.6
    assert all(o.status_code == 200 for o in burst)
    assert "shared_state_degraded" not in steps(recovered)
    assert events(shared, "result_cache_hit")[0]["tier"] == "shared"


async def test_redis_down_from_the_start_never_fails_a_request() -> None:
    cfg = config(f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0", keywords={"web": ["news"]})
    service = await started(cfg)
    try:
        outcomes = [await ask(service, "news today") for _ in range(2)]
    finally:
        await service.aclose()
    assert [o.status_code for o in outcomes] == [200, 200]
    assert events(outcomes[1], "result_cache_hit")  # the local cache still works
    assert {e["reason"] for e in events(outcomes[0], "shared_state_degraded")} == {"backoff"}
    assert PASSWORD not in json.dumps([o.chain for o in outcomes])


async def test_the_key_prefix_separates_deployments_sharing_one_redis(redis: RedisServer) -> None:
    ours = config(redis.url, keywords={"web": ["news"]}, redis_key_prefix="staging:")
    theirs = config(redis.url, keywords={"web": ["news"]}, redis_key_prefix="prod:")
    a, b = await started(ours), await started(theirs)
    try:
        await ask(a, "news from the coast")
        await a.shared.drain()
        other = await ask(b, "news from the coast")
    finally:
        await a.aclose()
        await b.aclose()
    assert "result_cache_hit" not in steps(other)
    assert redis.keys("staging:*") and not any(k.startswith("search:") for k in redis.keys("*"))


async def test_a_wrong_password_degrades_with_the_reason_and_never_shows_it(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "not-the-" + PASSWORD
    url = f"redis://:{wrong}@127.0.0.1:{redis.port}/0"
    # retry_after 0: no back-off, every Redis call is tried (and refused) again.
    service = await started(config(url, keywords={"web": ["news"]}, redis_retry_after_s=0))
    try:
        outcomes = [await ask(service, "news of the day") for _ in range(2)]
    finally:
        await service.aclose()
    assert [o.status_code for o in outcomes] == [200, 200]
    degraded = events(outcomes[0], "shared_state_degraded")
    assert {(e["component"], e["reason"]) for e in degraded} == {
        ("result_cache", "auth_error"),
        ("breaker", "auth_error"),
    }
    assert events(outcomes[1], "result_cache_hit")
    assert wrong not in json.dumps([o.chain for o in outcomes]) + caplog.text
    assert redis.keys() == []


def test_a_bad_redis_url_is_a_config_error_that_does_not_echo_it() -> None:
    with pytest.raises(ConfigError) as info:
        config(f"http://:{PASSWORD}@127.0.0.1:6379")
    assert "cache.redis_url" in str(info.value) and PASSWORD not in str(info.value)
    unset = config("")
    assert unset.cache.redis_url is None and Service(unset).shared is None


def test_without_redis_the_client_library_is_not_even_imported() -> None:
    code = (
        "import sys, tests.conftest\n"
        "from search.service import Service\n"
        "from tests.support.app import scripted_config\n"
        "Service(scripted_config({'kiwix': {}}))\n"
        "sys.exit(1 if 'redis' in sys.modules else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False)
    assert done.returncode == 0


# --- two worker processes --------------------------------------------------------------


def worker_config(tmp_path: Path, redis_url: str, llm_url: str, zim: Path) -> Path:
    path = tmp_path / "workers.yaml"
    path.write_text(
        json.dumps(
            {  # JSON is YAML
                "routing": {
                    "default_source": "kiwix",
                    "shipped_routes": False,  # no keyword rule: the LLM decides, and Redis shares it
                    "semantic": {"enabled": False},
                    "llm": {
                        "base_url": llm_url,
                        "model": "router",
                        "timeout_s": 5,
                        "bias_check": False,
                    },
                },
                "sources": {
                    "kiwix": {"type": "zim", "paths": [str(zim)], "description": "encyclopedia"}
                },
                "cache": {"redis_url": redis_url},
                "trace": {"enabled": False},
                "mcp": {"enabled": False},
            }
        )
    )
    return path


def wait_for_health(base: str, process: subprocess.Popen[bytes], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"search serve exited with {process.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("search serve did not become healthy")


def connections_to_two_workers(base: str) -> dict[int, httpx.Client]:
    """Keep-alive connections until two different worker PIDs have answered on them.

    A kept-alive connection stays with the worker that accepted it, so each client below
    talks to one known worker.
    """
    clients: dict[int, httpx.Client] = {}
    deadline = time.monotonic() + 60
    while len(clients) < 2:
        assert time.monotonic() < deadline, f"only workers {list(clients)} answered"
        client = httpx.Client(base_url=base, timeout=10, limits=httpx.Limits(max_connections=1))
        pid = client.get("/healthz").json()["pid"]
        if pid in clients:
            client.close()
        else:
            clients[pid] = client
    return clients


def test_two_worker_processes_share_a_routing_decision(
    redis: RedisServer, tmp_path: Path, demo_zim: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with ChatServer(reply='{"source": "kiwix"}') as llm:
        path = worker_config(tmp_path, redis.url, llm.base_url, demo_zim)
        log_path = tmp_path / "serve.log"
        log_file = log_path.open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "search",
                "serve",
                "--workers",
                "2",
                "--config",
                str(path),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        clients: dict[int, httpx.Client] = {}
        try:
            wait_for_health(base, process)
            clients = connections_to_two_workers(base)
            (pid_a, worker_a), (pid_b, worker_b) = clients.items()
            query = {"query": "Tell me something about the history of Lisbon", "explain": True}
            made = worker_a.post("/search", json=query).json()
            deadline = time.monotonic() + 5  # worker A writes the decision in the background
            while not redis.keys("search:decision:*") and time.monotonic() < deadline:
                time.sleep(0.02)
            reused = worker_b.post("/search", json=query).json()
            # /metrics from either worker counts both workers' requests.
            scrapes = [w.get("/metrics").text for w in (worker_a, worker_b)]
            # Still the same two workers on the same two connections.
            assert worker_a.get("/healthz").json()["pid"] == pid_a
            assert worker_b.get("/healthz").json()["pid"] == pid_b
        finally:
            for client in clients.values():
                client.close()
            process.send_signal(signal.SIGTERM)  # uvicorn's supervisor stops its workers
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # the group we started, by its PID
                process.wait(timeout=10)
            log_file.close()
    assert pid_a != pid_b
    made_steps = [e["step"] for e in made["explanation"]]
    assert "intent_llm" in made_steps and "intent_cached" not in made_steps
    [cached] = [e for e in reused["explanation"] if e["step"] == "intent_cached"]
    assert cached["decision"] == "kiwix" and cached["tier"] == "shared"
    assert not any(e["step"] == "intent_llm" for e in reused["explanation"])
    assert len(llm.bodies) == 1  # one LLM call for both workers
    for scrape in scrapes:
        assert 'search_requests_total{status="200"} 2.0' in scrape, scrape[:2000]
        assert 'search_intent_decisions_total{stage="intent_llm"} 1.0' in scrape
        assert 'search_intent_decisions_total{stage="intent_cached"} 1.0' in scrape
    output = log_path.read_text(errors="replace")
    assert "Started parent process" in output and PASSWORD not in output


def test_an_abandoned_probe_is_given_up_after_one_cooldown() -> None:
    """The local breaker (the fallback when Redis is down) cannot stay stuck half-open
    when a probe's request is cancelled before it reports back."""
    from routing.dispatch.breaker import CircuitBreaker

    clock = [0.0]
    breaker = CircuitBreaker(1, 10.0, now=lambda: clock[0])
    breaker.failed()
    clock[0] = 10.0
    assert breaker.admit().probe  # let through, and never heard of again
    clock[0] = 15.0
    assert not breaker.admit().allowed
    clock[0] = 20.0
    assert breaker.admit().probe
