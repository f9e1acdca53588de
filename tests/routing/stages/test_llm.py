"""The LLM stage against a loopback server speaking the chat-completions wire format.

`tests.support.chat_server.ChatServer` answers `POST /v1/chat/completions` as the OpenAI
API documents it (request validation, bearer key, `chat.completion` objects, OpenAI error
bodies); what the "model" replies is scripted per test. Each failure mode must end at
`intent_default` with the reason naming it, and the API key must never leak.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from routing.stages.llm import extract_json_object
from search.config import Config, parse_config
from search.service import Service
from tests.support.app import assert_contract_event
from tests.support.chains import only as event
from tests.support.chains import route, steps
from tests.support.chat_server import ALL_FORMATS, ChatServer
from tests.support.wire_servers import Fault, closed_port_url

KEY = "sk-test-0123456789-secret"
DESCRIPTIONS = {
    "kiwix": "Offline encyclopedia: facts and definitions.",
    "forecast": "Weather forecast.",
    "web": "Web search: news, prices, current events.",
}


def config(
    base_url: str,
    *,
    capture: bool = False,
    timeout_s: float = 2.0,
    bias_check: bool = False,
    request_deadline_s: float = 15.0,
) -> Config:
    """The bias probe is off unless a test is about it: one request per decision keeps
    the other tests' view of the wire simple."""
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "request_deadline_s": request_deadline_s,
                "shipped_routes": False,
                "keywords": {"forecast": ["weather"]},
                "semantic": {"enabled": False},
                "fusion": {"everything": ["kiwix", "web"]},
                "llm": {
                    "base_url": base_url,
                    "model": "router-test",
                    "api_key": KEY,
                    "timeout_s": timeout_s,
                    "bias_check": bias_check,
                },
            },
            "sources": {
                name: {"type": "scripted", "description": text}
                for name, text in DESCRIPTIONS.items()
            },
            "trace": {"enabled": False, "capture_prompts": capture},
        }
    )


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    with ChatServer(api_key=KEY) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _reset(server: ChatServer) -> None:
    server.clear_faults()
    server.reply = '{"source": "web"}'
    server.accepts = set(ALL_FORMATS)
    server.content_free_reply = '{"source": "none"}'
    server.refusal_status = 500
    server.bodies.clear()
    server.refused.clear()
    server.requests.clear()


@pytest.fixture
async def service(server: ChatServer) -> AsyncIterator[Service]:
    svc = Service(config(server.base_url))
    await svc.start(sources=False)
    yield svc
    await svc.aclose()


async def test_a_fresh_decision(service: Service, server: ChatServer) -> None:
    outcome = await route(service, "octopus hearts")
    [part] = outcome.results
    assert (part.route, part.stage) == ("web", "intent_llm")
    assert steps(outcome) == ["intent_llm"]
    llm = event(outcome, "intent_llm")
    assert llm["decision"] == "web" and llm["discourse_escalated"] is False
    assert llm["model"] == "router-test" and llm["elapsed_ms"] >= 0
    assert "prompt" not in llm and "raw_answer" not in llm  # capture_prompts is off
    # What went over the wire: the model, the sources with their descriptions, the query.
    [body] = server.bodies
    assert body["model"] == "router-test" and body["temperature"] == 0
    # One user message: a chat template that drops system messages still shows the routes.
    [user] = body["messages"]
    assert user["role"] == "user"
    for name, text in DESCRIPTIONS.items():
        assert f"- {name}: {text}" in user["content"]
    assert "- everything: combined results of kiwix and web" in user["content"]
    assert '"source"' in user["content"] and user["content"].endswith("octopus hearts")
    assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in json.dumps(outcome.chain)


ROUTES_AND_NONE = ["kiwix", "forecast", "web", "everything", "none"]


def constraint(body: dict[str, Any]) -> tuple[str | None, list[str] | None]:
    """The response_format type a request asked for, and the enum of its schema."""
    value = body.get("response_format")
    if value is None:
        return None, None
    schema = value["json_schema"]["schema"] if value["type"] == "json_schema" else value["schema"]
    assert schema["required"] == ["source"] and schema["additionalProperties"] is False
    return value["type"], schema["properties"]["source"]["enum"]


async def test_the_answer_is_constrained_to_the_routes(
    service: Service, server: ChatServer
) -> None:
    outcome = await route(service, "octopus hearts")
    [body] = server.bodies
    assert constraint(body) == ("json_schema", ROUTES_AND_NONE)
    assert body["response_format"]["json_schema"]["strict"] is True
    assert event(outcome, "intent_llm")["response_format"] == "json_schema"
    assert event(outcome, "intent_llm")["prompt_tokens"] == 42  # the server's own usage
    assert server.refused == []


@pytest.mark.parametrize("status", [500, 422])
async def test_a_refused_json_schema_steps_down_to_json_object_once(
    service: Service, server: ChatServer, status: int
) -> None:
    server.accepts = {"text", "json_object"}  # as llama-cpp-python's server
    server.refusal_status = status
    first = await route(service, "octopus hearts")
    assert steps(first) == ["llm_format_refused", "intent_llm"]
    refused = event(first, "llm_format_refused")
    assert (refused["response_format"], refused["status"], refused["next"]) == (
        "json_schema",
        status,
        "json_object",
    )
    assert event(first, "intent_llm")["response_format"] == "json_object"
    assert [p.route for p in first.results] == ["web"]
    # Remembered for this server: the next decision asks in the accepted form at once.
    second = await route(service, "squid eyes")
    assert steps(second) == ["intent_llm"]
    assert event(second, "intent_llm")["response_format"] == "json_object"
    assert len(server.refused) == 1
    assert [constraint(b) for b in server.bodies] == [("json_object", ROUTES_AND_NONE)] * 2


async def test_a_server_with_no_json_mode_gets_the_prompt_alone(
    service: Service, server: ChatServer
) -> None:
    server.accepts = {"text"}
    outcome = await route(service, "octopus hearts")
    assert steps(outcome) == ["llm_format_refused", "llm_format_refused", "intent_llm"]
    assert [
        (e["response_format"], e["status"])
        for e in outcome.chain
        if e["step"] == "llm_format_refused"
    ] == [("json_schema", 400), ("json_object", 400)]
    assert event(outcome, "intent_llm")["response_format"] == "prompt"
    [body] = server.bodies
    assert "response_format" not in body
    await route(service, "squid eyes")
    assert len(server.refused) == 2 and len(server.bodies) == 2


@pytest.mark.parametrize("status", [400, 422, 500])
async def test_an_error_that_does_not_name_response_format_is_a_failure(
    service: Service, server: ChatServer, status: int
) -> None:
    server.set_fault(Fault.status(status))
    outcome = await route(service, "octopus hearts")
    assert steps(outcome) == ["llm_error", "intent_default"]
    error = event(outcome, "llm_error")
    assert error["reason"] == "llm_failed" and error["response_format"] == "json_schema"
    assert len(server.bodies) == 1  # asked once: no other form was tried


async def test_the_bias_probe_is_asked_once_per_server(server: ChatServer) -> None:
    svc = Service(config(server.base_url, bias_check=True))
    await svc.start(sources=False)
    try:
        first = await route(svc, "octopus hearts")
        second = await route(svc, "squid eyes")
    finally:
        await svc.aclose()
    assert steps(first) == ["llm_bias_probe"] * 3 + ["intent_llm"]
    probes = [
        (e["probe"], e["answer"], e["response_format"])
        for e in first.chain
        if e["step"] == "llm_bias_probe"
    ]
    assert probes == [
        ("N/A", "none", "json_schema"),
        ("", "none", "json_schema"),
        ("[MASK]", "none", "json_schema"),
    ]
    assert steps(second) == ["intent_llm"]
    assert [p.route for p in first.results + second.results] == ["web", "web"]
    assert [b["messages"][-1]["content"].rsplit("\n", 1)[-1] for b in server.bodies] == [
        "Query: N/A",
        "Query: ",
        "Query: [MASK]",
        "Query: octopus hearts",
        "Query: squid eyes",
    ]


async def test_a_route_the_model_names_for_no_content_is_not_taken(
    server: ChatServer,
) -> None:
    server.content_free_reply = '{"source": "web"}'  # a model whose habit is "web"
    svc = Service(config(server.base_url, bias_check=True))
    await svc.start(sources=False)
    try:
        habit = await route(svc, "octopus hearts")
        server.reply = '{"source": "forecast"}'
        other = await route(svc, "will the lake freeze")
        server.reply = '{"source": "web"}'
        again = await route(svc, "octopus hearts")
    finally:
        await svc.aclose()
    assert [(p.route, p.stage) for p in habit.results] == [("kiwix", "intent_default")]
    assert steps(habit) == ["llm_bias_probe"] * 3 + ["llm_error", "intent_default"]
    error = event(habit, "llm_error")
    assert error["reason"] == "llm_unusable" and error["answer"] == "web"
    assert error["habits"] == ["web"]
    assert "even for a query with no content" in error["detail"]
    assert event(habit, "intent_default")["reason"] == "llm_unusable"
    # Another route is an answer that depends on the query: taken.
    assert [(p.route, p.stage) for p in other.results] == [("forecast", "intent_llm")]
    # The declined answer was not cached: asked again, declined again, no second probe.
    assert steps(again) == ["llm_error", "intent_default"]
    assert len(server.bodies) == 6


async def test_a_probe_answered_in_prose_shows_no_habit(server: ChatServer) -> None:
    server.content_free_reply = "I am not sure what you mean."
    svc = Service(config(server.base_url, bias_check=True))
    await svc.start(sources=False)
    try:
        outcome = await route(svc, "octopus hearts")
    finally:
        await svc.aclose()
    probes = [e for e in outcome.chain if e["step"] == "llm_bias_probe"]
    assert [(e["answer"], e["detail"]) for e in probes] == [
        (None, "the answer holds no JSON object")
    ] * 3
    assert [(p.route, p.stage) for p in outcome.results] == [("web", "intent_llm")]


async def test_the_probe_and_the_answer_share_one_deadline(server: ChatServer) -> None:
    server.set_fault(Fault.delay(1.5))
    svc = Service(config(server.base_url, bias_check=True))  # timeout_s 2: one ask fits
    await svc.start(sources=False)
    try:
        started = time.perf_counter()
        outcome = await route(svc, "octopus hearts")
        elapsed = time.perf_counter() - started
    finally:
        await svc.aclose()
    assert 2.0 <= elapsed < 2.8
    assert steps(outcome) == ["llm_bias_probe", "llm_error", "intent_default"]
    error = event(outcome, "llm_error")
    assert error["detail"] == "no answer within 2s" and error["response_format"] == "json_schema"


async def test_a_slow_models_probes_finish_over_several_decisions(server: ChatServer) -> None:
    """Each decision's deadline fits one answer, never two (a busy machine only makes the
    second later): the probes already answered are kept."""
    server.set_fault(Fault.delay(1.0))
    svc = Service(config(server.base_url, bias_check=True, timeout_s=1.9))
    await svc.start(sources=False)
    try:
        chains = [await route(svc, f"octopus hearts {n}") for n in range(4)]
    finally:
        await svc.aclose()
    probed = [[e["probe"] for e in c.chain if e["step"] == "llm_bias_probe"] for c in chains]
    assert probed == [["N/A"], [""], ["[MASK]"], []]
    assert [steps(c)[-1] for c in chains[:3]] == ["intent_default"] * 3
    assert steps(chains[3]) == ["intent_llm"]


async def test_a_fresh_decision_is_cached(service: Service, server: ChatServer) -> None:
    await route(service, "octopus hearts")
    again = await route(service, "Octopus  hearts?")
    assert [(p.route, p.stage) for p in again.results] == [("web", "intent_cached")]
    assert len(server.bodies) == 1


@pytest.mark.parametrize(
    ("reply", "route_"),
    [
        ('Sure! The best source is:\n```json\n{"source": "web"}\n```\nHope this helps.', "web"),
        ('{"reasoning": "needs facts", "source": "Kiwix"}', "kiwix"),
        ('{"source": "everything"}', "everything"),
    ],
)
async def test_answers_in_prose_or_odd_case_are_understood(
    service: Service, server: ChatServer, reply: str, route_: str
) -> None:
    server.reply = reply
    outcome = await route(service, "octopus hearts")
    assert [(p.route, p.stage) for p in outcome.results] == [(route_, "intent_llm")]


@pytest.mark.parametrize(
    ("reply", "fault", "reason", "detail"),
    [
        (None, Fault.status(500), "llm_failed", "HTTP 500"),
        (None, Fault.status(401), "llm_failed", "HTTP 401"),
        (None, Fault.not_json(), "llm_unusable", "not a chat-completions response"),
        (None, Fault.wrong_shape(), "llm_unusable", "not a chat-completions response"),
        ("I would go with the web for this one.", None, "llm_unusable", "no JSON object"),
        ('{"source": "bing"}', None, "llm_unusable", "unknown source 'bing'"),
        ('{"answer": 42}', None, "llm_unusable", "names no source"),
        # which of the two it meant, and which its logprobs measure, nobody can tell
        ('{"source": "web", "source": "kiwix"}', None, "llm_unusable", "names a key twice"),
        (
            None,
            Fault.custom(200, '{"choices": ' + "[" * 100_000 + "]" * 100_000 + "}"),
            "llm_unusable",
            "not a chat-completions response",
        ),
        (None, Fault.custom(200, '{"pad": "' + "a" * 300_000 + '"}'), "llm_unusable", "over"),
    ],
)
async def test_failures_end_at_the_default_with_their_reason(
    service: Service,
    server: ChatServer,
    caplog: pytest.LogCaptureFixture,
    reply: str | None,
    fault: Fault | None,
    reason: str,
    detail: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    if reply is not None:
        server.reply = reply
    if fault is not None:
        server.set_fault(fault)
    outcome = await route(service, "octopus hearts")
    assert [(p.route, p.stage) for p in outcome.results] == [("kiwix", "intent_default")]
    assert steps(outcome) == ["llm_error", "intent_default"]
    assert event(outcome, "intent_default")["reason"] == reason
    error = event(outcome, "llm_error")
    assert error["reason"] == reason and detail in error["detail"]
    assert "raw_answer" not in error
    assert KEY not in json.dumps(outcome.chain) and KEY not in caplog.text
    # A failure is not cached: the next request asks again.
    server.clear_faults()
    server.reply = '{"source": "web"}'
    retry = await route(service, "octopus hearts")
    assert [(p.route, p.stage) for p in retry.results] == [("web", "intent_llm")]


async def test_a_timeout_is_llm_failed_and_bounded(server: ChatServer) -> None:
    server.set_fault(Fault.delay(3.0))
    svc = Service(config(server.base_url, timeout_s=0.3))
    await svc.start(sources=False)
    try:
        started = time.perf_counter()
        outcome = await route(svc, "octopus hearts")
        elapsed = time.perf_counter() - started
    finally:
        await svc.aclose()
    assert elapsed < 1.5
    assert event(outcome, "intent_default")["reason"] == "llm_failed"
    assert "no answer within 0.3s" in event(outcome, "llm_error")["detail"]


async def test_a_call_the_request_deadline_cuts_off_is_in_the_chain(
    server: ChatServer,
) -> None:
    """A 504's chain shows the LLM call the deadline cut off, as it shows a source call
    cut off: `outcome: "timeout"`, `reason: "cancelled"`, how long it had run."""
    server.set_fault(Fault.delay(3.0))
    svc = Service(config(server.base_url, timeout_s=5.0, request_deadline_s=0.3))
    await svc.start(sources=False)
    try:
        outcome = await route(svc, "octopus hearts")
    finally:
        await svc.aclose()
    assert outcome.status_code == 504
    assert steps(outcome) == ["intent_llm", "error"], outcome.chain
    llm = event(outcome, "intent_llm")
    assert (llm["decision"], llm["outcome"], llm["reason"]) == (None, "timeout", "cancelled")
    assert 200 <= llm["elapsed_ms"] < 3000
    assert (llm["confidence"], llm["candidates"]) == (0.0, [])
    assert event(outcome, "error")["error_type"] == "deadline_exceeded"
    for found in outcome.chain:
        assert_contract_event(found)


async def test_an_unreachable_server_is_llm_failed() -> None:
    svc = Service(config(closed_port_url() + "/v1"))
    await svc.start(sources=False)
    try:
        outcome = await route(svc, "octopus hearts")
    finally:
        await svc.aclose()
    assert event(outcome, "intent_default")["reason"] == "llm_failed"
    assert event(outcome, "llm_error")["detail"].startswith("request failed: ")


async def test_none_means_no_source_fits(service: Service, server: ChatServer) -> None:
    server.reply = '{"source": "none"}'
    outcome = await route(service, "set an alarm for seven")
    assert [(p.route, p.status) for p in outcome.results] == [(None, "unserved")]
    assert event(outcome, "intent_llm")["decision"] is None
    assert event(outcome, "intent_default")["reason"] == "unserved"


async def test_prompts_are_kept_only_when_configured(server: ChatServer) -> None:
    svc = Service(config(server.base_url, capture=True))
    await svc.start(sources=False)
    try:
        outcome = await route(svc, "octopus hearts")
        server.reply = "no idea"
        failed = await route(svc, "squid eyes")
        server.reply = '{"source": "' + KEY + '"}'  # a server echoing the key it was sent
        echoed = await route(svc, "cuttlefish ink")
    finally:
        await svc.aclose()
    llm = event(outcome, "intent_llm")
    assert llm["raw_answer"] == '{"source": "web"}'
    assert llm["prompt"][-1]["content"].endswith("octopus hearts")
    assert event(failed, "llm_error")["raw_answer"] == "no idea"
    assert event(echoed, "llm_error")["raw_answer"] == '{"source": "***"}'
    assert KEY not in json.dumps(outcome.chain + failed.chain + echoed.chain)


async def test_keywords_still_come_first(service: Service, server: ChatServer) -> None:
    outcome = await route(service, "weather in oslo")
    assert [(p.route, p.stage) for p in outcome.results] == [("forecast", "intent_keyword")]
    assert server.bodies == []


async def test_without_a_base_url_the_reason_is_llm_unconfigured() -> None:
    svc = Service(config(""))
    await svc.start(sources=False)
    try:
        outcome = await route(svc, "octopus hearts")
    finally:
        await svc.aclose()
    assert event(outcome, "intent_default")["reason"] == "llm_unconfigured"


async def test_an_unmeasured_answer_routes_but_is_not_confident(
    service: Service, server: ChatServer
) -> None:
    """Without logprobs the confidence is a stated value, not a measurement: the route
    answers the question, and no command is carried out on it (the gate reads
    `confident`)."""
    from routing.types import ResolveContext

    server.reply = '{"source": "web"}'
    server.logprobs_mode = "absent"
    decision = await service.resolver.resolve("octopus hearts", ResolveContext())
    assert (decision.route, decision.stage, decision.confident) == ("web", "intent_llm", False)
    server.logprobs_mode = "tokens"
    decision = await service.resolver.resolve("squid hearts", ResolveContext())
    assert (decision.route, decision.confident) == ("web", True)


def test_extract_json_object() -> None:
    assert extract_json_object('{"source": "web"}') == {"source": "web"}
    assert extract_json_object('Answer: {"source": "ha"} done') == {"source": "ha"}
    assert extract_json_object('{broken {"source": "ha"}') == {"source": "ha"}
    assert extract_json_object('["web"]') is None
    assert extract_json_object("no json here") is None
