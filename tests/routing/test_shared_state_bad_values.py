"""Whatever sits in Redis never fails a request: a value that cannot be used is a miss.

Redis is shared with whoever can reach it, and its entries outlive the process that wrote
them. Against a real `redis-server` on loopback (tests/support/redis_server.py), entries
under the keys this router reads are replaced the way a careless or hostile writer would:
JSON nested too deep to parse (a RecursionError, not a ValueError), a result with
thousands of items, a value of megabytes. Each is ignored like any other unusable entry
(a debug log line), the request is answered from the source, and the fresh answer
overwrites the entry.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from routing.shared_state import MAX_VALUE_BYTES, MAX_VALUE_ITEMS, RedisLink, SharedCache
from routing.ttl_cache import TTLCache
from search.config import Config, parse_config
from search.service import SearchOutcome, Service
from tests.support import redis_server
from tests.support.redis_server import RedisServer
from tests.support.require import require_service

PASSWORD = "redis-pw-bad-values-51e"
DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON; json.loads raises RecursionError
NEWS = "latest news about cats"
PAINTER = "who painted the mona lisa"
SESSION = "S1"
FOLLOW_UP = "what about tomorrow?"  # asks for the session's last turn


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    require_service("redis-server", redis_server.available(), redis_server.MISSING_REASON)
    with RedisServer(password=PASSWORD) as server:
        yield server


def config(redis_url: str) -> Config:
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "shipped_routes": False,
                "keywords": {"web": ["news"]},
                "semantic": {"enabled": False},
            },
            "sources": {"kiwix": {"type": "scripted"}, "web": {"type": "scripted", "items": 3}},
            "cache": {"redis_url": redis_url, "result_ttl_s": 120},
            "trace": {"enabled": False},
        }
    )


async def started(redis: RedisServer) -> Service:
    service = Service(config(redis.url))
    await service.start()
    return service


def steps(outcome: SearchOutcome) -> list[str]:
    return [e["step"] for e in outcome.chain]


def result_key(redis: RedisServer) -> str:
    [key] = redis.keys("search:result:*")
    return key


def put(redis: RedisServer, key: str, value: str | bytes) -> None:
    """SET without a TTL: the entry stays until something overwrites it."""
    with redis.client() as client:
        client.set(key, value)


def get(redis: RedisServer, key: str) -> Any:
    with redis.client() as client:
        raw = client.get(key)
    return None if raw is None else json.loads(raw)


def unusable_logged(caplog: pytest.LogCaptureFixture, namespace: str, why: str) -> bool:
    return any(
        r.name == "search.shared_state"
        and r.getMessage() == f"shared state: unusable {namespace} entry ignored ({why})"
        for r in caplog.records
    )


async def a_result_entry(redis: RedisServer) -> str:
    """The key of the shared result for NEWS, written by a service of its own."""
    writer = await started(redis)
    try:
        await writer.search(NEWS, explain=True)
        await writer.shared.drain()
    finally:
        await writer.aclose()
    return result_key(redis)


async def test_entries_nested_too_deep_to_parse_are_misses_and_get_overwritten(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="search.shared_state")
    result = await a_result_entry(redis)
    for key in (result, f"search:decision:{PAINTER}", f"search:session:{SESSION}"):
        put(redis, key, DEEP)
    service = await started(redis)
    try:
        follow_up = await service.search(FOLLOW_UP, explain=True, session_id=SESSION)
        news = await service.search(NEWS, explain=True, session_id=SESSION)
        painter = await service.search(PAINTER, explain=True)
        await service.shared.drain()
    finally:
        await service.aclose()
    for outcome in (follow_up, news, painter):
        assert outcome.status_code == 200, outcome.body
        assert "shared_state_degraded" not in steps(outcome)  # Redis answered; the value was bad
    assert "result_cache_hit" not in steps(news) and service.sources["web"].calls == 1
    assert len(news.body["results"][0]["items"]) == 3
    assert painter.body["results"][0]["source"] == "kiwix"
    for namespace in ("result", "decision", "session"):
        assert unusable_logged(caplog, namespace, "RecursionError"), namespace
    # The fresh answers replaced the entries they were asked for.
    assert len(get(redis, result)) == 3
    assert get(redis, f"search:session:{SESSION}")["query"] == NEWS


async def test_a_result_entry_with_more_items_than_any_source_returns_is_refused(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="search.shared_state")
    key = await a_result_entry(redis)
    item = {"title": "spam", "text": "spam", "url": "https://example.org/spam"}
    put(redis, key, json.dumps([item] * 20_000))
    service = await started(redis)
    try:
        outcome = await service.search(NEWS, explain=True)
    finally:
        await service.aclose()
    assert outcome.status_code == 200
    assert "result_cache_hit" not in steps(outcome)
    assert len(outcome.body["results"][0]["items"]) == 3  # the source's own answer
    assert unusable_logged(caplog, "result", "ValueError")


async def test_a_result_entry_of_megabytes_is_refused_unparsed(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="search.shared_state")
    key = await a_result_entry(redis)
    put(redis, key, json.dumps([{"title": "big", "text": "x" * MAX_VALUE_BYTES}]))
    service = await started(redis)
    try:
        outcome = await service.search(NEWS, explain=True)
    finally:
        await service.aclose()
    assert outcome.status_code == 200 and "result_cache_hit" not in steps(outcome)
    assert unusable_logged(caplog, "result", "ValueError")


async def test_a_value_no_reader_would_take_is_kept_local_and_not_written(
    redis: RedisServer,
) -> None:
    link = RedisLink(redis.url)
    cache: SharedCache[str, list[int]] = SharedCache(
        link, "result_cache", "result", TTLCache(10, 60), encode=list, decode=list
    )
    try:
        cache.publish("fits", list(range(MAX_VALUE_ITEMS)))
        cache.publish("too-long", list(range(MAX_VALUE_ITEMS + 1)))
        await link.drain()
        assert redis.keys("search:result:*") == ["search:result:fits"]
        assert await cache.fetch("fits", keep_locally=False) == list(range(MAX_VALUE_ITEMS))
    finally:
        await link.aclose()
