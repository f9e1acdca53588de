"""`routing.stages.build.build_resolver`: the intent stages a config asks for, in their order,
seen through the decisions they record. The LLM is a loopback server speaking OpenAI's
chat-completions wire format (tests/support/chat_server.py); the model is the real one."""

from __future__ import annotations

from typing import Any

from routing.chain.events import route_log
from routing.stages.build import build_resolver, route_descriptions
from routing.stages.resolver import Resolver
from routing.types import Decision, ResolveContext
from search.config import Config, parse_config
from tests.support.chat_server import ChatServer


def config(**routing: Any) -> Config:
    section: dict[str, Any] = {
        "default_source": "kiwix",
        "shipped_routes": False,
        "semantic": {"enabled": False},
        **routing,
    }
    return parse_config(
        {
            "routing": section,
            "trace": {"enabled": False},
            "sources": {
                "kiwix": {"type": "zim", "paths": ["x.zim"], "description": "An encyclopedia."},
                "web": {"type": "searxng", "url": "http://127.0.0.1:9"},
            },
        }
    )


async def decide(resolver: Resolver, query: str) -> tuple[Decision, list[dict[str, Any]]]:
    with route_log() as log:
        decision = await resolver.resolve(query, ResolveContext())
        return decision, log.freeze().events()


def intents(events: list[dict[str, Any]]) -> list[str]:
    return [e["step"] for e in events if e["step"].startswith("intent_")]


def test_the_llm_is_told_every_source_and_fusion_route() -> None:
    routes = route_descriptions(config(fusion={"everything": ["kiwix", "web"]}))
    assert routes["kiwix"] == "An encyclopedia."
    assert set(routes) == {"kiwix", "web", "everything"}
    assert routes["everything"] == "combined results of kiwix and web"


async def test_without_an_llm_an_unmatched_query_goes_to_the_default_saying_why() -> None:
    resolver = build_resolver(config(keywords={"web": ["news"]}))
    await resolver.start()
    try:
        matched, events = await decide(resolver, "latest news please")
        assert (matched.route, intents(events)) == ("web", ["intent_keyword"])
        unmatched, events = await decide(resolver, "who painted the mona lisa")
    finally:
        await resolver.aclose()
    assert (unmatched.route, unmatched.stage) == ("kiwix", "intent_default")
    [default] = [e for e in events if e["step"] == "intent_default"]
    assert default["reason"] == "llm_unconfigured"


async def test_an_llm_decision_is_cached_so_the_llm_is_asked_once() -> None:
    with ChatServer(reply='{"source": "web"}') as chat:
        resolver = build_resolver(
            config(llm={"base_url": chat.base_url, "model": "m", "bias_check": False})
        )
        await resolver.start()
        try:
            first, first_events = await decide(resolver, "who painted the mona lisa")
            again, again_events = await decide(resolver, "who painted the mona lisa")
        finally:
            await resolver.aclose()
        asked = len(chat.bodies)
    assert (first.route, intents(first_events)) == ("web", ["intent_llm"])
    assert (again.route, intents(again_events)) == ("web", ["intent_cached"])
    assert asked == 1


async def test_the_semantic_stage_runs_only_when_enabled() -> None:
    exemplars = {"web": ["what are the headlines right now"]}
    decided = {}
    for enabled in (False, True):
        resolver = build_resolver(config(semantic={"enabled": enabled, "exemplars": exemplars}))
        await resolver.start()
        try:
            decided[enabled] = await decide(resolver, "what are the headlines right now")
        finally:
            await resolver.aclose()
    assert decided[False][0].route == "kiwix"
    assert "intent_semantic" not in intents(decided[False][1])
    assert decided[True][0].route == "web"
    assert intents(decided[True][1]) == ["intent_semantic"]
