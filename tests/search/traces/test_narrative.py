"""The narrative, read off the events alone. A semantic decision names what the query was
near, by the event's `origin`: a shipped exemplar, the user's label, or an earlier query
the LLM routed; with `--decision-only` too (the origin is one of three words, never query
text). A command says whether it changed anything, worded as the command; a snapshot's
answer to a time-sensitive question says it may be out of date."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from search.config import parse_config
from search.service import Service
from search.traces.narrative import decision_only, narrative, sentence
from tests.support.wire_servers import Fault, SearxngServer

ROOT = Path(__file__).resolve().parents[3]


def semantic(origin: str | None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "step": "intent_semantic",
        "seq": 0,
        "t_ms": 1.0,
        "part": "0",
        "query": "will it pour tomorrow",
        "matched_query": "will it rain tomorrow",
        "similarity": 0.8812,
        "decision": "forecast",
    }
    if origin is not None:
        event["origin"] = origin
    return event


@pytest.mark.parametrize(
    ("origin", "with_text", "without_text"),
    [
        (
            "exemplar",
            "went to forecast by similarity 0.88 to the exemplar 'will it rain tomorrow'",
            "went to forecast by similarity 0.88 to an exemplar",
        ),
        (
            "llm",
            "went to forecast by similarity 0.88 to the earlier query 'will it rain tomorrow'"
            " (an LLM decision)",
            "went to forecast by similarity 0.88 to an earlier LLM decision",
        ),
        (
            "user_label",
            "went to forecast by similarity 0.88 to the user's label 'will it rain tomorrow'",
            "went to forecast by similarity 0.88 to a query the user labelled",
        ),
        (  # a chain recorded before events named their origin
            None,
            "went to forecast by similarity 0.88 to 'will it rain tomorrow'",
            "went to forecast by similarity 0.88 to an earlier query",
        ),
    ],
)
def test_a_semantic_match_says_what_it_matched(
    origin: str | None, with_text: str, without_text: str
) -> None:
    event = semantic(origin)
    assert sentence(event) == with_text
    assert sentence(event, with_text=False) == without_text


@pytest.mark.parametrize("origin", ["exemplar", "llm", "user_label"])
def test_decision_only_keeps_the_origin_and_says_it(origin: str) -> None:
    """`search trace show --decision-only` reads the narrative off the structural chain."""
    trace = {"trace_id": "t", "chain": [semantic(origin)], "results": [], "labels": []}
    safe = decision_only(trace)
    assert safe["chain"][0]["origin"] == origin
    assert "matched_query" not in safe["chain"][0] and "query" not in safe["chain"][0]
    (line,) = narrative(safe["chain"], with_text=False)
    assert "earlier query" not in line
    assert line.endswith(
        {
            "exemplar": "to an exemplar",
            "llm": "to an earlier LLM decision",
            "user_label": "to a query the user labelled",
        }[origin]
    )


@pytest.mark.parametrize("origin", ["will it rain tomorrow", ["exemplar"]])
def test_decision_only_drops_an_origin_that_is_not_one_of_its_words(origin: Any) -> None:
    """A tampered store's `origin` could carry query text: only the three words are kept."""
    event = {**semantic(None), "origin": origin}
    safe = decision_only({"trace_id": "t", "chain": [event], "results": [], "labels": []})
    assert "origin" not in safe["chain"][0]
    assert "will it rain" not in str(safe)


def act(outcome: str, action: str = "on", target: str = "the lights", **extra: Any) -> dict:
    return {
        "step": "source_invoked",
        "seq": 0,
        "t_ms": 1.0,
        "part": "0",
        "source": "ha",
        "query": f"turn {action} {target}",
        "elapsed_ms": 5.2,
        "outcome": outcome,
        "result_count": 1 if outcome == "ok" else 0,
        "operation": "act",
        "command": {"action": action, "target": target},
        **extra,
    }


@pytest.mark.parametrize(
    ("event", "with_text", "without_text"),
    [
        (
            act("ok", target="the bed light"),
            "ha carried out 'turn on the bed light' in 5 ms",
            "ha carried out a command in 5 ms",
        ),
        (  # an act answers an item per device it called: none, nothing changed
            act("empty"),
            "ha changed nothing for 'turn on the lights' in 5 ms",
            "ha changed nothing for a command in 5 ms",
        ),
        (  # why, when the source said
            act("empty", reason="ambiguous"),
            "ha changed nothing for 'turn on the lights' (it could mean several devices) in 5 ms",
            "ha changed nothing for a command (it could mean several devices) in 5 ms",
        ),
        (
            act("empty", action="off", reason="no_change"),
            "ha was asked to 'turn off the lights' and reported no change in 5 ms",
            "ha was asked to a command and reported no change in 5 ms",
        ),
        (
            act("error", action="open", target="the garage door", reason="timeout"),
            "ha was asked to 'open the garage door' and timed out",
            "ha was asked to a command and timed out",
        ),
        (  # cut off by the end of its request: it may have run
            act("timeout", action="unlock", target="the front door", reason="cancelled"),
            "ha was asked to 'unlock the front door' and had not answered when the request "
            "ended (it may have taken effect)",
            "ha was asked to a command and had not answered when the request ended "
            "(it may have taken effect)",
        ),
    ],
)
def test_an_act_says_whether_it_changed_anything(
    event: dict[str, Any], with_text: str, without_text: str
) -> None:
    assert sentence(event) == with_text
    assert "carried out" not in with_text or event["outcome"] == "ok"
    (line,) = narrative(
        decision_only({"trace_id": "t", "chain": [event]})["chain"], with_text=False
    )
    assert line == f"part 0 {without_text}"


def test_a_withheld_on_off_command_reads_as_the_command() -> None:
    event = {
        "step": "control_withheld",
        "seq": 0,
        "t_ms": 1.0,
        "part": "0",
        "query": "turn on the heating tomorrow",
        "source": "ha",
        "reason": "deferred",
        "reasons": ["deferred"],
        "command": {"action": "on", "target": "the heating"},
        "when": "tomorrow",
    }
    assert sentence(event).startswith("did not 'turn on the heating' with ha: ")
    unlock = {**event, "command": {"action": "unlock", "target": "the front door"}}
    assert sentence(unlock).startswith("did not 'unlock the front door' with ha: ")


def live_chain(answered_by: str, reason: str | None = None) -> list[dict[str, Any]]:
    """A time-sensitive part sent to web, web failing, and `answered_by` answering; kiwix's
    answer recorded as the snapshot's (`snapshot_answered`), as the pipeline records it."""
    moved: dict[str, Any] = {"step": "time_sensitive", "from_route": "kiwix", "to_route": "web"}
    moved.update(cue="the current", kind="present", probability=0.9)
    if reason is not None:
        moved["reason"] = reason
    events: list[dict[str, Any]] = [
        moved,
        {"step": "source_invoked", "source": "web", "outcome": "error", "reason": "server_error"},
        {"step": "fallback", "from_source": "web", "to_source": "kiwix"},
        {"step": "source_invoked", "source": answered_by, "outcome": "ok", "result_count": 2},
    ]
    if answered_by == "kiwix":
        events.append({"step": "snapshot_answered", "source": "kiwix", "live_route": "web"})
    for seq, event in enumerate(events):
        event.update(seq=seq, t_ms=float(seq), part="0", query="the current mayor", elapsed_ms=3)
    return events


def test_the_snapshot_answering_after_the_live_source_failed_may_be_out_of_date() -> None:
    (line,) = narrative(live_chain("kiwix"))
    assert line.endswith(
        "kiwix answered 2 results in 3 ms; "
        "kiwix answered in place of the live source web: its answer may be out of date"
    )
    # said once, also without the query text
    (safe,) = narrative(live_chain("kiwix"), with_text=False)
    assert safe.count("may be out of date") == 1
    # another source answering is no snapshot's answer
    (other,) = narrative(live_chain("forecast"))
    assert "out of date" not in other
    # with the live source disabled the redirect says who answers, and the answer says it
    (disabled,) = narrative(live_chain("kiwix", reason="disabled"))
    assert "but the live source web is disabled, so kiwix answers;" in disabled
    assert disabled.count("may be out of date") == 1


async def test_web_failing_and_kiwix_answering_a_time_sensitive_question_says_so(
    demo_zim: Path,
) -> None:
    """Through the real pipeline: the shipped config, the demo ZIM, and a SearXNG that
    answers 500 (tests/support/wire_servers.py)."""
    data = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    data["sources"]["kiwix"] = {"type": "zim", "paths": [str(demo_zim)], "timeout_s": 10}
    data["trace"] = {"enabled": False}
    with SearxngServer() as web:
        web.set_fault(Fault.status(500))
        data["sources"]["web"].update(enabled=True, url=web.url, timeout_s=2)
        svc = Service(parse_config(data))
        await svc.start()
        try:
            outcome = await svc.search("what is the current height of Mount Everest", explain=True)
        finally:
            await svc.aclose()
    (part,) = outcome.body["results"]
    assert (part["source"], part["status"], part["may_be_out_of_date"]) == ("kiwix", "ok", True)
    (line,) = [line for line in narrative(outcome.chain) if line.startswith("part 0")]
    assert "web answered with a server error" in line
    assert line.endswith(
        "kiwix answered in place of the live source web: its answer may be out of date"
    )


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({}, "planned for web (dry run, intent_keyword)"),  # a trace from before plans
        (
            {"sources": ["web", "kiwix"], "unavailable": {}},
            "planned for web (dry run, intent_keyword)",
        ),
        (
            {"sources": ["web", "kiwix"], "unavailable": {"web": "disabled"}},
            "planned for web (dry run, intent_keyword); web is disabled: kiwix would answer",
        ),
        (
            {"sources": ["web", "kiwix"], "unavailable": {"web": "circuit_open", "kiwix": "odd"}},
            "planned for web (dry run, intent_keyword); web has its circuit open, kiwix is out "
            "(odd), and nothing stands in: it would fail",
        ),
        ({"sources": "junk", "unavailable": ["junk"]}, "planned for web (dry run, intent_keyword)"),
    ],
)
def test_a_plan_says_what_it_would_meet(extra: dict[str, Any], said: str) -> None:
    event = {"step": "planned", "query": "latest news", "route": "web", "stage": "intent_keyword"}
    assert sentence({**event, **extra}) == said
