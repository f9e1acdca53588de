"""The LLM stage's confidence from the answer's token log-probabilities.

The stage tests run against `tests.support.chat_server.ChatServer`, a loopback server
speaking the OpenAI chat-completions wire format, `logprobs` included as the API reference
documents them (`choices[0].logprobs.content[]` with `token`, `logprob`, `bytes`,
`top_logprobs`); what the "model" answers, and how sure it is, is scripted per test. The
method's arithmetic is tested on hand-built logprobs of the same shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from routing.stages.llm_confidence import (
    UNMEASURED,
    Calibration,
    Unmeasured,
    calibration_for,
    measure,
    state,
)
from routing.stages.semantic import LearnedDecisions
from search.config import Config, parse_config
from search.service import Service
from tests.support.chains import only as event
from tests.support.chains import route
from tests.support.chat_server import ChatServer

DESCRIPTIONS = {
    "kiwix": "Offline encyclopedia: facts and definitions.",
    "forecast": "Weather forecast.",
    "web": "Web search: news, prices, current events.",
}
CANDIDATES = ["kiwix", "forecast", "web", "everything", "none"]
log = math.log


def config(base_url: str, **llm: Any) -> Config:
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "shipped_routes": False,
                "semantic": {"enabled": False},
                "fusion": {"everything": ["kiwix", "web"]},
                "llm": {
                    "base_url": base_url,
                    "model": "router-test",
                    "timeout_s": 5,
                    "bias_check": False,
                    **llm,
                },
            },
            "sources": {
                name: {"type": "scripted", "description": text}
                for name, text in DESCRIPTIONS.items()
            },
            "trace": {"enabled": False},
        }
    )


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    with ChatServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _reset(server: ChatServer) -> None:
    server.reply = '{"source": "web"}'
    server.logprobs_mode = "tokens"
    server.route_logprobs = None
    server.name_piece = 0
    server.bodies.clear()


@pytest.fixture
async def service(server: ChatServer) -> AsyncIterator[Service]:
    svc = Service(config(server.base_url))
    await svc.start(sources=False)
    yield svc
    await svc.aclose()


def shown(llm: dict[str, Any]) -> list[tuple[str, float]]:
    return [(c["route"], c["confidence"]) for c in llm["candidates"]]


async def test_logprobs_give_the_named_route_its_probability(
    service: Service, server: ChatServer
) -> None:
    server.route_logprobs = {
        "web": log(0.6),
        "kiwix": log(0.2),
        "forecast": log(0.1),
        "zz": log(0.05),
    }
    outcome = await route(service, "price of a train ticket to lyon")
    [body] = server.bodies
    assert body["logprobs"] is True and body["top_logprobs"] == 10
    llm = event(outcome, "intent_llm")
    assert llm["decision"] == "web" and llm["confidence_source"] == "logprobs"
    # No calibration for this model: the raw probability, said to be raw.
    assert llm["calibrated"] is False and llm["confidence"] == llm["raw_confidence"] == 0.6
    # "zz" spells no route; "everything" and "none" were not shown, each given the least
    # alternative shown (0.05): the candidates sum to 1, the named route first.
    assert shown(llm) == [
        ("web", 0.6),
        ("kiwix", 0.2),
        ("forecast", 0.1),
        ("everything", 0.05),
        ("none", 0.05),
    ]
    assert llm["route_logprob"] == round(log(0.6), 4)
    [part] = outcome.results
    assert (part.route, part.stage) == ("web", "intent_llm")
    # The decision cache keeps the LLM's own figure, not a constant.
    again = await route(service, "price of a train ticket to lyon")
    assert event(again, "intent_cached")["confidence"] == 0.6
    assert len(server.bodies) == 1


async def test_an_unsure_answer_passes_on(service: Service, server: ChatServer) -> None:
    server.route_logprobs = {
        "web": log(0.4),
        "kiwix": log(0.35),
        "forecast": log(0.15),
        "zz": log(0.05),
    }
    outcome = await route(service, "something about lyon")
    llm = event(outcome, "intent_llm")
    assert llm["decision"] is None and llm["outcome"] == "declined"
    assert llm["answer"] == "web" and llm["declined"] == "llm 0.40 < 0.55"
    default = event(outcome, "intent_default")
    assert default["reason"] == "low_confidence"
    [part] = outcome.results
    assert (part.route, part.stage) == ("kiwix", "intent_default")
    # What the LLM gave the default's route is the default's confidence.
    assert default["confidence"] == 0.35


async def test_a_route_spelt_over_several_tokens(service: Service, server: ChatServer) -> None:
    server.name_piece = 2  # "web" is "we" + "b", "kiwix" "ki" + "wi" + "x"
    server.route_logprobs = {"web": log(0.7), "kiwix": log(0.15), "forecast": log(0.05)}
    outcome = await route(service, "news about the election")
    llm = event(outcome, "intent_llm")
    assert llm["decision"] == "web"
    # Both name tokens count in the sum; only the first shows other routes.
    assert llm["route_logprob"] == round(log(0.7) + log(0.999), 4)
    assert llm["confidence"] == 0.7  # 0.7 / (0.7 + 0.15 + 0.05 + 0.05 + 0.05)
    server.reply = '{"source": "kiwix"}'
    server.route_logprobs = {"kiwix": log(0.8), "web": log(0.1)}
    outcome = await route(service, "who was ada lovelace")
    llm = event(outcome, "intent_llm")
    assert llm["decision"] == "kiwix"
    assert llm["route_logprob"] == round(log(0.8) + 2 * log(0.999), 4)


async def test_no_logprobs_from_the_server(service: Service, server: ChatServer) -> None:
    server.logprobs_mode = "absent"
    outcome = await route(service, "price of bread")
    llm = event(outcome, "intent_llm")
    assert llm["decision"] == "web"
    assert llm["confidence_source"] == "none" and llm["calibrated"] is False
    assert llm["confidence_detail"] == "the server sent no logprobs"
    assert llm["confidence"] == UNMEASURED and shown(llm) == [("web", UNMEASURED)]
    assert "raw_confidence" not in llm and "route_logprob" not in llm


async def test_malformed_logprobs(service: Service, server: ChatServer) -> None:
    server.logprobs_mode = "malformed"  # {"content": "n/a"}
    outcome = await route(service, "price of milk")
    llm = event(outcome, "intent_llm")
    assert llm["decision"] == "web" and llm["confidence_source"] == "none"
    assert llm["confidence_detail"] == "malformed logprobs: no content list"
    assert llm["confidence"] == UNMEASURED


async def test_logprobs_can_be_switched_off(server: ChatServer) -> None:
    svc = Service(config(server.base_url, logprobs=False))
    await svc.start(sources=False)
    try:
        outcome = await route(svc, "price of tea")
    finally:
        await svc.aclose()
    [body] = server.bodies
    assert "logprobs" not in body and "top_logprobs" not in body
    assert event(outcome, "intent_llm")["confidence_source"] == "none"


async def test_none_named_surely_is_unserved(service: Service, server: ChatServer) -> None:
    server.reply = '{"source": "none"}'
    server.route_logprobs = {"none": log(0.9), "web": log(0.02)}
    outcome = await route(service, "set an alarm for six")
    llm = event(outcome, "intent_llm")
    # 0.9 / (0.9 + 0.02 for web and for each of the three routes not shown)
    assert llm["outcome"] == "no_source" and shown(llm)[0] == ("none", 0.9184)
    assert event(outcome, "intent_default")["reason"] == "unserved"


def test_the_chat_server_tokens_spell_the_answer(server: ChatServer) -> None:
    server.name_piece = 3
    content = 'Sure: {"source": "forecast"} (weather)'
    tokens = server._logprobs(content, 5)["content"]
    assert "".join(t["token"] for t in tokens) == content
    assert [t["token"] for t in tokens if t["token"] in {"for", "eca", "st"}] == [
        "for",
        "eca",
        "st",
    ]


# --- the method on hand-built logprobs ------------------------------------------------


def tok(token: str, p: float, *alternatives: tuple[str, float]) -> dict[str, Any]:
    top = [{"token": t, "logprob": log(q), "bytes": None} for t, q in alternatives]
    return {"token": token, "logprob": log(p), "bytes": None, "top_logprobs": top}


def logprobs(*tokens: dict[str, Any]) -> dict[str, Any]:
    return {"content": list(tokens)}


def test_routes_sharing_a_prefix_part_at_the_token_that_differs() -> None:
    answer = logprobs(
        tok('{"source": "', 1.0),
        tok("we", 0.8, ("we", 0.8), ("ki", 0.2)),
        tok("b", 0.5, ("b", 0.5), ("ather", 0.5)),
        tok('"}', 1.0),
    )
    found = measure(answer, "web", ["web", "weather", "kiwix"])
    assert found.probabilities == pytest.approx({"web": 0.4, "weather": 0.4, "kiwix": 0.2})
    assert list(found.probabilities)[0] == "web"
    assert found.route_logprob == pytest.approx(log(0.8) + log(0.5))


def test_a_token_that_opens_the_value_and_begins_the_name() -> None:
    """The first name token may carry the opening quote: alternatives are read past it."""
    answer = logprobs(
        tok('{"source":', 1.0),
        tok(' "ki', 0.6, (' "ki', 0.6), (' "we', 0.3), (" {", 0.1)),
        tok('wix"}', 1.0),
    )
    found = measure(answer, "kiwix", ["kiwix", "web"])
    assert found.probabilities == pytest.approx({"kiwix": 0.6 / 0.9, "web": 0.3 / 0.9})


def test_a_server_showing_no_alternatives_gives_the_tokens_own_probability() -> None:
    answer = logprobs(tok('{"source": "', 1.0), tok("web", 0.7), tok('"}', 1.0))
    assert measure(answer, "web", ["web", "kiwix"]).probabilities["web"] == pytest.approx(0.7)


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        (None, "the server sent no logprobs"),
        ({"content": None}, "malformed logprobs: no content list"),
        (
            {"content": [{"token": "x"}]},
            "malformed logprobs: a token without text or log-probability",
        ),
        (
            {"content": [{"token": "x", "logprob": 0.5}]},
            "malformed logprobs: a token without text or log-probability",
        ),
        (
            {"content": [{"token": "x", "logprob": -1, "top_logprobs": [{"token": 3}]}]},
            "malformed logprobs: an alternative without text or log-prob",
        ),
        (logprobs(tok('{"source": "kiwix"}', 1.0)), "the logprobs do not spell the answer"),
    ],
)
def test_what_gives_no_measurement(broken: Any, reason: str) -> None:
    with pytest.raises(Unmeasured, match=reason):
        measure(broken, "web", ["web", "kiwix"])
    stated = state(broken, "web", ["web", "kiwix"], None)
    assert (stated.source, stated.calibrated, stated.confidence) == ("none", False, UNMEASURED)


def test_a_calibration_maps_monotonely_and_keeps_the_candidates_summing_to_one() -> None:
    calibration = Calibration(a=0.5, b=-0.2, name="m.gguf")
    values = [calibration(p) for p in (0.01, 0.3, 0.6, 0.9, 0.999)]
    assert values == sorted(values) and all(0 < v < 1 for v in values)
    answer = logprobs(
        tok('{"source": "', 1.0),
        tok("web", 0.6, ("web", 0.6), ("kiwix", 0.3), ("zz", 0.1)),
        tok('"}', 1.0),
    )
    stated = state(answer, "web", ["web", "kiwix", "none"], calibration)
    assert stated.calibrated and stated.raw == pytest.approx(0.6 / 1.0)
    assert stated.confidence == pytest.approx(calibration(0.6))
    assert sum(p for _, p in stated.ranked.routes) == pytest.approx(1.0)
    assert stated.ranked.winner == "web"


def test_the_calibration_is_found_by_model_file_or_alias(tmp_path: Path) -> None:
    path = tmp_path / "llm_calibration.json"
    entry = {"a": 1.5, "b": -0.5, "aliases": ["gemma-small"]}
    path.write_text(json.dumps({"models": {"gemma-3-270m-q4_k_m.gguf": entry}}))
    for name in ("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-q4_k_m", "gemma-small"):
        found = calibration_for(name, path)
        assert found is not None and (found.a, found.b) == (1.5, -0.5)
    assert calibration_for("llama3", path) is None
    assert calibration_for("gemma-small", tmp_path / "missing.json") is None


def test_a_reused_paraphrase_keeps_the_llms_confidence() -> None:
    learned = LearnedDecisions(8, 60.0)
    vector = np.asarray([1.0, 0.0], dtype=np.float32)
    learned.add("price of a ticket to lyon", "web", vector, 0.83)
    assert learned.nearest(vector) == ("price of a ticket to lyon", "web", 1.0, 0.83)


async def test_the_bias_probes_do_not_pay_for_logprobs(server: ChatServer) -> None:
    """A probe's answer is only a name: it is asked without logprobs, the real query with."""
    svc = Service(config(server.base_url, bias_check=True))
    await svc.start(sources=False)
    try:
        outcome = await route(svc, "price of coffee")
    finally:
        await svc.aclose()
    assert [b.get("logprobs") for b in server.bodies] == [None, None, None, True]
    assert event(outcome, "intent_llm")["confidence_source"] == "logprobs"


@pytest.mark.parametrize("top", [5, True, 1.5, "web"])
def test_top_logprobs_that_are_not_a_list_measure_nothing(top: object) -> None:
    """A malformed `top_logprobs` made the request fail with a TypeError."""
    logprobs = {"content": [{"token": "web", "logprob": -0.1, "top_logprobs": top}]}
    stated = state(logprobs, "web", ["web", "kiwix", "none"], None)
    assert stated.source == "none" and "top_logprobs" in (stated.detail or "")
