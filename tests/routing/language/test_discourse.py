"""Discourse: which queries lean on the conversation, and escalating their keyword match.

The LLM is `tests.support.chat_server.ChatServer`, a loopback server speaking the
chat-completions wire format exactly (see its docstring).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from routing.language.discourse import dependency, is_follow_up
from search.config import Config, parse_config
from search.service import SearchOutcome, Service
from tests.support.chat_server import ChatServer
from tests.support.wire_servers import Fault


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("what about tomorrow?", "follow_up"),
        ("and in the kitchen?", "follow_up"),
        ("how about in Paris", "follow_up"),
        ("the same for the bedroom", "follow_up"),
        ("use celsius instead", "follow_up"),
        ("why?", "why"),
        ("why is it so cold", "why"),
        ("is it colder than yesterday", "comparison"),
        ("which is bigger, the sun or the earth", "comparison"),
        ("compare apple and microsoft stock", "comparison"),
        ("turn it off", "reference"),
        ("how old is he", "reference"),
        ("what's the weather there", "reference"),
        ("turn that one off", "reference"),
    ],
)
def test_discourse_dependent_queries(query: str, kind: str) -> None:
    assert dependency(query) == kind


@pytest.mark.parametrize(
    "query",
    [
        "what's the weather in paris",
        "is it going to rain tomorrow",  # the weather's dummy "it"
        "it's cold in here",
        "will it snow this weekend",
        "if it is dark",  # the daylight's
        "when it gets cold",
        "turn off the kitchen lights",
        "who wrote the hobbit",
        "is there a pharmacy open near me",
        "the lights that are on in the hall",
        "what time is it",  # the clock's "it"
        "what day is it today",
        "",
    ],
)
def test_self_contained_queries(query: str) -> None:
    assert dependency(query) is None


def test_fragments_are_follow_ups_for_sessions() -> None:
    assert is_follow_up("tomorrow?")
    assert is_follow_up("in the kitchen")
    assert not is_follow_up("who painted the sistine chapel ceiling")


def config(base_url: str) -> Config:
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "keywords": {"forecast": ["weather", "tomorrow"], "ha": ["kitchen", "lights"]},
                "semantic": {"enabled": False},
                "llm": {"base_url": base_url, "model": "m", "timeout_s": 2, "bias_check": False},
            },
            "sources": {name: {"type": "scripted"} for name in ("kiwix", "forecast", "ha", "web")},
            "trace": {"enabled": False},
        }
    )


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    with ChatServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _reset(server: ChatServer) -> None:
    server.clear_faults()
    server.bodies.clear()
    server.reply = '{"source": "ha"}'


@pytest.fixture
async def service(server: ChatServer) -> AsyncIterator[Service]:
    svc = Service(config(server.base_url))
    await svc.start(sources=False)
    yield svc
    await svc.aclose()


def intent_events(outcome: SearchOutcome) -> list[dict[str, Any]]:
    return [e for e in outcome.chain if e["step"].startswith(("intent_", "llm_"))]


async def test_a_discourse_dependent_keyword_match_is_escalated(
    service: Service, server: ChatServer
) -> None:
    await service.search("turn on the kitchen lights", session_id="s")
    outcome = await service.search(
        "what about tomorrow?", dry_run=True, explain=True, session_id="s"
    )
    assert [(r.route, r.stage) for r in outcome.results] == [("ha", "intent_llm")]
    keyword, llm = intent_events(outcome)
    assert (keyword["step"], keyword["decision"], keyword["discourse_escalated"]) == (
        "intent_keyword",
        "forecast",
        True,
    )
    assert (llm["step"], llm["decision"], llm["discourse_escalated"]) == ("intent_llm", "ha", True)
    # The LLM saw the previous turn, so "what about tomorrow?" can mean the lights.
    user = server.bodies[-1]["messages"][-1]["content"]
    assert "turn on the kitchen lights" in user and "what about tomorrow" in user
    # A decision that depends on the conversation is not cached for everyone.
    again = await service.search("what about tomorrow?", dry_run=True)
    assert again.results[0].stage == "intent_llm"


async def test_a_self_contained_keyword_match_is_not_escalated(
    service: Service, server: ChatServer
) -> None:
    outcome = await service.search("weather in oslo", dry_run=True, explain=True)
    assert [(r.route, r.stage) for r in outcome.results] == [("forecast", "intent_keyword")]
    [keyword] = intent_events(outcome)
    assert keyword["discourse_escalated"] is False
    assert server.bodies == []


async def test_if_the_llm_fails_the_keyword_decision_stands(
    service: Service, server: ChatServer
) -> None:
    server.set_fault(Fault.status(503))
    outcome = await service.search("and the weather tomorrow?", dry_run=True, explain=True)
    assert [(r.route, r.stage) for r in outcome.results] == [("forecast", "intent_keyword")]
    keyword, error = intent_events(outcome)
    assert keyword["discourse_escalated"] is True
    assert (error["step"], error["reason"], error["discourse_escalated"]) == (
        "llm_error",
        "llm_failed",
        True,
    )


async def test_without_an_llm_nothing_is_escalated() -> None:
    svc = Service(config(""))
    await svc.start(sources=False)
    try:
        outcome = await svc.search("what about tomorrow?", dry_run=True, explain=True)
    finally:
        await svc.aclose()
    [keyword] = intent_events(outcome)
    assert keyword["discourse_escalated"] is False and keyword["decision"] == "forecast"
