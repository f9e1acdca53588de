"""Follow-up rewriting: which rule turns a follow-up into the question it stands for."""

from __future__ import annotations

import pytest

from routing.language.followup import rewrite, subject


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("tell me about the eiffel tower", "the eiffel tower"),
        ("how tall is the eiffel tower", "the eiffel tower"),
        ("when was the eiffel tower built", "the eiffel tower"),
        ("who wrote the hobbit", "the hobbit"),
        ("what is the capital of france", "the capital of france"),
        ("how many moons does jupiter have", "jupiter"),
        ("turn on the kitchen lights", "the kitchen lights"),
        ("what's the weather in oslo", "the weather"),
        ("what time is it", None),
        ("what happened in 1066", None),
        ("is it going to rain tomorrow", None),
    ],
)
def test_the_subject_is_the_noun_phrase_the_request_is_about(text: str, found: str | None) -> None:
    assert subject(text) == found


@pytest.mark.parametrize(
    ("query", "previous", "asked", "rule"),
    [
        # a pronoun for the previous subject, or "there" for its place
        (
            "how tall is it?",
            "tell me about the eiffel tower",
            "how tall is the eiffel tower?",
            "pronoun",
        ),
        (
            "what is its population?",
            "tell me about france",
            "what is france's population?",
            "pronoun",
        ),
        ("when was he born", "who is barack obama", "when was barack obama born", "pronoun"),
        ("turn them off", "turn on the kitchen lights", "turn the kitchen lights off", "pronoun"),
        ("is it cold there?", "what's the weather in oslo", "is it cold in oslo?", "pronoun"),
        # another time: replaced where the question had one, else added
        (
            "what about tomorrow?",
            "what's the weather in oslo",
            "what's the weather in oslo tomorrow",
            "time",
        ),
        ("and on friday?", "will it rain in oslo today", "will it rain in oslo on friday", "time"),
        ("tomorrow?", "weather in paris", "weather in paris tomorrow", "time"),
        (
            "what about tomorrow?",
            "weather for the week in oslo",
            "weather tomorrow in oslo",
            "time",
        ),
        # another place
        ("and in bergen?", "what's the weather in oslo", "what's the weather in bergen", "place"),
        (
            "what about bergen?",
            "what's the weather in oslo",
            "what's the weather in bergen",
            "place",
        ),
        ("and in the hallway?", "are the lights on", "are the lights on in the hallway", "place"),
        # another subject
        (
            "what about the louvre?",
            "tell me about the eiffel tower",
            "tell me about the louvre",
            "subject",
        ),
        (
            "what about the news?",
            "what's the weather in oslo",
            "what's the news in oslo",
            "subject",
        ),
    ],
)
def test_a_follow_up_is_rewritten_by_one_rule(
    query: str, previous: str, asked: str, rule: str
) -> None:
    found = rewrite(query, previous, subject(previous))
    assert found is not None and (found.text, found.rule) == (asked, rule)


@pytest.mark.parametrize(
    ("query", "previous"),
    [
        ("why?", "tell me about the eiffel tower"),  # nothing to put in
        ("is it going to rain tomorrow", "what's the weather in oslo"),  # the weather's "it"
        ("what time is it", "tell me about the eiffel tower"),  # the clock's "it"
        ("how old is it", "what time is it"),  # the previous turn has no subject
        ("hmm", "news from oslo"),  # a bare word is no time, place or subject
        ("and what's the news in kenya", "what's the weather in oslo"),  # a question of its own
        ("who painted the sistine chapel ceiling", "tell me about the eiffel tower"),
    ],
)
def test_no_rule_no_rewrite(query: str, previous: str) -> None:
    assert rewrite(query, previous, subject(previous)) is None


def test_the_rewrite_says_what_it_carried_over() -> None:
    found = rewrite("what about tomorrow?", "what's the weather in oslo today", "the weather")
    assert found is not None
    assert (found.carried, found.replaced) == ("today", "tomorrow")
