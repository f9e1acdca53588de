"""The time-sensitivity cues (routing.language.time_sensitive) on questions written here."""

from __future__ import annotations

import pytest

from routing.language.time_sensitive import time_cue


@pytest.mark.parametrize(
    ("question", "cue", "kind"),
    [
        ("who is the current mayor of Oslo", "the current", "present"),
        ("what is the most recent album by the band", "the most recent", "recent"),
        ("how old is the queen of Denmark", "how old is", "age"),
        ("how many novels has Stephen King published", "how many novels has", "count"),
        ("who won the cup this year", "this year", "relative"),
        ("who is the prime minister of Japan", "who is the prime minister", "role"),
        ("who is head coach of the Warriors", "who is head coach", "role"),  # the longer role
        ("who is president of the club", "who is president", "role"),  # an office, bare
        ("what is the population of Lagos", "population of", "measures"),
        ("who has scored the most goals for Brazil", "the most", "measures"),
        ("who has won every race", "who has", "perfect"),
        ("what is the largest city in Canada", "what is the largest", "superlative"),
        ("when did the team last win the league", "when did ... last", "last"),
        ("is the singer still alive", "still", "present"),
    ],
)
def test_time_words_are_found_and_named(question: str, cue: str, kind: str) -> None:
    found = time_cue(question)
    assert found is not None, question
    assert (found.cue, found.kind) == (cue, kind)


@pytest.mark.parametrize(
    "question",
    [
        "who wrote Hamlet",
        "what is the capital of Peru",
        "what is electric current",  # a noun, not "now"
        "how strong is the ocean current near the cape",
        "who was the first president of France",  # a role that never changes hands
        "who is the father of queen Victoria",  # a father is asked; "queen" names his child
        "who is a member of the band Queen",
        "who is queen Victoria",  # a title before a name: a person, not an office
        "who was the prime minister of Japan in 1990",  # anchored by a year and a past tense
        "what was the population of Rome under Augustus",
        "when was the Eiffel Tower built",
        "now tell me about Mount Everest",  # 'now' opening the sentence is a filler
        "",
    ],
)
def test_fixed_facts_have_no_cue(question: str) -> None:
    assert time_cue(question) is None


def test_an_explicit_cue_holds_even_in_the_past_tense() -> None:
    found = time_cue("who was the most recent winner of the prize")
    assert found is not None and found.kind == "recent"
