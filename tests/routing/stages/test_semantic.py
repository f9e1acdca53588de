"""The semantic stage with the real bundled MiniLM (loaded once for the whole process)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from routing.chain.events import record
from routing.stages.embedder import load_embedder
from routing.stages.semantic import SemanticStage
from search.config import Config, parse_config
from search.service import Service
from tests.support.app import assert_contract_event
from tests.support.chains import only, route
from tests.support.chat_server import ChatServer

EXEMPLARS = {
    "forecast": ["will it rain tomorrow", "what's the weather like this weekend"],
    "ha": ["turn on the lights", "set the thermostat to 21 degrees"],
    "kiwix": ["who was albert einstein", "what does ubiquitous mean"],
    "web": ["latest news headlines", "stock price of apple"],
}
NONE = ["set an alarm for 7 am", "tell me a joke", "play some music"]


def config(
    *,
    llm: str = "",
    reuse: float = 0.8,
    min_confidence: float | None = None,
) -> Config:
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "min_confidence": min_confidence,
                "shipped_routes": False,  # only the exemplars above
                "semantic": {
                    "exemplars": EXEMPLARS,
                    "none_exemplars": NONE,
                    "reuse_threshold": reuse,
                },
                "llm": {"base_url": llm, "model": "m", "timeout_s": 2, "bias_check": False},
            },
            "sources": {name: {"type": "scripted"} for name in EXEMPLARS},
            "trace": {"enabled": False},
        }
    )


@pytest.fixture(scope="module", autouse=True)
def _model() -> None:
    load_embedder()  # once for the module (and the process): ~10 s on a cold start


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    svc = Service(config())
    await svc.start(sources=False)
    yield svc
    await svc.aclose()


def semantic_stage(service: Service) -> SemanticStage:
    stage = service.resolver.stage("intent_semantic")
    assert isinstance(stage, SemanticStage)
    return stage


async def test_a_hit_names_what_it_matched(service: Service) -> None:
    outcome = await route(service, "is it going to rain tomorrow?")
    assert [(r.route, r.stage) for r in outcome.results] == [("forecast", "intent_semantic")]
    event = only(outcome, "intent_semantic")
    assert event["decision"] == "forecast" and event["matched"] is True
    assert event["matched_query"] == "will it rain tomorrow"
    assert 0.5 <= event["similarity"] <= 1.0
    # It decided because its calibrated confidence cleared routing.min_confidence.
    assert event["threshold"] == semantic_stage(service).min_confidence
    assert event["threshold"] <= event["confidence"] <= 1.0
    top, *others = event["candidates"]
    classifier = top.pop("classifier")  # the exemplar classifier's probability
    assert top == {
        "route": "forecast",
        "confidence": event["confidence"],
        "margin": 0.0,
        "matched": "will it rain tomorrow",
        "similarity": event["similarity"],
    }
    assert 0.0 < classifier <= 1.0
    assert "classifier_prior" not in event  # routes written from scratch: no shipped prior
    assert len(others) == 2 and {c["route"] for c in others} <= {*EXEMPLARS, "none"}
    for earlier, later in zip(event["candidates"], others, strict=False):
        assert earlier["confidence"] >= later["confidence"]
    for candidate in others:  # "why not ha?": how far each is behind the winner
        assert candidate["margin"] == round(top["confidence"] - candidate["confidence"], 4)
    assert sum(c["confidence"] for c in event["candidates"]) <= 1.0 + 1e-3


async def test_a_repeated_query_is_answered_by_the_decision_cache(service: Service) -> None:
    await route(service, "is it going to rain tomorrow?")
    again = await route(service, "Is it going to rain tomorrow")
    assert [(r.route, r.stage) for r in again.results] == [("forecast", "intent_cached")]
    assert only(again, "intent_cached")["origin"] == "intent_semantic"


async def test_a_cached_decision_shows_what_it_beat(service: Service) -> None:
    """The cache answers with the semantic decision's confidence and its candidates, not
    the winner alone."""
    first = await route(service, "is it going to rain tomorrow?")
    again = await route(service, "Is it going to rain tomorrow")
    decided, cached = only(first, "intent_semantic"), only(again, "intent_cached")
    assert cached["confidence"] == decided["confidence"]
    assert len(decided["candidates"]) == 3
    assert [(c["route"], c["confidence"], c["margin"]) for c in cached["candidates"]] == [
        (c["route"], c["confidence"], c["margin"]) for c in decided["candidates"]
    ]


async def test_a_miss_lists_the_candidates_and_defaults(service: Service) -> None:
    outcome = await route(service, "octopus hearts anatomy")  # near no exemplar here
    assert [(r.route, r.stage) for r in outcome.results] == [("kiwix", "intent_default")]
    event = only(outcome, "intent_semantic")
    assert event["decision"] is None and event["matched"] is False
    assert event["outcome"] == "declined" and len(event["candidates"]) == 3
    threshold = semantic_stage(service).min_confidence
    assert event["confidence"] < threshold
    said, shown_threshold = event["declined"].removeprefix("semantic ").split(" < ")
    assert float(said) == pytest.approx(event["confidence"], abs=5e-3)
    assert float(shown_threshold) == threshold and float(said) < threshold
    default = only(outcome, "intent_default")
    assert default["reason"] == "low_confidence"
    # the default route first, at the confidence the declining stage gave it; the rest
    # as the stage ranked them
    first, *others = default["candidates"]
    assert (first["route"], first["confidence"]) == ("kiwix", default["confidence"])
    ranked = [(c["route"], c["confidence"]) for c in event["candidates"] if c["route"] != "kiwix"]
    assert [(c["route"], c["confidence"]) for c in others] == ranked[: len(others)]


async def test_what_no_source_serves_is_answered_as_unserved(service: Service) -> None:
    outcome = await route(service, "please set an alarm for 6 am")
    assert [(r.route, r.status) for r in outcome.results] == [(None, "unserved")]
    assert only(outcome, "intent_semantic")["outcome"] == "unserved"
    default = only(outcome, "intent_default")
    assert default["reason"] == "unserved" and default["decision"] is None
    assert default["nearest"] == "set an alarm for 7 am" and default["similarity"] >= 0.5


async def test_a_sure_none_without_a_none_exemplar_nearby_still_ends_unserved(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict is the fitted confidence's, not the nearest exemplar's: when `none`
    wins with no `none` exemplar among the candidates, the event says unserved and the
    part ends so (no source asked), without a `nearest` it does not have."""
    stage = semantic_stage(service)
    nearest, judged = stage.candidates, stage._confidence
    seen: dict[str, Any] = {}

    def without_none(vector: np.ndarray, text: str) -> Any:
        ranked, reused, spread = nearest(vector, text)
        seen["ranked"] = ranked
        return [c for c in ranked if c.route != "none"], reused, spread

    def as_fitted(query: str, ranked: Any, *rest: Any) -> Any:
        return judged(query, seen["ranked"], *rest)  # the verdict on every candidate

    monkeypatch.setattr(stage, "candidates", without_none)
    monkeypatch.setattr(stage, "_confidence", as_fitted)
    outcome = await route(service, "please set an alarm for 6 am")
    event = only(outcome, "intent_semantic")
    assert event["outcome"] == "unserved" and event["matched_query"] is None
    assert [(r.route, r.status) for r in outcome.results] == [(None, "unserved")]
    default = only(outcome, "intent_default")
    assert (default["decision"], default["reason"]) == (None, "unserved")
    assert "nearest" not in default


async def test_min_confidence_decides_who_decides() -> None:
    for threshold, expected in (
        (0.3, ("forecast", "intent_semantic")),
        (1.0, ("kiwix", "intent_default")),
    ):
        svc = Service(config(min_confidence=threshold))
        await svc.start(sources=False)
        try:
            outcome = await route(svc, "is it going to rain tomorrow?")
        finally:
            await svc.aclose()
        assert [(r.route, r.stage) for r in outcome.results] == [expected]
        event = only(outcome, "intent_semantic")
        assert event["threshold"] == threshold
        assert event["candidates"][0]["route"] == "forecast"
        if expected[1] == "intent_default":
            said, below = event["declined"].removeprefix("semantic ").split(" < ")
            assert float(said) < float(below) == 1.0
            assert only(outcome, "intent_default")["reason"] == "low_confidence"


async def test_the_model_is_loaded_once_and_exemplars_precomputed(service: Service) -> None:
    other = Service(config())
    await other.start(sources=False)
    try:
        first, second = semantic_stage(service), semantic_stage(other)
        assert first.embedder is second.embedder is load_embedder()
        index = first.index
        assert index is not None
        count = sum(len(v) for v in EXEMPLARS.values()) + len(NONE)
        assert index.matrix.shape == (count, 384)
        assert np.allclose(np.linalg.norm(index.matrix, axis=1), 1.0, atol=1e-4)
    finally:
        await other.aclose()


async def test_encoding_runs_in_a_worker_thread_with_the_request_context(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    embedder = semantic_stage(service).embedder
    assert embedder is not None
    original = embedder.encode_one
    seen: list[tuple[str, int]] = []

    def spy(text: str) -> np.ndarray:
        vector = original(text)
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        record("encoded_here", text=text)
        return vector

    monkeypatch.setattr(embedder, "encode_one", spy)
    outcome = await route(service, "what's the weather like this weekend")
    [(thread, threads)] = seen
    assert thread != threading.main_thread().name and threads == 1
    encoded = only(outcome, "encoded_here")
    assert encoded["part"] == only(outcome, "intent_semantic")["part"] == "0"


async def test_llm_decisions_are_reused_for_paraphrases() -> None:
    with ChatServer(reply='{"source": "web"}') as server:
        svc = Service(config(llm=server.base_url, reuse=0.8))
        await svc.start(sources=False)
        try:
            first = await route(svc, "octopus hearts anatomy")
            second = await route(svc, "the anatomy of octopus hearts")
        finally:
            await svc.aclose()
    assert [(r.route, r.stage) for r in first.results] == [("web", "intent_llm")]
    assert [(r.route, r.stage) for r in second.results] == [("web", "intent_semantic")]
    event = only(second, "intent_semantic")
    assert event["origin"] == "llm" and event["matched_query"] == "octopus hearts anatomy"
    assert event["similarity"] >= 0.8
    assert len(server.bodies) == 1


async def test_an_llm_that_names_no_source_is_the_unserved_verdict() -> None:
    """After the semantic stage declined, the LLM's "none" ends the part unserved with the
    LLM's own statement, not the declined stage's confidence and candidates."""
    with ChatServer(reply='{"source": "none"}') as server:
        server.logprobs_mode = "absent"  # a stated 0.6, as from a server without them
        svc = Service(config(llm=server.base_url))
        await svc.start(sources=False)
        try:
            outcome = await route(svc, "octopus hearts anatomy")
        finally:
            await svc.aclose()
    assert only(outcome, "intent_semantic")["outcome"] == "declined"
    llm = only(outcome, "intent_llm")
    assert llm["outcome"] == "no_source" and llm["candidates"][0]["route"] == "none"
    default = only(outcome, "intent_default")
    assert (default["decision"], default["reason"]) == (None, "unserved")
    assert default["confidence"] == llm["confidence"] == 0.6
    assert default["candidates"] == llm["candidates"]
    [part] = outcome.results
    assert (part.route, part.status, part.confidence) == (None, "unserved", 0.6)


async def test_the_remembered_llm_decision_is_no_candidate() -> None:
    """An earlier LLM decision not near enough to reuse is shown as `remembered`, beside
    the candidates: every candidate has a confidence and a margin, each route once."""
    with ChatServer(reply='{"source": "web"}') as server:
        svc = Service(config(llm=server.base_url, reuse=0.99))
        await svc.start(sources=False)
        try:
            await route(svc, "octopus hearts anatomy")
            outcome = await route(svc, "the anatomy of octopus hearts")
        finally:
            await svc.aclose()
    event = only(outcome, "intent_semantic")
    candidates = event["candidates"]
    assert all({"confidence", "margin"} <= set(c) for c in candidates), candidates
    assert all("origin" not in c for c in candidates), candidates
    routes = [c["route"] for c in candidates]
    assert len(routes) == len(set(routes)) and candidates[0]["margin"] == 0.0
    remembered = event["remembered"]
    assert remembered["route"] == "web" and remembered["matched"] == "octopus hearts anatomy"
    assert remembered["similarity"] < remembered["reuse_threshold"] == 0.99
    for found in outcome.chain:
        assert_contract_event(found)


def test_importing_the_router_does_not_load_torch() -> None:
    code = (
        "import sys, routing.stages.build, search.service; "
        "sys.exit(1 if 'torch' in sys.modules or 'sentence_transformers' in sys.modules "
        "else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


async def test_a_stage_that_was_not_started_passes() -> None:
    svc = Service(config())  # never started
    outcome = await route(svc, "will it rain tomorrow")
    assert [(r.route, r.stage) for r in outcome.results] == [("kiwix", "intent_default")]
    assert [e["step"] for e in outcome.chain if e["step"].startswith("intent_")] == [
        "intent_default"
    ]


def test_exemplar_vectors_are_cached_on_disk(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = load_embedder()
    texts = ["a first exemplar for the cache test", "and a second one"]
    monkeypatch.setenv("SEARCH_EMBEDDING_CACHE", str(tmp_path))
    first = embedder.encode_exemplars(texts)
    [stored] = list(tmp_path.glob("exemplars-*.npy"))
    assert np.array_equal(np.load(stored), first)

    def no_model(_: object) -> np.ndarray:
        raise AssertionError("the cached vectors should have been used")

    monkeypatch.setattr(embedder, "encode_memo", no_model)
    assert np.array_equal(embedder.encode_exemplars(texts), first)
    monkeypatch.undo()
    monkeypatch.setenv("SEARCH_EMBEDDING_CACHE", "off")
    other = tmp_path / "unused"
    assert np.allclose(embedder.encode_exemplars(texts), first, atol=1e-6)
    assert not other.exists() and len(list(tmp_path.glob("exemplars-*.npy"))) == 1


async def test_a_query_of_words_nobody_knows_is_never_decided(service: Service) -> None:
    outcome = await route(service, "blorp zibble quux")
    event = only(outcome, "intent_semantic")
    assert event["decision"] is None and event["outcome"] == "declined"
    assert event["declined"] == "semantic: none of its 3 words is a word the model knows"
    assert event["candidates"]  # what it would have said is still shown
    assert [(r.route, r.stage) for r in outcome.results] == [("kiwix", "intent_default")]
    # one known word is enough to be judged on the confidence as usual
    known = only(await route(service, "blorp rain tomorrow"), "intent_semantic")
    assert "declined" not in known or "words" not in known["declined"]
