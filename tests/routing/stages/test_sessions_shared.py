"""Sessions shared through a real Redis (`cache.redis_url`, `--workers N`) stay the
client's own: the shared key holds the client's identity beside its session_id, so a turn
one worker took for one client is found by another worker for that client only.

Two `Service` objects over one real `redis-server` (tests/support/redis_server.py) stand
for two workers; scripted sources, keyword rules only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from routing.shared_state import RedisLink
from routing.stages.sessions import SessionStore, session_key
from routing.types import Decision
from search.config import Config, parse_config
from search.service import Service
from tests.support import redis_server
from tests.support.redis_server import RedisServer
from tests.support.require import require_service


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    require_service("redis-server", redis_server.available(), redis_server.MISSING_REASON)
    with RedisServer(password="sessions-pw") as server:
        yield server


def config(url: str) -> Config:
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "shipped_routes": False,
                "keywords": {"web": ["weather"]},
                "semantic": {"enabled": False},
            },
            "sources": {"kiwix": {"type": "scripted"}, "web": {"type": "scripted"}},
            "cache": {"redis_url": url},
            "trace": {"enabled": False},
        }
    )


async def test_a_shared_turn_is_found_for_its_own_client_only(redis: RedisServer) -> None:
    first, second = Service(config(redis.url)), Service(config(redis.url))
    await first.start(sources=False)
    await second.start(sources=False)
    try:
        await first.search("weather in paris", session_id="tablet", client="192.0.2.10")
        assert first.shared is not None
        await first.shared.drain()
        same = await second.search(
            "what about tomorrow?", dry_run=True, session_id="tablet", client="192.0.2.10"
        )
        other = await second.search(
            "what about tomorrow?", dry_run=True, session_id="tablet", client="192.0.2.66"
        )
    finally:
        await first.aclose()
        await second.aclose()
    assert same.results[0].rewritten == "weather in paris tomorrow"
    assert other.results[0].rewritten is None
    assert redis.keys("search:session:*") == ["search:session:192.0.2.10\x1ftablet"]


async def test_one_clients_sessions_in_redis_are_bounded_like_its_local_ones(
    redis: RedisServer,
) -> None:
    """A client that opens session after session (a new id per request) holds at most
    `per_client` of them in Redis too, the ones it wrote longest ago deleted; another
    client's session is never among them."""
    link = RedisLink(redis.url, timeout_s=2.0)
    store = SessionStore(100, 60.0, shared=link, per_client=3)
    decision = Decision("web", "intent_keyword", confidence=0.99)
    try:
        store.remember(session_key("192.0.2.66", "home"), "weather in oslo", decision)
        for n in range(10):
            store.remember(session_key("192.0.2.10", f"flood-{n}"), "weather in rome", decision)
            await link.drain()  # one write at a time: "longest ago" is well defined
        assert sorted(redis.keys("search:session:*")) == [
            "search:session:192.0.2.10\x1fflood-7",
            "search:session:192.0.2.10\x1fflood-8",
            "search:session:192.0.2.10\x1fflood-9",
            "search:session:192.0.2.66\x1fhome",
        ]
        # the index lives no longer than the sessions it lists
        ttl_ms = redis.client().pttl("search:session-index:192.0.2.10")
        assert 0 < ttl_ms <= 60_000
        other = SessionStore(100, 60.0, shared=link, per_client=3)  # another worker
        assert await other.recall(session_key("192.0.2.66", "home")) is not None
        assert await other.recall(session_key("192.0.2.10", "flood-0")) is None
    finally:
        await link.aclose()
