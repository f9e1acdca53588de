"""Properties of decomposition and conditional extraction, over generated text."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from routing.language.conditional import extract_conditional
from routing.language.decompose import decompose
from routing.language.followup import rewrite, subject

WORDS = [
    "what",
    "is",
    "the",
    "weather",
    "today",
    "and",
    "also",
    "then",
    "lights",
    "status",
    "if",
    "it",
    "rains",
    "tomorrow",
    "are",
    "windows",
    "open",
    "turn",
    "off",
    "who",
    "wrote",
    "romeo",
    "juliet",
    "salt",
    "pepper",
    "news",
    "when",
    "unless",
    "tell",
    "me",
    ",",
    ";",
    "?",
    ".",
    "!",
    "and then",
    "and also",
    "kitchen",
    "héllo",
    "東京",
    "",
]
phrases = st.lists(st.sampled_from(WORDS), min_size=0, max_size=25).map(" ".join)
any_text = st.one_of(phrases, st.text(max_size=200))
CONJUNCTION = re.compile(r";|[,.?!]|\b(and|also|then)\b", re.IGNORECASE)


@settings(max_examples=400, deadline=None)
@given(any_text)
def test_decompose_never_crashes_and_parts_are_substrings(text: str) -> None:
    parts = decompose(text)
    position = 0
    for part in parts:
        assert part, "no empty parts"
        found = text.find(part, position)
        assert found >= 0, f"{part!r} is not a substring of {text!r} (in order)"
        position = found + len(part)


@settings(max_examples=400, deadline=None)
@given(any_text)
# a question word after "and" opened its own clause, yet the words after it still read
# as asked in place of the clause before: the first part split again on its own
@example("what what and who is and what what")
def test_splitting_is_idempotent(text: str) -> None:
    for part in decompose(text):
        assert decompose(part) == [part]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([w for w in WORDS if w and not CONJUNCTION.search(w)]),
        min_size=1,
        max_size=20,
    ).map(" ".join)
)
def test_a_query_without_a_conjunction_is_never_split(text: str) -> None:
    assert len(decompose(text)) <= 1


@settings(max_examples=400, deadline=None)
@given(any_text)
def test_conditional_extraction_never_crashes_and_returns_substrings(text: str) -> None:
    found = extract_conditional(text)
    if found is None:
        return
    assert found.condition and found.consequence
    for piece in (found.condition, found.consequence, found.remainder):
        assert piece in text


# Written for this test: statements that ask nothing, and requests that stand alone.
CONTEXT = [
    "I'm planning a trip.",
    "We have guests tonight.",
    "My car is low on gas.",
    "It's my day off.",
    "I like jazz.",
]
REQUESTS = [
    "What's the weather in Boston on Friday?",
    "Find me a concert nearby.",
    "Who wrote Hamlet?",
    "Turn off the kitchen lights.",
    "Play something relaxing.",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(CONTEXT + REQUESTS), min_size=1, max_size=6))
def test_sentences_split_into_requests_each_with_its_context(sentences: list[str]) -> None:
    parts = decompose(" ".join(sentences))
    requests = sum(s in REQUESTS for s in sentences)
    assert len(parts) == max(1, requests)
    if requests:
        assert all(any(r.rstrip(".?") in part for r in REQUESTS) for part in parts)


FOLLOW_WORDS = [
    "what",
    "about",
    "how",
    "tall",
    "is",
    "it",
    "its",
    "there",
    "and",
    "in",
    "oslo",
    "tomorrow",
    "on",
    "friday",
    "the",
    "eiffel",
    "tower",
    "tell",
    "me",
    "them",
    "turn",
    "off",
    "lights",
    "?",
    "héllo",
    "’s",
    "",
]
follow_text = st.one_of(
    st.lists(st.sampled_from(FOLLOW_WORDS), max_size=10).map(" ".join), st.text(max_size=80)
)


@settings(max_examples=400, deadline=None)
@given(follow_text, follow_text)
def test_a_rewrite_never_crashes_and_keeps_the_follow_ups_words(query: str, previous: str) -> None:
    found = rewrite(query, previous, subject(previous))
    if found is None:
        return
    assert found.rule in {"pronoun", "time", "place", "subject"}
    assert found.text.strip() and found.text != query
    if found.rule == "pronoun":  # the query, with one word replaced by the carried words
        assert found.carried in found.text and found.replaced.lower() in query.lower()
    else:  # the previous question, with the follow-up's words in it
        assert found.replaced in found.text and found.replaced in query


def test_known_examples() -> None:
    assert decompose("salt and pepper") == ["salt and pepper"]
    assert decompose("who wrote Romeo and Juliet") == ["who wrote Romeo and Juliet"]
    assert decompose("what is the weather today and also lights status") == [
        "what is the weather today",
        "lights status",
    ]
    found = extract_conditional("if it rains tomorrow, are the windows open?")
    assert found is not None
    assert (found.condition, found.consequence, found.remainder) == (
        "it rains tomorrow",
        "are the windows open",
        "",
    )
