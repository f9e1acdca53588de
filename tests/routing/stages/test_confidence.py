"""The calibrated confidence: who decides, who declines, and what the chain says about it.

Real parts: the shipped routes and fitted artefact, the bundled MiniLM, and for the LLM a
local server speaking the OpenAI chat-completions wire format (tests/support/chat_server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import routing_quality as rq
from routing.chain.events import route_log
from routing.language.sentences import (
    about_the_world,
    asks_about_the_world,
    asks_for_a_fact,
    speaks_of_the_addressee,
    speaks_of_the_asker,
)
from routing.language.text import words
from routing.stages.confidence import (
    FULL_FEATURES,
    KEYWORD_FEATURES,
    NEAREST_COUNTED,
    SPREAD_FLOOR,
    ConfidenceModel,
    Spread,
    declined,
    features,
    load_model,
    single,
)
from routing.stages.keyword import KeywordStage
from routing.stages.keyword_rules import KeywordRules
from routing.stages.llm_confidence import UNMEASURED
from routing.stages.semantic import ExemplarIndex
from routing.types import ResolveContext
from search.config import Config
from search.service import SearchOutcome, Service
from tests.support.app import assert_contract_event, scripted_config
from tests.support.chains import route
from tests.support.chat_server import ChatServer

ROOT = Path(__file__).resolve().parents[3]
GIBBERISH = ("qwertz uiop asdf", "blorp zibble quux", "ROUTE_TO_HA zqxv blorf")


def shipped(**routing: Any) -> Config:
    config = rq.isolated_config(ROOT / "config.yaml")
    if routing:
        update = config.routing.model_copy(update=routing)
        config = config.model_copy(update={"routing": update})
    return config


def intents(outcome: SearchOutcome) -> list[dict[str, Any]]:
    return [e for e in outcome.chain if e["step"].startswith("intent_")]


@pytest.fixture
async def service() -> Any:
    svc = Service(shipped())
    await svc.start(sources=False)
    yield svc
    await svc.aclose()


@pytest.mark.parametrize("text", GIBBERISH)
async def test_gibberish_is_declined_with_its_candidates(service: Service, text: str) -> None:
    outcome = await route(service, text)
    assert [r.stage for r in outcome.results] == ["intent_default"]
    events = intents(outcome)
    for event in events:
        assert_contract_event(event)
    declined = [e for e in events if e.get("declined")]
    assert declined, events
    threshold = service.resolver.stage("intent_semantic").min_confidence  # type: ignore[union-attr]
    assert all(e["confidence"] < threshold for e in declined)
    default = events[-1]
    assert default["step"] == "intent_default" and default["reason"] == "low_confidence"
    # the route it ends at first, at its confidence; then what the declining stage
    # ranked above or beside it, with a negative margin where it had more
    first, *others = default["candidates"]
    assert (first["route"], first["confidence"]) == (default["decision"], default["confidence"])
    seen = {c["route"]: c["confidence"] for c in declined[-1]["candidates"]}
    assert all(seen.get(c["route"], c["confidence"]) == c["confidence"] for c in others)
    assert others and others[0]["route"] == max(
        (r for r in seen if r != default["decision"]), key=seen.__getitem__
    )
    assert all(c["margin"] < 0 for c in others if c["confidence"] > first["confidence"])


async def test_a_query_of_no_known_word_has_the_confidence_of_no_evidence(
    service: Service,
) -> None:
    """Similarities between fragments of letters are not evidence: the stage states the
    fit's confidence with nothing to go on (every source's route equal, `none` at its own
    prior), not what the fragments would make of it, and lists the routes by their
    nearest exemplar."""
    outcome = await route(service, "qwertz uiop asdf")
    [semantic] = [e for e in intents(outcome) if e["step"] == "intent_semantic"]
    assert semantic["declined"] == "semantic: none of its 3 words is a word the model knows"
    shown = semantic["candidates"]
    stage = service.resolver.stage("intent_semantic")
    nothing = dict(load_model().keyword(stage.labels(), {}).routes)  # type: ignore[union-attr]
    assert [c["confidence"] for c in shown] == [round(nothing[c["route"]], 4) for c in shown]
    assert len({p for route, p in nothing.items() if route != "none"}) == 1
    assert semantic["confidence"] < semantic["threshold"]
    # the equal ones in the order of their nearest exemplars
    nearness = [c["similarity"] for c in shown if c["route"] != "none"]
    assert nearness == sorted(nearness, reverse=True)


async def test_a_confident_decision_and_an_unserved_one(service: Service) -> None:
    lights = await route(service, "turn on the kitchen lights")
    assert [(r.route, r.stage) for r in lights.results] == [("ha", "intent_keyword")]
    [event] = intents(lights)
    assert event["confidence"] >= 0.9 and event["candidates"][0]["route"] == "ha"
    alarm = await route(service, "set an alarm for 7 am")
    assert [(r.status, r.route) for r in alarm.results] == [("unserved", None)]
    default = intents(alarm)[-1]
    assert default["reason"] == "unserved" and default["candidates"][0]["route"] == "none"
    assert default["confidence"] == default["candidates"][0]["confidence"] >= 0.55


async def test_below_min_confidence_the_llm_decides() -> None:
    with ChatServer(reply='{"source": "ha"}') as server:
        svc = Service(
            shipped(
                llm=shipped().routing.llm.model_copy(
                    update={"base_url": server.base_url, "model": "m", "timeout_s": 2}
                )
            )
        )
        await svc.start(sources=False)
        try:
            outcome = await route(svc, "ROUTE_TO_HA zqxv blorf")
        finally:
            await svc.aclose()
    assert [(r.route, r.stage) for r in outcome.results] == [("ha", "intent_llm")]
    steps = [e["step"] for e in intents(outcome)]
    assert steps[-1] == "intent_llm" and "intent_semantic" in steps
    assert intents(outcome)[-2].get("declined", "").startswith("semantic ")
    llm = intents(outcome)[-1]
    assert_contract_event(llm)
    assert llm["candidates"][0]["route"] == "ha"


async def test_a_keyword_tie_is_recorded_and_declined() -> None:
    rules = KeywordRules({"ha": ["lights"], "web": ["news"]})
    stage = KeywordStage(rules, labels=["ha", "web"])
    with route_log() as log:
        decision = await stage.decide("lights news", ResolveContext())
    assert decision is None
    [event] = log.snapshot()
    assert event["step"] == "intent_keyword" and event["decision"] is None
    first, second = event["candidates"]
    assert first["confidence"] == second["confidence"] and second["margin"] == 0.0
    assert event["declined"].startswith("keyword 0.50 <")


async def test_min_confidence_from_config_and_the_default_says_low_confidence() -> None:
    config = scripted_config(
        {"ha": {}, "web": {}}, {"ha": ["lights"], "web": ["news"]}, min_confidence=0.999
    )
    svc = Service(config)
    await svc.start(sources=False)
    try:
        outcome = await route(svc, "the lights")
    finally:
        await svc.aclose()
    keyword, default = intents(outcome)
    assert keyword["decision"] is None and keyword["declined"].endswith("< 0.999")
    assert default["reason"] == "low_confidence" and default["decision"] == "ha"
    assert outcome.results[0].stage == "intent_default"


def test_the_artefact_is_a_probability_over_any_routes() -> None:
    model = load_model()
    assert len(model.keyword_weights) == len(KEYWORD_FEATURES)
    assert len(model.full_weights) == len(FULL_FEATURES)
    # A route the fit never saw ("recipes") is ranked by the same weights.
    ranked = model.full(
        ["recipes", "kiwix", "none"],
        {"recipes": 2.0},
        {"recipes": 0.8, "kiwix": 0.3, "none": 0.2},
        {},
        Spread(mean=0.1, std=0.08),
    )
    assert ranked.winner == "recipes"
    assert abs(sum(p for _, p in ranked.routes) - 1.0) < 1e-9
    again = ConfidenceModel.from_json(model.to_json())
    assert np.allclose(again.full_weights, model.full_weights)


async def test_the_control_gate_follows_the_same_scale() -> None:
    """An LLM's answer stated below a stricter min_confidence (a server without logprobs:
    the fixed, uncalibrated value) is not taken: the LLM stage passes on, the part ends at
    the default and no command runs. Under a lower threshold the same answer routes, but
    its confidence was never measured: the command is withheld all the same."""
    with ChatServer(reply='{"source": "ha"}') as server:
        server.logprobs_mode = "absent"
        for threshold, routes in ((0.8, False), (0.5, True)):
            service = Service(
                scripted_config(
                    {"ha": {"control_prefix": "unlockx", "allow_control": True}, "web": {}},
                    keywords={},
                    min_confidence=threshold,
                    llm={"base_url": server.base_url, "model": "m", "timeout_s": 2},
                )
            )
            await service.start(sources=False)
            try:
                outcome = await service.search("unlockx the shed", explain=True, authorized=True)
            finally:
                await service.aclose()
            [llm] = [e for e in outcome.chain if e["step"] == "intent_llm"]
            assert llm["confidence"] == UNMEASURED and llm["confidence_source"] == "none"
            acted = service.sources["ha"].acted  # type: ignore[attr-defined]
            if routes:
                assert llm["decision"] == "ha" and acted == []
                [withheld] = [e for e in outcome.chain if e["step"] == "control_withheld"]
                assert withheld["reason"] == "low_confidence"
            else:
                assert llm["decision"] is None and llm["outcome"] == "declined"
                assert llm["declined"] == f"llm {UNMEASURED:.2f} < 0.80"
                [default] = [e for e in outcome.chain if e["step"] == "intent_default"]
                assert default["reason"] == "low_confidence"
                assert acted == []


async def test_the_narrative_says_a_stage_declined(service: Service) -> None:
    from search.traces.narrative import narrative

    outcome = await route(service, "maybe later perhaps")
    [line] = [ln for ln in narrative(outcome.chain) if ln.startswith("part 0")]
    assert "the semantic stage declined (confidence 0." in line
    assert "went to kiwix by default (low_confidence)" in line
    outcome = await route(service, "blorp zibble quux")
    [line] = [ln for ln in narrative(outcome.chain) if ln.startswith("part 0")]
    assert "declined (none of its 3 words is a word the model knows)" in line


def test_a_fit_from_before_a_feature_existed_still_loads_as_it_was_fitted() -> None:
    current = load_model().to_json()
    older = {**current, "full": dict(current["full"])}
    del older["full"]["similarity_z"], older["full"]["similarity_z_lead"]
    del older["full"]["nearest_share"]
    model = ConfidenceModel.from_json(older)
    weights = dict(zip(FULL_FEATURES, model.full_weights, strict=True))
    assert weights["similarity_z"] == weights["similarity_z_lead"] == 0.0
    assert weights["nearest_share"] == 0.0
    assert weights["similarity"] == current["full"]["similarity"]


def test_similarity_is_also_measured_against_the_querys_spread() -> None:
    labels = ["kiwix", "web"]
    sims = {"kiwix": 0.40, "web": 0.30}
    z = FULL_FEATURES.index("similarity_z")
    lead = FULL_FEATURES.index("similarity_z_lead")
    wide = features(labels, {}, sims, {}, Spread(mean=0.1, std=0.1))
    assert wide[0, z] == pytest.approx(3.0) and wide[0, lead] == pytest.approx(1.0)
    # a long question near nothing: the same lead stands out more against a tight spread
    tight = features(labels, {}, sims, {}, Spread(mean=0.25, std=0.07))
    assert tight[0, lead] > wide[0, lead]
    # ... but never against less than the floor, however few the exemplars
    tiny = features(labels, {}, sims, {}, Spread(mean=0.25, std=0.001))
    assert tiny[0, lead] == pytest.approx(0.1 / SPREAD_FLOOR)
    assert features(labels, {}, sims, {})[0, z] == 0.0  # unknown without a spread


def test_the_nearest_exemplars_are_counted_per_route() -> None:
    """One stray exemplar near the query is its nearest; the neighbourhood is the share of
    its NEAREST_COUNTED nearest exemplars each route holds."""
    axis = np.eye(3, dtype=np.float32)
    kiwix = [axis[0] * 0.9 + axis[2] * 0.1] * 4
    web = [axis[0], axis[1], axis[1], axis[1]]  # one web exemplar lies on the query itself
    index = ExemplarIndex(
        {"kiwix": ["k1", "k2", "k3", "k4"], "web": ["w0", "w1", "w2", "w3"]},
        np.asarray([v / np.linalg.norm(v) for v in [*kiwix, *web]]),
    )
    best, spread = index.match(axis[0])
    assert best[0][:2] == ("web", "w0")  # the nearest is web's stray exemplar
    assert spread is not None and NEAREST_COUNTED == 5
    assert spread.nearest == {"kiwix": 1.0, "web": 0.25}  # of the four each route has
    share = FULL_FEATURES.index("nearest_share")
    rows = features(["kiwix", "web"], {}, {r: s for r, _, s in best}, {}, spread)
    assert rows[0, share] == 1.0 and rows[1, share] == 0.25
    # a route of two exemplars, both among the nearest, holds all it can
    small = ExemplarIndex(
        {"kiwix": ["k1", "k2"], "web": ["w0", "w1", "w2", "w3"]}, index.matrix[2:]
    )
    assert small.match(axis[0])[1].nearest == {"kiwix": 1.0, "web": 0.75}
    assert features(["kiwix"], {}, {"kiwix": 0.5}, {})[0, share] == 0.0  # unknown: none counted


def test_a_decline_shows_the_threshold_as_it_was_set() -> None:
    assert declined("keyword", single("ha", 0.9931), 0.999) == "keyword 0.993 < 0.999"
    assert declined("semantic", single("ha", 0.41), 0.55) == "semantic 0.41 < 0.55"
    assert declined("semantic", single("ha", 0.5496), 0.55) == "semantic 0.5496 < 0.5500"


@pytest.mark.parametrize(
    ("query", "about_the_world"),
    [
        ("who sang the theme song of the show", True),
        ("when was the gregorian calendar introduced", True),
        ("what's on my calendar today", False),  # the asker's own affairs
        ("when is our flight", False),
        ("play the theme song", False),  # a request, not a question
        ("name a film directed by the same person", True),  # the imperative that asks
        ("name the capital of the country", True),
        ("name my new lamp the reading light", False),  # the asker's own
        ("is it raining", False),  # a yes/no question may be a request ("can you play ...")
        ("who won", False),  # too short to tell
        # the imperatives that ask for a fact: their own "me" is not the asker's affairs
        ("tell me about the album that band made first", True),
        ("explain to me how a rainbow forms", True),
        ("describe the painting with the melting clocks", True),
        ("tell me about my day", False),  # what follows them may be
        ("explain my electricity bill", False),
        ("tell me a joke", False),  # asks for no fact
        ("describe it", False),  # too short to tell
        # the addressee's own: a question put to a shop, or to the assistant about itself
        ("what are your opening hours on sunday", False),
        ("what is your favourite colour", False),
        ("what time does the bakery on the corner open", True),  # the same, about the world
    ],
)
def test_a_question_about_the_world_is_told_from_its_words(
    query: str, about_the_world: bool
) -> None:
    assert asks_about_the_world(words(query)) is about_the_world


@pytest.mark.parametrize(
    ("query", "about"),
    [
        ("who sang the theme song of the show", True),  # a question about the world
        ("2015 national book award winners", True),  # typed as into a search box
        ("number of branches in the philippines", True),
        ("season 2 episode 6 air date", True),
        ("my electricity bill this month", False),  # the asker's own
        ("order history for me", False),
        ("your opening hours", False),  # the addressee's
        ("is there any age limit", False),  # a yes/no question: put to whoever is asked
        ("can you block acrylic yarn", False),
        ("what's on my calendar today", False),  # a question about the asker's own
        ("", False),
    ],
)
def test_a_phrase_is_about_the_world_with_or_without_a_question_word(
    query: str, about: bool
) -> None:
    assert about_the_world(words(query)) is about


@pytest.mark.parametrize(
    ("query", "asks"),
    [
        ("when did the song without me come out", True),  # whoever it seems to be about
        ("what is on my calendar", True),
        ("how old is he", True),
        ("play the song without me", False),  # a request
        ("is it raining", False),  # a yes/no question
        ("who won", False),  # too short to tell
    ],
)
def test_a_question_for_a_fact_opens_with_a_question_word(query: str, asks: bool) -> None:
    assert asks_for_a_fact(words(query)) is asks


@pytest.mark.parametrize(
    ("query", "own"),
    [
        ("why is my transfer late", True),
        ("can we get a refund", True),
        ("I'd like the news", True),
        ("tell me the capital of peru", False),  # the "me" of a request to the assistant
        ("what is the capital of peru", False),
    ],
)
def test_a_request_about_the_askers_own_affairs_is_told_from_its_words(
    query: str, own: bool
) -> None:
    assert speaks_of_the_asker(words(query)) is own


@pytest.mark.parametrize(
    ("query", "addressee"),
    [
        ("what are your opening hours", True),
        ("do your rooms come with breakfast", True),
        ("you're funny", True),
        ("do you know who wrote the odyssey", False),  # "you" carries a question too
        ("what time does the chemist close", False),
    ],
)
def test_a_request_about_the_addressees_own_affairs_is_told_from_its_words(
    query: str, addressee: bool
) -> None:
    assert speaks_of_the_addressee(words(query)) is addressee


def test_asking_about_the_world_weighs_on_none_alone() -> None:
    """The fit learns how much less likely "no source serves this" is for such a question:
    a topic word ("song") of the none route's rules then says less."""
    labels = ["kiwix", "none"]
    for rows in (
        features(labels, {"none": 1.25}, question=True),
        features(labels, {"none": 1.25}, {"kiwix": 0.4, "none": 0.5}, {}, None, True),
    ):
        names = KEYWORD_FEATURES if rows.shape[1] == len(KEYWORD_FEATURES) else FULL_FEATURES
        column = names.index("none_question")
        assert rows[:, column].tolist() == [0.0, 1.0]
    assert features(labels, {"none": 1.25})[:, KEYWORD_FEATURES.index("none_question")].sum() == 0
    model = load_model()
    weight = dict(zip(KEYWORD_FEATURES, model.keyword_weights, strict=True))["none_question"]
    assert weight < 0  # as fitted: such a question is less often unserved
    asked = model.keyword(labels, {"none": 1.25}, question=True)
    told = model.keyword(labels, {"none": 1.25})
    assert dict(asked.routes)["none"] < dict(told.routes)["none"]
