"""Conditions: what is a condition to check first, and what only looks like one."""

from __future__ import annotations

import pytest

from routing.language.conditional import extract_conditional


@pytest.mark.parametrize(
    ("query", "condition", "consequence", "remainder"),
    [
        (
            "if it rains tomorrow, are the windows open?",
            "it rains tomorrow",
            "are the windows open",
            "",
        ),
        ("if it is cold then turn on the heating", "it is cold", "turn on the heating", ""),
        (
            "if it snows close the garage door and also what's the news",
            "it snows",
            "close the garage door",
            "what's the news",
        ),
        (
            "when it gets dark, turn on the porch light",
            "it gets dark",
            "turn on the porch light",
            "",
        ),
        (
            "turn on the heating if it drops below zero",
            "it drops below zero",
            "turn on the heating",
            "",
        ),
    ],
)
def test_conditions_are_extracted(
    query: str, condition: str, consequence: str, remainder: str
) -> None:
    found = extract_conditional(query)
    assert found is not None
    assert (found.condition, found.consequence, found.remainder) == (
        condition,
        consequence,
        remainder,
    )


@pytest.mark.parametrize(
    "query",
    [
        "when did beyonce and jay z get married",  # a question about a time
        "when is my next meeting",
        "when will it stop raining",
        "give six points to who will cry when you die",  # a trailing "when" is a time clause
        "turn on the tv socket when i arrive home",
        "tell me if it will rain",  # an embedded question
        "check if the garage is open",
        "what is the weather",
    ],
)
def test_lookalikes_are_not_conditions(query: str) -> None:
    assert extract_conditional(query) is None
