"""The narrative of a semantic decision names what the query was near, by the event's
`origin`: a shipped exemplar, the user's label, or an earlier query the LLM routed; with
`--decision-only` too (the origin is one of three words, never query text)."""

from __future__ import annotations

from typing import Any

import pytest

from search.traces.narrative import decision_only, narrative, sentence


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
