"""Sessions: a follow-up inherits the previous turn's route when nothing else decides."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from routing.chain.events import route_log
from routing.stages.sessions import (
    SESSION_CONFIDENCE,
    SESSIONS_PER_CLIENT,
    SessionStage,
    SessionStore,
    session_key,
)
from routing.types import Decision, ResolveContext
from search.config import Config, parse_config
from search.service import Service
from search.traces.narrative import narrative
from tests.support.wire_servers import OpenMeteoServer
from tests.support.zim import build_demo_zim

ROOT = Path(__file__).resolve().parents[3]


def config(**routing: object) -> Config:
    return parse_config(
        {
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
        }
    )


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    svc = Service(config())
    await svc.start(sources=False)
    yield svc
    await svc.aclose()


def parts(outcome: object) -> list[tuple[str | None, str | None]]:
    return [(r.route, r.stage) for r in outcome.results]  # type: ignore[attr-defined]


async def test_a_follow_up_is_asked_as_the_question_it_stands_for(service: Service) -> None:
    await service.search("what's the weather in oslo", session_id="s1")
    outcome = await service.search("and tomorrow?", dry_run=True, session_id="s1", explain=True)
    assert parts(outcome) == [("forecast", "intent_keyword")]
    [event] = [e for e in outcome.chain if e["step"] == "rewritten"]
    assert (event["from"], event["to"]) == ("and tomorrow", "what's the weather in oslo tomorrow")
    assert (event["rule"], event["previous_query"]) == ("time", "what's the weather in oslo")
    [planned] = [e for e in outcome.chain if e["step"] == "planned"]
    assert planned["query"] == "what's the weather in oslo tomorrow"
    [result] = outcome.results
    assert (result.query, result.rewritten) == ("and tomorrow", planned["query"])


async def test_a_follow_up_no_rule_rewrites_inherits_the_previous_route(
    service: Service,
) -> None:
    await service.search("what's the weather in oslo", session_id="s1")
    outcome = await service.search("why?", dry_run=True, session_id="s1", explain=True)
    assert parts(outcome) == [("forecast", "intent_session")]
    assert "rewritten" not in [e["step"] for e in outcome.chain]
    [event] = [e for e in outcome.chain if e["step"] == "intent_session"]
    assert event["decision"] == "forecast"
    assert event["previous_query"] == "what's the weather in oslo"
    assert event["query"] == "why"  # the part, trimmed


async def test_without_a_session_or_in_another_session_nothing_is_inherited(
    service: Service,
) -> None:
    await service.search("what's the weather in oslo", session_id="s1")
    alone = await service.search("and tomorrow?", dry_run=True)
    other = await service.search("and tomorrow?", dry_run=True, session_id="s2")
    assert parts(alone) == parts(other) == [("kiwix", "intent_default")]


async def test_the_last_turn_wins_and_follow_ups_and_defaults_do_not_replace_it(
    service: Service,
) -> None:
    await service.search("weather in oslo", session_id="s")
    await service.search("news from oslo", session_id="s")
    hmm = await service.search("hmm", dry_run=True, session_id="s")  # went where news went
    await service.search("qwertz uiop asdf ghjk", session_id="s")  # a default
    outcome = await service.search("what about bergen", dry_run=True, session_id="s")
    assert parts(hmm) == [("web", "intent_session")]
    assert parts(outcome) == [("web", "intent_keyword")]
    assert outcome.results[0].rewritten == "news from bergen"


async def test_unserved_and_self_contained_queries_are_not_follow_ups(service: Service) -> None:
    await service.search("weather in oslo", session_id="s")
    alarm = await service.search("set an alarm for seven", dry_run=True, session_id="s")
    fresh = await service.search(
        "who painted the sistine chapel ceiling", dry_run=True, session_id="s"
    )
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


async def test_the_last_turn_keeps_its_subject() -> None:
    store = SessionStore(10, 60)
    store.remember("s", "tell me about the eiffel tower", Decision("kiwix", "intent_keyword"))
    turn = store.last("s")
    assert turn is not None and turn.subject == "the eiffel tower"
    with route_log() as log:
        asked = await store.follow_up("how tall is it?", "s")
        alone = await store.follow_up("how tall is it?", "other")
    assert (asked, alone) == ("how tall is the eiffel tower?", "how tall is it?")
    [event] = log.snapshot()
    assert {k: event[k] for k in ("step", "from", "to", "rule", "carried", "replaced")} == {
        "step": "rewritten",
        "from": "how tall is it?",
        "to": "how tall is the eiffel tower?",
        "rule": "pronoun",
        "carried": "the eiffel tower",
        "replaced": "it",
    }


async def test_stage_records_its_own_event() -> None:
    store = SessionStore(10, 60)
    store.remember("s", "weather in oslo", Decision("forecast", "intent_keyword"))
    stage = SessionStage(store)
    with route_log() as log:
        decision = await stage.decide("what about tomorrow", ResolveContext(session_id="s"))
    assert decision == Decision("forecast", "intent_session", confidence=SESSION_CONFIDENCE)
    assert [e["step"] for e in log.snapshot()] == ["intent_session"]


# --- end to end: the shipped routes, the real model, a real ZIM, Open-Meteo's wire format ---


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, OpenMeteoServer]]:
    """The demo encyclopedia built into a real ZIM, and a loopback server speaking
    Open-Meteo's documented `GET /v1/forecast` (the real API is not reachable here)."""
    zim = build_demo_zim(tmp_path_factory.mktemp("zim"))
    with OpenMeteoServer() as weather:
        yield zim, weather


@pytest.fixture
async def shipped(backends: tuple[Path, OpenMeteoServer]) -> AsyncIterator[Service]:
    zim, weather = backends
    data = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    data["sources"]["kiwix"] = {"type": "zim", "paths": [str(zim)], "timeout_s": 10}
    data["sources"]["forecast"].update(url=weather.url, enabled=True, timeout_s=10)
    data["trace"] = {"enabled": False}
    svc = Service(parse_config(data))
    await svc.start()
    yield svc
    await svc.aclose()


def invoked(outcome: object) -> list[tuple[str, str]]:
    return [
        (e["source"], e["query"])
        for e in outcome.chain  # type: ignore[attr-defined]
        if e["step"] == "source_invoked"
    ]


async def test_it_is_asked_of_its_source_as_what_it_stands_for(shipped: Service) -> None:
    first = await shipped.search("tell me about the eiffel tower", session_id="tour")
    follow = await shipped.search("how tall is it?", session_id="tour", explain=True)
    assert invoked(first) == [("kiwix", "tell me about the eiffel tower")]
    [event] = [e for e in follow.chain if e["step"] == "rewritten"]
    assert (event["from"], event["to"]) == ("how tall is it", "how tall is the eiffel tower")
    assert invoked(follow) == [("kiwix", "how tall is the eiffel tower")]
    [result] = follow.body["results"]
    assert result["query"] == "how tall is it" and result["rewritten"] == event["to"]
    assert "Eiffel Tower" in result["items"][0]["title"]
    line = narrative(follow.chain)[0]
    assert line.startswith(
        "part 0 'how tall is it' asked as 'how tall is the eiffel tower', a "
        "follow-up of 'tell me about the eiffel tower' ('it' stands for "
        "'the eiffel tower'); "
    )
    # a question about the world: the semantic stage weighs its rule words with its meaning
    assert (
        "declined (a question about the world, its meaning is weighed too); went to kiwix" in line
    )
    assert "eiffel" not in narrative(follow.chain, with_text=False)[0].lower()
    alone = await shipped.search("how tall is it?", explain=True)  # no session: as asked
    assert "rewritten" not in [e["step"] for e in alone.chain]


async def test_what_about_tomorrow_is_the_forecast_for_tomorrow_in_the_same_place(
    shipped: Service, backends: tuple[Path, OpenMeteoServer]
) -> None:
    weather = backends[1]
    await shipped.search("what's the weather in oslo", session_id="trip")
    before = weather.today()
    follow = await shipped.search("what about tomorrow?", session_id="trip", explain=True)
    after = weather.today()  # the same day, unless the test ran across midnight
    [event] = [e for e in follow.chain if e["step"] == "rewritten"]
    assert event["to"] == "what's the weather in oslo tomorrow" and event["rule"] == "time"
    assert invoked(follow) == [("forecast", "what's the weather in oslo tomorrow")]
    [result] = follow.body["results"]
    titles = {
        f"Weather for {day:%A} {day.isoformat()}"
        for day in (before + timedelta(days=1), after + timedelta(days=1))
    }
    assert [item["title"] for item in result["items"]] in [[title] for title in titles]


async def test_a_follow_up_the_rules_give_to_another_route_is_not_rewritten(
    shipped: Service,
) -> None:
    await shipped.search("what's the weather in oslo", dry_run=True, session_id="home")
    outcome = await shipped.search("turn it off", dry_run=True, session_id="home", explain=True)
    assert "rewritten" not in [e["step"] for e in outcome.chain]
    assert outcome.results[0].query == "turn it off"


async def test_a_dry_run_plans_without_becoming_the_session_s_last_turn(
    service: Service,
) -> None:
    """A client that previews a plan and then asks for real must meet the session it had:
    the preview is not a turn."""
    await service.search("what's the weather in oslo", session_id="s")
    preview = await service.search("news from bergen", dry_run=True, session_id="s")
    assert parts(preview) == [("web", "intent_keyword")]
    outcome = await service.search("and tomorrow?", dry_run=True, session_id="s")
    assert outcome.results[0].rewritten == "what's the weather in oslo tomorrow"


# --- whose conversation it is ---------------------------------------------------------


async def test_another_client_with_the_same_session_id_meets_a_conversation_of_its_own(
    service: Service,
) -> None:
    """A session_id is a name the client chose, not a secret: the conversation is keyed by
    who asks too, so another client can neither read its last turn nor plant one."""
    home, lan = "192.0.2.10", "192.0.2.66"
    await service.search("what's the weather in oslo", session_id="s", client=home)
    peek = await service.search(
        "and tomorrow?", dry_run=True, session_id="s", client=lan, explain=True
    )
    assert parts(peek) == [("kiwix", "intent_default")]
    assert peek.results[0].rewritten is None
    assert "oslo" not in json.dumps(peek.chain)  # no previous_query, no rewrite
    # a turn it takes is its own conversation's, not the first client's
    await service.search("news from bergen", session_id="s", client=lan)
    mine = await service.search("and tomorrow?", dry_run=True, session_id="s", client=home)
    theirs = await service.search("what about oslo", dry_run=True, session_id="s", client=lan)
    assert mine.results[0].rewritten == "what's the weather in oslo tomorrow"
    assert theirs.results[0].rewritten == "news from oslo"
    # an in-process caller (no identity the server could tell) is another client again
    local = await service.search("and tomorrow?", dry_run=True, session_id="s")
    assert local.results[0].rewritten is None


async def test_one_client_opening_many_sessions_evicts_its_own_oldest() -> None:
    store = SessionStore(max_entries=5, ttl_s=60, per_client=2)
    weather = Decision("forecast", "intent_keyword")
    home = session_key("192.0.2.10", "kitchen")
    store.remember(home, "weather in oslo", weather)
    for i in range(50):  # a client flooding new session ids
        store.remember(session_key("192.0.2.66", f"flood-{i}"), "weather", weather)
    assert store.last(home) is not None  # the household's conversation lives on
    assert store.held_by("192.0.2.66") == 2 and len(store) == 3
    assert store.last(session_key("192.0.2.66", "flood-49")) is not None
    assert store.last(session_key("192.0.2.66", "flood-47")) is None
    # the total bound still holds: many clients share routing.session_max_entries
    for client in ("192.0.2.1", "192.0.2.2"):
        for sid in ("a", "b"):
            store.remember(session_key(client, sid), "weather", weather)
    assert len(store) == 5 and store.last(home) is None  # the least recently used went


async def test_the_per_client_bound_leaves_room_for_other_clients() -> None:
    store = SessionStore(max_entries=1000, ttl_s=900)  # the defaults
    for i in range(1001):
        store.remember(session_key("192.0.2.66", str(i)), "weather", Decision("web", "x"))
    assert store.held_by("192.0.2.66") == SESSIONS_PER_CLIENT < 1000
    assert session_key(None, "s") == "s" and session_key("::1", None) is None


# --- bare follow-ups with the shipped routes ------------------------------------------

BARE_FOLLOW_UPS = ("why?", "tell me more", "go on then", "how so", "and?")


def steps(outcome: object) -> list[str]:
    return [e["step"] for e in outcome.chain]  # type: ignore[attr-defined]


async def test_bare_follow_ups_continue_the_conversation_with_the_shipped_routes(
    shipped: Service,
) -> None:
    """With the shipped `none` exemplars the semantic stage finds "why?" nearest to "stop":
    in a conversation that is weak evidence, and the session stage, whose event says what
    it overrules, continues the conversation. Without a session nothing changes."""
    await shipped.search("tell me about the roman empire", session_id="rome", client="::1")
    for text in BARE_FOLLOW_UPS:
        outcome = await shipped.search(
            text, dry_run=True, session_id="rome", client="::1", explain=True
        )
        [result] = outcome.results
        assert (result.status, result.stage) == ("planned", "intent_session"), text
        [semantic] = [e for e in outcome.chain if e["step"] == "intent_semantic"]
        [session] = [e for e in outcome.chain if e["step"] == "intent_session"]
        assert semantic["outcome"] == "unserved"  # what likeness found is still said
        assert session["decision"] == "kiwix"
        assert session["previous_query"] == "tell me about the roman empire"
        assert session["overrules"]["step"] == "intent_semantic"
        assert session["overrules"]["nearest"] == semantic["matched_query"]
        assert session["overrules"]["similarity"] < session["overrules"]["bar"]
        assert "intent_default" not in steps(outcome)
        # without a session, or in a session with no turn yet: exactly as before
        for alone in (
            await shipped.search(text, dry_run=True, explain=True),
            await shipped.search(text, dry_run=True, session_id="new", explain=True),
        ):
            assert [(r.status, r.source, r.stage) for r in alone.results] == [
                ("unserved", None, "intent_default")
            ], text
            assert steps(alone) == ["intent_semantic", "intent_default"], text
            assert alone.chain[-1]["reason"] == "unserved"


async def test_why_after_the_weather_goes_to_the_forecast_with_the_shipped_routes(
    shipped: Service,
) -> None:
    await shipped.search("what's the weather in oslo", session_id="trip")
    outcome = await shipped.search("why?", dry_run=True, session_id="trip", explain=True)
    assert [(r.route, r.stage) for r in outcome.results] == [("forecast", "intent_session")]
    [event] = [e for e in outcome.chain if e["step"] == "intent_session"]
    assert event["previous_query"] == "what's the weather in oslo"


async def test_what_asks_nothing_or_a_rule_names_stays_unserved_in_a_conversation(
    shipped: Service,
) -> None:
    """Only a far likeness yields: the part said again ("stop", a `none` exemplar), words
    that ask nothing ("ok") and a keyword `none` rule ("set an alarm") still end unserved."""
    await shipped.search("tell me about the roman empire", session_id="rome")
    for text in ("stop", "okay then", "ok", "cool", "thanks", "set an alarm"):
        outcome = await shipped.search(text, dry_run=True, session_id="rome", explain=True)
        assert [(r.status, r.stage) for r in outcome.results] == [("unserved", "intent_default")], (
            text
        )
        assert "intent_session" not in steps(outcome), text


# --- a rewrite within the server's limits -----------------------------------------------


async def test_a_rewrite_longer_than_max_query_chars_is_not_made() -> None:
    svc = Service(
        parse_config(
            {
                "server": {"max_query_chars": 60},
                "routing": {
                    "default_source": "kiwix",
                    "shipped_routes": False,
                    "keywords": {"kiwix": ["tell me about", "how tall"]},
                    "semantic": {"enabled": False},
                },
                "sources": {"kiwix": {"type": "scripted"}},
                "trace": {"enabled": False},
            }
        )
    )
    await svc.start(sources=False)
    try:
        first = "tell me about the international space station"  # 46 characters
        await svc.search(first, session_id="s")
        short = await svc.search("how tall is it?", session_id="s", explain=True)
        long = "how tall is it in meters measured from the ground"  # 49; its rewrite 82
        outcome = await svc.search(long, session_id="s", explain=True)
    finally:
        await svc.aclose()
    assert short.results[0].rewritten == "how tall is the international space station"
    [declined] = [e for e in outcome.chain if e["step"] == "rewritten"]
    assert (declined["outcome"], declined["to"], declined["max_chars"]) == ("declined", None, 60)
    assert "over the maximum of 60" in declined["declined"]
    [result] = outcome.results
    assert result.rewritten is None and result.query == long
    asked = [e["query"] for e in outcome.chain if e["step"] == "source_invoked"]
    assert asked and all(len(q) <= 60 for q in asked)
