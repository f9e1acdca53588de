"""Time-sensitive parts go live (routing.dispatch.live), through the real pipeline.

The shipped config.yaml with real parts: the bundled MiniLM model, the real libzim source
over the demo ZIM, and for `web` a loopback server speaking SearXNG's documented JSON API
(tests/support/wire_servers.py; SearXNG itself cannot run here).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from routing.chain.events import route_log
from search.config import ConfigError, parse_config
from search.service import Service
from search.traces.narrative import narrative
from tests.support.chat_server import ChatServer
from tests.support.wire_servers import Fault, SearxngServer, closed_port_url, searxng_result

ROOT = Path(__file__).resolve().parents[3]
MAYOR = "who is the current mayor of Paris"
EVEREST = "what is the current height of Mount Everest"

Build = Callable[..., Any]


def shipped(zim: Path, web: dict[str, Any] | None = None, ha: bool = False, **routing: Any) -> Any:
    """config.yaml over the demo ZIM; `ha`: Home Assistant enabled (at a closed port:
    only dry runs use it, which read its commands and call nothing)."""
    data = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    data["sources"]["kiwix"] = {"type": "zim", "paths": [str(zim)], "timeout_s": 10}
    if web is not None:
        data["sources"]["web"].update(web)
    if ha:
        data["sources"]["ha"].update(enabled=True, url=closed_port_url(), token="test-token")
    data["routing"].update(routing)
    data["trace"] = {"enabled": False}
    return parse_config(data)


@pytest.fixture
async def build(demo_zim: Path) -> AsyncIterator[Build]:
    started: list[Service] = []

    async def make(web: dict[str, Any] | None = None, ha: bool = False, **routing: Any) -> Service:
        svc = Service(shipped(demo_zim, web, ha, **routing))
        await svc.start()
        started.append(svc)
        return svc

    yield make
    for svc in started:
        await svc.aclose()


def steps(chain: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return [e for e in chain if e["step"] == step]


LIVE = {"enabled": True, "url": "http://127.0.0.1:9", "timeout_s": 1}


async def test_a_dry_run_plans_web_for_a_time_sensitive_question(build: Build) -> None:
    svc = await build(LIVE)
    outcome = await svc.search(MAYOR, explain=True, dry_run=True)
    (part,) = outcome.body["results"]
    assert (part["source"], part["status"]) == ("web", "planned")
    (event,) = steps(outcome.chain, "time_sensitive")
    assert (event["cue"], event["from_route"], event["to_route"]) == ("the current", "kiwix", "web")
    assert event["query"] == MAYOR
    (planned,) = steps(outcome.chain, "planned")
    assert planned["route"] == "web" and planned["seq"] > event["seq"]
    assert not steps(outcome.chain, "source_invoked")


async def test_a_fixed_fact_and_other_routes_are_untouched(build: Build) -> None:
    svc = await build(LIVE)
    for query, route in (
        ("who wrote Romeo and Juliet", "kiwix"),
        ("what is the weather today", "forecast"),
        ("turn off the kitchen lights now", "ha"),
    ):
        outcome = await svc.search(query, explain=True, dry_run=True)
        assert [r["source"] for r in outcome.body["results"]] == [route], query
        assert not steps(outcome.chain, "time_sensitive"), query


async def test_a_command_never_becomes_time_sensitive(build: Build) -> None:
    # Even with ha listed as a snapshot route, its command with "now" in it stays with ha
    # (and is withheld on a dry run, as every command is).
    svc = await build(LIVE, ha=True, time_sensitive={"from_routes": ["kiwix", "ha"]})
    outcome = await svc.search("turn off the kitchen lights now", explain=True, dry_run=True)
    assert [r["source"] for r in outcome.body["results"]] == ["ha"]
    assert not steps(outcome.chain, "time_sensitive")
    (withheld,) = steps(outcome.chain, "control_withheld")
    assert "dry_run" in withheld["reasons"]


async def test_web_answers_and_kiwix_is_not_asked(build: Build) -> None:
    with SearxngServer() as web:
        web.results = [searxng_result("Everest survey", "https://example.org/everest", "8849 m")]
        svc = await build({"enabled": True, "url": web.url, "timeout_s": 2})
        outcome = await svc.search(EVEREST, explain=True)
        assert [r.param("q") for r in web.requests] == [EVEREST]
    (part,) = outcome.body["results"]
    assert (part["source"], part["status"], part["route"]) == ("web", "ok", "web")
    assert part["items"][0]["url"] == "https://example.org/everest"
    assert [e["source"] for e in steps(outcome.chain, "source_invoked")] == ["web"]
    assert outcome.body["fallback_occurred"] is False
    # the live source answered: nothing to warn about
    assert "may_be_out_of_date" not in part and not steps(outcome.chain, "snapshot_answered")


@pytest.mark.parametrize("fallback", [["kiwix"], []])
async def test_kiwix_answers_when_web_fails(build: Build, fallback: list[str]) -> None:
    """Also when the user's web source lists no fallback: the snapshot the part was
    routed to follows the live source."""
    with SearxngServer() as web:
        web.set_fault(Fault.status(500))
        svc = await build({"enabled": True, "url": web.url, "timeout_s": 2, "fallback": fallback})
        outcome = await svc.search(EVEREST, explain=True)
    invoked = [(e["source"], e["outcome"]) for e in steps(outcome.chain, "source_invoked")]
    assert invoked == [("web", "error"), ("kiwix", "ok")]
    (moved,) = steps(outcome.chain, "fallback")
    assert (moved["from_source"], moved["to_source"], moved["reason"]) == (
        "web",
        "kiwix",
        "server_error",
    )
    (part,) = outcome.body["results"]
    assert (part["source"], part["status"]) == ("kiwix", "ok")
    assert part["items"][0]["title"] == "Mount Everest"
    assert outcome.body["fallback_occurred"] is True
    # recorded after the answer it is about, and said on the part's result
    (stale,) = steps(outcome.chain, "snapshot_answered")
    assert (stale["source"], stale["live_route"]) == ("kiwix", "web")
    assert stale["seq"] > steps(outcome.chain, "source_invoked")[-1]["seq"]
    assert part["may_be_out_of_date"] is True


async def test_without_web_kiwix_answers_and_the_narrative_says_it_may_be_old(
    build: Build,
) -> None:
    svc = await build()  # the shipped config: web is disabled
    outcome = await svc.search(EVEREST, explain=True)
    (part,) = outcome.body["results"]
    # routed live like any web question, web skipped as disabled, kiwix after it
    assert (part["route"], part["source"], part["status"]) == ("web", "kiwix", "ok")
    (event,) = steps(outcome.chain, "time_sensitive")
    assert (event["from_route"], event["to_route"], event["reason"]) == (
        "kiwix",
        "web",
        "disabled",
    )
    (skipped,) = steps(outcome.chain, "source_skipped")
    assert (skipped["source"], skipped["reason"]) == ("web", "disabled")
    assert [e["source"] for e in steps(outcome.chain, "source_invoked")] == ["kiwix"]
    planned = await svc.search(EVEREST, dry_run=True)
    assert [r["source"] for r in planned.body["results"]] == ["web"]
    (line,) = [line for line in narrative(outcome.chain) if line.startswith("part 0")]
    assert "'the current' makes its answer change with time" in line
    assert "but the live source web is disabled, so kiwix answers" in line
    assert line.endswith(
        "kiwix answered in place of the live source web: its answer may be out of date"
    )
    assert part["may_be_out_of_date"] is True
    # a fixed fact says nothing of the kind
    plain = await svc.search("who wrote Romeo and Juliet", explain=True)
    assert not any("out of date" in line for line in narrative(plain.chain))
    assert "may_be_out_of_date" not in plain.body["results"][0]
    # nor does a dry run, which answers nothing
    assert not steps(planned.chain, "snapshot_answered")


@pytest.mark.parametrize(
    ("query", "stage"),
    [
        ("latest news", "intent_keyword"),  # the keyword rules name web
        ("what is the current price of bitcoin", "intent_semantic"),  # likeness names web
    ],
)
async def test_kiwix_standing_in_for_a_disabled_web_says_its_answer_may_be_old(
    build: Build, query: str, stage: str
) -> None:
    """Not only a redirected part: any part routed to web that kiwix answers in its place
    (the shipped `web: fallback [kiwix]`) is a question of now answered by a snapshot."""
    svc = await build()  # the shipped config: web is disabled
    outcome = await svc.search(query, explain=True)
    (part,) = outcome.body["results"]
    assert (part["route"], part["stage"], part["source"]) == ("web", stage, "kiwix")
    assert not steps(outcome.chain, "time_sensitive")
    (stale,) = steps(outcome.chain, "snapshot_answered")
    assert (stale["source"], stale["live_route"], stale["query"]) == ("kiwix", "web", query)
    assert part["may_be_out_of_date"] is True
    # the time-sensitivity feature switched off says nothing of live and snapshot routes
    off = await build(time_sensitive={"enabled": False})
    quiet = await off.search(query, explain=True)
    assert quiet.body["results"][0]["source"] == "kiwix"
    assert not steps(quiet.chain, "snapshot_answered")
    assert "may_be_out_of_date" not in quiet.body["results"][0]


async def _with_kiwix_alone(demo_zim: Path, *queries: str, dry_run: bool = False) -> list[Any]:
    """Each of `queries` by config.yaml's routing with kiwix the only source configured."""
    data = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    data["sources"] = {"kiwix": {"type": "zim", "paths": [str(demo_zim)]}}
    data["routing"]["fusion"] = {}
    data["trace"] = {"enabled": False}
    svc = Service(parse_config(data))
    await svc.start()
    try:
        return [await svc.search(q, explain=True, dry_run=dry_run) for q in queries]
    finally:
        await svc.aclose()


async def test_with_no_web_configured_kiwix_answers_a_question_of_now_as_such(
    demo_zim: Path,
) -> None:
    outcome, plain = await _with_kiwix_alone(demo_zim, EVEREST, "who wrote Romeo and Juliet")
    (part,) = outcome.body["results"]
    assert (part["route"], part["source"], part["may_be_out_of_date"]) == ("kiwix", "kiwix", True)
    (stale,) = steps(outcome.chain, "snapshot_answered")
    assert stale["live_route"] == "web"
    assert "may_be_out_of_date" not in plain.body["results"][0]


async def test_a_live_route_that_is_not_configured_is_named(build: Build, demo_zim: Path) -> None:
    (outcome,) = await _with_kiwix_alone(demo_zim, EVEREST, dry_run=True)
    (event,) = steps(outcome.chain, "time_sensitive")
    assert event["reason"] == "not_configured" and event["to_route"] == "kiwix"
    assert any("web is not configured" in line for line in narrative(outcome.chain))


def test_a_misspelt_live_route_is_refused(demo_zim: Path) -> None:
    with pytest.raises(ConfigError, match=r"routing.time_sensitive.live_route: unknown source"):
        shipped(demo_zim, time_sensitive={"live_route": "wbe"})


async def test_the_model_finds_a_time_sensitive_question_no_cue_word_marks(build: Build) -> None:
    question = "who won the last world cup"
    svc = await build(LIVE)
    outcome = await svc.search(question, explain=True, dry_run=True)
    assert [r["source"] for r in outcome.body["results"]] == ["web"]
    (event,) = steps(outcome.chain, "time_sensitive")
    assert (event["cue"], event["kind"], event["to_route"]) == (None, "model", "web")
    assert event["probability"] >= svc.router.live.model.threshold  # type: ignore[union-attr]
    (line,) = [line for line in narrative(outcome.chain) if line.startswith("part 0")]
    assert "the time-sensitivity model reads its answer as changing with time" in line
    # switched off in config: the cue words alone decide, and they see nothing here
    words_only = await build(LIVE, time_sensitive={"model": False})
    plain = await words_only.search(question, explain=True, dry_run=True)
    assert [r["source"] for r in plain.body["results"]] == ["kiwix"]
    assert not steps(plain.chain, "time_sensitive")


async def test_a_cue_that_fires_on_fixed_facts_needs_the_models_word(build: Build) -> None:
    svc = await build(LIVE)
    outcome = await svc.search("how many legs do ants have", explain=True, dry_run=True)
    assert [r["source"] for r in outcome.body["results"]] == ["kiwix"]
    assert not steps(outcome.chain, "time_sensitive")
    # a cue it trusts on its own still carries the probability the model gave
    mayor = await svc.search(MAYOR, explain=True, dry_run=True)
    (event,) = steps(mayor.chain, "time_sensitive")
    assert event["kind"] == "present" and 0.0 <= event["probability"] <= 1.0


async def test_a_fixed_fact_a_stage_sent_live_by_likeness_goes_to_the_snapshot(
    build: Build,
) -> None:
    """A household's web exemplar about old reviews puts the question near web in meaning,
    so the semantic stage says web; the model reads its answer as fixed, so kiwix answers
    it, web after it."""
    question = "what did critics say about citizen kane when it came out"
    reviews = {"web": ["what did the critics write about citizen kane on its release"]}
    svc = await build(LIVE, semantic={"enabled": True, "top_k": 3, "exemplars": reviews})
    outcome = await svc.search(question, explain=True, dry_run=True)
    semantic = [e for e in outcome.chain if e["step"] == "intent_semantic"]
    assert [e["decision"] for e in semantic] == ["web"]
    (event,) = steps(outcome.chain, "time_stable")
    assert (event["from_route"], event["to_route"]) == ("web", "kiwix")
    model = svc.router.live.model
    assert model is not None and event["below"] == round(1 - model.threshold, 4)
    assert event["probability"] < event["below"]
    assert [r["source"] for r in outcome.body["results"]] == ["kiwix"]
    (line,) = [line for line in narrative(outcome.chain) if line.startswith("part 0")]
    assert "reads its answer as fixed" in line and "went to kiwix (web if that fails)" in line
    # web answers when kiwix fails, as the time-sensitive parts have kiwix after web
    with SearxngServer() as web:
        web.results = [searxng_result("Citizen Kane", "https://example.org/kane", "1941")]
        live = await build(
            {"enabled": True, "url": web.url, "timeout_s": 2},
            semantic={"enabled": True, "top_k": 3, "exemplars": reviews},
        )
        live.dispatcher.enabled["kiwix"] = False
        answered = await live.search(question, explain=True)
    invoked = [(e["source"], e["outcome"]) for e in steps(answered.chain, "source_invoked")]
    assert invoked == [("web", "ok")]
    assert [s["source"] for s in steps(answered.chain, "source_skipped")] == ["kiwix"]


async def test_a_live_route_a_keyword_rule_named_is_not_second_guessed(build: Build) -> None:
    """The model moves a question from the live route to the snapshot only when a stage
    chose the live route by likeness alone: not when the keyword rules named it (decided
    by the keyword stage, or by the semantic stage with the rules' route as its own)."""
    svc = await build(LIVE)
    question = "what traffic laws did ancient rome have"  # "traffic": a web rule
    live = svc.router.live
    with route_log() as log:
        by_likeness = await live.route(question, "web", "intent_semantic")
        backed = await live.route(question, "web", "intent_semantic", by_rule=True)
        ruled = await live.route(question, "web", "intent_keyword")
    assert (by_likeness.route, by_likeness.then) == ("kiwix", ("web",))
    assert backed.route == "web" and ruled.route == "web"
    assert [e["step"] for e in log.snapshot()] == ["time_stable"]
    # through the pipeline: the rules' route backs the semantic stage's, when they agree
    outcome = await svc.search("what is the traffic on the bridge", explain=True, dry_run=True)
    intents = [e for e in outcome.chain if e["step"].startswith("intent_")]
    assert [(e["step"], e.get("decision")) for e in intents] == [
        ("intent_keyword", None),
        ("intent_semantic", "web"),
    ]
    assert intents[0]["candidates"][0]["route"] == "web"
    assert [r["source"] for r in outcome.body["results"]] == ["web"]
    assert not steps(outcome.chain, "time_stable")


async def test_a_rule_word_that_is_a_questions_topic_does_not_route_it(build: Build) -> None:
    """ "snow" is the forecast's word and "the tv" Home Assistant's; in these questions
    they name what is asked about, and the encyclopedia answers."""
    svc = await build(LIVE)
    for question in (
        "what is the habitat of the snow leopard",
        "what year did the tv show friends end",
    ):
        outcome = await svc.search(question, explain=True, dry_run=True)
        keyword, semantic = [e for e in outcome.chain if e["step"].startswith("intent_")]
        assert keyword["outcome"] == "declined", question
        assert keyword["candidates"][0]["route"] in ("forecast", "ha"), question
        assert semantic["decision"] == "kiwix", question
        assert [r["source"] for r in outcome.body["results"]] == ["kiwix"], question
        (line,) = [line for line in narrative(outcome.chain) if line.startswith("part 0")]
        assert "declined (a question about the world, its meaning is weighed too)" in line


def test_the_time_model_reads_only_the_bundled_models_embeddings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The model was fitted on the bundled MiniLM's embeddings: a semantic stage with a
    model of another path (a 384-dimension model of another family would fit the weights'
    shape and read as nonsense) leaves the verdict to the cue words, and says so."""
    import logging
    from types import SimpleNamespace

    from routing.config import TimeSensitiveConfig
    from routing.pipeline import _live_redirect
    from routing.stages.embedder import default_model_path

    async def embed(text: str) -> None:
        return None

    def redirect(model_path: str | None) -> Any:
        semantic = SimpleNamespace(embed=embed, config=SimpleNamespace(model_path=model_path))
        resolver = SimpleNamespace(stage=lambda name: semantic)
        return _live_redirect(resolver, None, TimeSensitiveConfig())  # type: ignore[arg-type]

    (tmp_path / "same").symlink_to(default_model_path())
    for bundled in (None, default_model_path(), str(tmp_path / "same")):
        assert redirect(bundled).model is not None, bundled
    with caplog.at_level(logging.WARNING, logger="routing.pipeline"):
        assert redirect(str(tmp_path / "another-model")).model is None
    assert "only the cue words decide" in caplog.text


def _stage_confidence(chain: list[dict[str, Any]]) -> float:
    """The confidence the deciding intent stage stated (the last intent event)."""
    return [e for e in chain if e["step"].startswith("intent_")][-1]["confidence"]


def _either_confidence(chain: list[dict[str, Any]]) -> float:
    """The deciding stage's confidence in kiwix and web together, from its candidates (the
    event shows the best three; the others hold less than the third each)."""
    [*_, decided] = [e for e in chain if e["step"].startswith("intent_")]
    return sum(c["confidence"] for c in decided["candidates"] if c["route"] in {"kiwix", "web"})


async def test_a_redirected_part_states_how_sure_routing_is_of_its_new_route(
    build: Build,
) -> None:
    """The stage chose kiwix, not web: a part the time words send live states how likely
    the stage found it a question for either of the two times how likely the redirect is
    right, on the event and the result, answered or planned."""
    svc = await build(LIVE)
    live = svc.router.live
    for dry_run in (True, False):
        outcome = await svc.search(MAYOR, explain=True, dry_run=dry_run)
        (event,) = steps(outcome.chain, "time_sensitive")
        (part,) = outcome.body["results"]
        stated = _stage_confidence(outcome.chain)
        either = _either_confidence(outcome.chain)
        assert stated <= either <= 1.0
        # "the current" is a cue trusted alone: its measured share of time-sensitive questions
        assert event["kind"] == "present"
        expected = either * live.cue_precision["present"]
        assert event["confidence"] == part["confidence"] == pytest.approx(expected, abs=1e-3)
        assert part["confidence"] < either and part["route"] == "web"
    # the model alone: its own probability
    outcome = await svc.search("who won the last world cup", explain=True, dry_run=True)
    (event,) = steps(outcome.chain, "time_sensitive")
    assert event["kind"] == "model"
    expected = _either_confidence(outcome.chain) * event["probability"]
    assert outcome.body["results"][0]["confidence"] == event["confidence"]
    assert event["confidence"] == pytest.approx(expected, abs=1e-3)
    # an untouched part keeps the stage's own
    plain = await svc.search("who wrote Romeo and Juliet", explain=True, dry_run=True)
    stated = _stage_confidence(plain.chain)
    assert plain.body["results"][0]["confidence"] == pytest.approx(stated, abs=1e-4)


async def test_a_part_sent_to_the_snapshot_states_the_model_s_fixed_reading(build: Build) -> None:
    question = "what did critics say about citizen kane when it came out"
    reviews = {"web": ["what did the critics write about citizen kane on its release"]}
    svc = await build(LIVE, semantic={"enabled": True, "top_k": 3, "exemplars": reviews})
    outcome = await svc.search(question, explain=True, dry_run=True)
    (event,) = steps(outcome.chain, "time_stable")
    expected = _either_confidence(outcome.chain) * (1 - event["probability"])
    assert event["confidence"] == outcome.body["results"][0]["confidence"]
    assert event["confidence"] == pytest.approx(expected, abs=1e-3)


async def test_with_no_live_source_the_part_keeps_the_stage_s_confidence(demo_zim: Path) -> None:
    (outcome,) = await _with_kiwix_alone(demo_zim, EVEREST, dry_run=True)
    (event,) = steps(outcome.chain, "time_sensitive")
    assert event["to_route"] == "kiwix" and "confidence" not in event
    stated = _stage_confidence(outcome.chain)
    assert outcome.body["results"][0]["confidence"] == pytest.approx(stated, abs=1e-4)


PREMIER = "who is the prime minister of italy"


async def test_a_question_the_stages_could_not_place_is_placed_by_time(build: Build) -> None:
    """The semantic stage declines between kiwix and web; sure of the pair, the world
    stage reads the answer as changing with time and sends it to web, kiwix after it."""
    svc = await build(LIVE)
    outcome = await svc.search(PREMIER, explain=True, dry_run=True)
    (part,) = outcome.body["results"]
    assert (part["route"], part["stage"]) == ("web", "intent_world")
    (semantic,) = steps(outcome.chain, "intent_semantic")
    assert semantic["outcome"] == "declined"
    assert {"kiwix", "web"} <= {c["route"] for c in semantic["candidates"]}
    (world,) = steps(outcome.chain, "intent_world")
    assert world["time_sensitive"] is True and world["decision"] == "web"
    pair = sum(c["confidence"] for c in semantic["candidates"] if c["route"] in ("kiwix", "web"))
    assert world["world"] == pytest.approx(pair, abs=1e-3)
    assert svc.router.resolver.min_confidence <= world["confidence"] <= world["world"]
    assert part["confidence"] == world["confidence"]
    assert not steps(outcome.chain, "intent_default") and not steps(outcome.chain, "time_sensitive")
    (planned,) = steps(outcome.chain, "planned")
    assert planned["sources"][:2] == ["web", "kiwix"]
    assert any("answer changes with time" in line for line in narrative(outcome.chain))


async def test_a_phrase_typed_as_into_a_search_box_is_placed_by_time_too(build: Build) -> None:
    """No question word ("2015 national book award winners"), nothing of the asker's: the
    semantic stage declines between kiwix and web, sure of the pair, and the world stage
    reads it as a fixed fact, as it would the question."""
    svc = await build(LIVE)
    outcome = await svc.search("2015 national book award winners", explain=True, dry_run=True)
    (part,) = outcome.body["results"]
    assert (part["route"], part["stage"]) == ("kiwix", "intent_world")
    (semantic,) = steps(outcome.chain, "intent_semantic")
    assert semantic["outcome"] == "declined"
    (world,) = steps(outcome.chain, "intent_world")
    assert world["time_sensitive"] is False and world["decision"] == "kiwix"
    assert not steps(outcome.chain, "intent_default")


async def test_without_a_web_route_nothing_is_placed_by_time(demo_zim: Path) -> None:
    (outcome,) = await _with_kiwix_alone(demo_zim, PREMIER, dry_run=True)
    assert outcome.body["results"][0]["route"] == "kiwix"
    assert not steps(outcome.chain, "intent_world")


async def test_time_sensitivity_switched_off_switches_the_world_stage_off(build: Build) -> None:
    svc = await build(LIVE, time_sensitive={"enabled": False})
    outcome = await svc.search(PREMIER, explain=True, dry_run=True)
    assert outcome.body["results"][0]["stage"] == "intent_default"
    assert not steps(outcome.chain, "intent_world")


def _llm(base_url: str) -> dict[str, Any]:
    return {"base_url": base_url, "model": "router-test", "timeout_s": 2, "bias_check": False}


async def test_the_llm_is_asked_before_the_world_stage(build: Build) -> None:
    """The LLM comes after the semantic stage and before the world stage: when it answers
    it decides; when it fails the world stage still places the part."""
    with ChatServer() as llm:
        llm.reply = '{"source": "kiwix"}'
        svc = await build(LIVE, llm=_llm(llm.base_url))
        decided = await svc.search(PREMIER, explain=True, dry_run=True)
    assert [s["step"] for s in decided.chain if s["step"].startswith("intent_")] == [
        "intent_semantic",
        "intent_llm",
    ]
    assert decided.body["results"][0]["stage"] == "intent_llm"
    failing = await build(LIVE, llm=_llm(closed_port_url() + "/v1"))
    outcome = await failing.search(PREMIER, explain=True, dry_run=True)
    intents = [s["step"] for s in outcome.chain if s["step"].startswith("intent_")]
    assert intents == ["intent_semantic", "intent_world"]
    assert steps(outcome.chain, "llm_error")
    assert outcome.body["results"][0]["stage"] == "intent_world"
