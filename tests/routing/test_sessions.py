"""Sessions: a follow-up inherits the previous turn's route when nothing else decides."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from routing.events import route_log
from routing.intents import Decision, ResolveContext
from routing.sessions import SESSION_CONFIDENCE, SessionStage, SessionStore
from search.config import Config, parse_config
from search.service import Service


def config(**routing: object) -> Config:
    return parse_config({
        "routing": {
            "default_source": "kiwix",
            "shipped_routes": False,
            "keywords": {"forecast": ["weather"], "web": ["news"]},
            "none_keywords": ["alarm"],
            "semantic": {"enabled": False},
            **routing,
        },
        "sources": {name: {"type": "scripted"} for name in ("kiwix", "forecast", "web")},
        "trace": {"enabled": False},
    })


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    svc = Service(config())
    await svc.start(sources=False)
    yield svc
    await svc.aclose()


def parts(outcome: object) -> list[tuple[str | None, str | None]]:
    return [(r.route, r.stage) for r in outcome.results]  # type: ignore[attr-defined]


async def test_a_follow_up_inherits_the_previous_route(service: Service) -> None:
    await service.search("what's the weather in oslo", dry_run=True, session_id="s1")
    outcome = await service.search("and tomorrow?", dry_run=True, session_id="s1", explain=True)
    assert parts(outcome) == [("forecast", "intent_session")]
    [event] = [e for e in outcome.chain if e["step"] == "intent_session"]
    assert event["decision"] == "forecast"
    assert event["previous_query"] == "what's the weather in oslo"
    assert event["query"] == "and tomorrow"  # the part, trimmed


async def test_without_a_session_or_in_another_session_nothing_is_inherited(
    service: Service,
) -> None:
    await service.search("what's the weather in oslo", dry_run=True, session_id="s1")
    alone = await service.search("and tomorrow?", dry_run=True)
    other = await service.search("and tomorrow?", dry_run=True, session_id="s2")
    assert parts(alone) == parts(other) == [("kiwix", "intent_default")]


async def test_the_last_turn_wins_and_defaults_do_not_count(service: Service) -> None:
    await service.search("weather in oslo", dry_run=True, session_id="s")
    await service.search("news from oslo", dry_run=True, session_id="s")
    await service.search("hmm", dry_run=True, session_id="s")  # a default: not remembered
    outcome = await service.search("what about bergen", dry_run=True, session_id="s")
    assert parts(outcome) == [("web", "intent_session")]


async def test_unserved_and_self_contained_queries_are_not_follow_ups(service: Service) -> None:
    await service.search("weather in oslo", dry_run=True, session_id="s")
    alarm = await service.search("set an alarm for seven", dry_run=True, session_id="s")
    fresh = await service.search("who painted the sistine chapel ceiling", dry_run=True,
                                 session_id="s")
    assert parts(alarm) == [(None, "intent_default")]
    assert parts(fresh) == [("kiwix", "intent_default")]


async def test_sessions_are_bounded_and_expire() -> None:
    now = [0.0]
    store = SessionStore(max_entries=2, ttl_s=10, now=lambda: now[0])
    for sid in ("a", "b", "c"):
        store.remember(sid, "weather", Decision("forecast", "intent_keyword"))
    assert store.last("a") is None and store.last("c") is not None and len(store) == 2
    now[0] = 11
    assert store.last("c") is None
    store.remember("d", "q", Decision("kiwix", "intent_default", confident=False))
    assert store.last("d") is None


async def test_stage_records_its_own_event() -> None:
    store = SessionStore(10, 60)
    store.remember("s", "weather in oslo", Decision("forecast", "intent_keyword"))
    stage = SessionStage(store)
    with route_log() as log:
        decision = await stage.decide("what about tomorrow", ResolveContext(session_id="s"))
    assert decision == Decision("forecast", "intent_session", confidence=SESSION_CONFIDENCE)
    assert [e["step"] for e in log.snapshot()] == ["intent_session"]
