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


@pytest.mark.parametrize(
    "query",
    [
        "the garage door, open it please",  # the part's own earlier clause names it
        "open the garage door and lock it",
        "turn off the tv when it ends",
        "tell me about the louvre; how old is it",
        "the front door: is it locked",
    ],
)
def test_a_pronoun_the_part_itself_gives_a_thing_to_stand_for_is_left(query: str) -> None:
    found = rewrite(query, "turn off the kitchen lights", "the kitchen lights")
    assert found is None or found.rule != "pronoun", found


@pytest.mark.parametrize(
    ("query", "asked"),
    [
        # a noun phrase in the pronoun's own clause is no antecedent: "it" is inside it
        ("what is the population of it", "what is the population of the kitchen lights"),
        ("the population and the area of it", "the population and the area of the kitchen lights"),
        # one governed by a preposition is a place, a time is no thing, "ok" names nothing
        ("in the kitchen, turn it off", "in the kitchen, turn the kitchen lights off"),
        ("the day after tomorrow, is it on", "the day after tomorrow, is the kitchen lights on"),
        ("ok, turn it on", "ok, turn the kitchen lights on"),
    ],
)
def test_a_pronoun_with_no_thing_before_it_in_the_part_still_stands_for_the_subject(
    query: str, asked: str
) -> None:
    found = rewrite(query, "turn off the kitchen lights", "the kitchen lights")
    assert found is not None and (found.text, found.rule) == (asked, "pronoun")


@pytest.mark.parametrize("query", ["it is dark", "if it gets cold", "when it gets darker"])
def test_the_weathers_it_in_a_condition_is_no_device(query: str) -> None:
    assert rewrite(query, "turn on the kitchen lights", "the kitchen lights") is None
