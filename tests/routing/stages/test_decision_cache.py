"""The routing-decision cache: normalised keys, bounds, expiry, and where it answers."""

from __future__ import annotations

import json
import time

import pytest

from routing.chain.events import route_log
from routing.stages.decision_cache import (
    CachedDecision,
    DecisionCache,
    DecisionCacheStage,
    _encode,
    normalise,
)
from routing.stages.resolver import Resolver
from routing.types import ResolveContext


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_normalise_ignores_case_spacing_quotes_and_end_punctuation() -> None:
    assert normalise("  What’s the   Weather?! ") == normalise("what's the weather")
    assert normalise("who is he") != normalise("who is she")


def test_entries_expire_and_the_cache_is_bounded() -> None:
    clock = Clock()
    cache = DecisionCache(max_entries=2, ttl_s=60, now=clock)
    cache.put("a query", "web", "intent_semantic")
    assert cache.get("A Query?") is not None
    clock.now += 61
    assert cache.get("a query") is None
    for text in ("one", "two", "three"):
        cache.put(text, "kiwix", "intent_llm")
    assert len(cache) == 2 and cache.get("one") is None and cache.get("three") is not None


def test_zero_ttl_or_size_disables_caching() -> None:
    for cache in (DecisionCache(0, 60), DecisionCache(10, 0)):
        cache.put("q", "web", "intent_llm")
        assert cache.get("q") is None


async def test_a_hit_records_intent_cached_and_decides() -> None:
    cache = DecisionCache(10, 60)
    cache.put("latest news from kenya", "web", "intent_llm")
    resolver = Resolver([DecisionCacheStage(cache)], "kiwix")
    with route_log() as log:
        decision = await resolver.resolve("Latest news from Kenya?", ResolveContext())
    assert (decision.route, decision.stage) == ("web", "intent_cached")
    [event] = log.snapshot()
    assert event["step"] == "intent_cached" and event["decision"] == "web"
    assert event["origin"] == "intent_llm" and event["query"] == "Latest news from Kenya?"


async def test_a_hit_shows_what_the_decision_beat() -> None:
    """The same question, answered again, gets the same account: the confidence it was
    made with and the candidates it beat, the winner first."""
    cache = DecisionCache(10, 60)
    beaten = (("web", 0.7), ("kiwix", 0.2), ("none", 0.1))
    cache.put("latest news from kenya", "web", "intent_semantic", 0.7, beaten)
    kept = cache.get("latest news from kenya")
    assert kept is not None and kept.candidates is beaten  # kept as given, not copied
    resolver = Resolver([DecisionCacheStage(cache)], "kiwix")
    with route_log() as log:
        decision = await resolver.resolve("latest news from kenya", ResolveContext())
    assert decision.confidence == 0.7
    [event] = log.snapshot()
    assert event["confidence"] == 0.7
    assert [(c["route"], c["confidence"], c["margin"]) for c in event["candidates"]] == [
        ("web", 0.7, 0.0),
        ("kiwix", 0.2, 0.5),
        ("none", 0.1, 0.6),
    ]


def test_candidates_cross_the_shared_tier_checked() -> None:
    """A shared entry carries its candidates; one naming an unknown route, out of order or
    too long is not this router's and is refused like an unknown route."""
    cache = DecisionCache(10, 60, routes={"web", "kiwix"})
    data = {"route": "web", "origin": "intent_llm", "confidence": 0.7}
    assert cache._decode(data).candidates == ()  # written before candidates were kept
    made = CachedDecision("web", "intent_llm", 0.7, (("web", 0.7), ("none", 0.3)))
    assert cache._decode(json.loads(json.dumps(_encode(made)))) == made
    for bad in (
        [["kiwix", 0.2], ["web", 0.7]],
        [["web", 0.7], ["ha", 0.3]],
        [["web", 1.5]],
        [["web", 0.7]] * 33,
        "web",
    ):
        with pytest.raises((ValueError, TypeError)):
            cache._decode({**data, "candidates": bad})


async def test_a_miss_passes_on_and_discourse_bypasses_the_cache() -> None:
    cache = DecisionCache(10, 60)
    cache.put("what about tomorrow", "forecast", "intent_llm")
    resolver = Resolver([DecisionCacheStage(cache)], "kiwix")
    with route_log() as log:
        miss = await resolver.resolve("something else", ResolveContext())
        follow_up = await resolver.resolve("what about tomorrow", ResolveContext())
    assert miss.stage == follow_up.stage == "intent_default"
    assert [e["step"] for e in log.snapshot()] == ["intent_default", "intent_default"]


def test_lookup_is_fast() -> None:
    cache = DecisionCache(10_000, 3600)
    for i in range(10_000):
        cache.put(f"query number {i}", "web", "intent_llm")
    started = time.perf_counter()
    for i in range(10_000):
        cache.get(f"Query number {i}?")
    per_lookup_ms = (time.perf_counter() - started) * 1000 / 10_000
    assert per_lookup_ms < 0.1, per_lookup_ms
