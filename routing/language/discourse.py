"""Does a query lean on what was said before? ("what about tomorrow?", "why?", "is it bigger?")

Such a query can't be routed on its words alone: "and in the kitchen?" matches a keyword,
but means "the same question as before, about the kitchen". When one is detected the
keyword decision is escalated to the LLM (which sees the previous turn), decisions about it
are not cached, and with a session it may inherit the previous turn's route.

Four kinds, checked cheaply with patterns (the answer is the kind, or None):
- follow_up: "and ...", "what about ...", "how about ...", "same for ...", "... instead";
- reference: a pronoun pointing outside the query ("turn it off", "how old is he");
- why: "why ..." questions ask about an earlier answer as often as not;
- comparison: "compared to", "better than", "versus", "which is bigger".
"""

from __future__ import annotations

import re

from routing.language.lexicon import lexicon
from routing.language.lexicon import phrases as word_phrases
from routing.language.text import words as split_words

_WORDS = lexicon().discourse  # routing/words.yaml
_FOLLOW_UP_OPENERS = word_phrases(_WORDS.follow_up_openers)
_FOLLOW_UP_ENDINGS = word_phrases(_WORDS.follow_up_endings)
# Pronouns that point at something said earlier. "it" is left out when it is the
# weather's dummy subject ("is it going to rain", "it's cold"): see `_dummy_it`.
_REFERENCES = _WORDS.references
_DETERMINER_USES = _WORDS.determiner_uses
_COMPARISON = re.compile(
    r"\b(?:compare[ds]?|comparison|compared\s+(?:to|with)|versus|vs\.?|better\s+than|worse\s+than|"
    r"(?:more|less|bigger|smaller|older|younger|taller|shorter|warmer|colder|hotter|cooler|"
    r"cheaper|faster|slower|higher|lower|longer|larger)\s+than|which\s+(?:is|one\s+is)\s+"
    r"(?:better|bigger|older|larger|taller|more|higher|cheaper)|difference\s+between)\b"
)
_WEATHER_IT = _WORDS.weather_it
_CLOCK_WORDS = _WORDS.clock_words
_CLOCK_ADVERBS = _WORDS.clock_adverbs


def _starts(words: list[str], phrases: tuple[tuple[str, ...], ...]) -> bool:
    return any(tuple(words[: len(p)]) == p for p in phrases)


def _ends(words: list[str], phrases: tuple[tuple[str, ...], ...]) -> bool:
    return any(len(words) > len(p) and tuple(words[-len(p) :]) == p for p in phrases)


def _dummy_it(words: list[str], index: int) -> bool:
    """'it' as the subject of weather or time ("will it rain", "it's cold", "what time is
    it"), not a reference."""
    window = words[index + 1 : index + 4]
    if any(w in _CLOCK_WORDS for w in words[max(0, index - 3) : index]) and all(
        w in _CLOCK_ADVERBS for w in words[index + 1 :]
    ):
        return True
    return any(w in _WEATHER_IT for w in window) or words[index] == "it's"


def references(words: list[str]) -> list[int]:
    """The indices of the words that point at something said earlier ("turn it off": 1)."""
    found: list[int] = []
    for index, word in enumerate(words):
        base = word.removesuffix("'s")
        if base not in _REFERENCES and word not in _REFERENCES:
            continue
        if base == "it" and _dummy_it(words, index):
            continue
        if base in _DETERMINER_USES:
            # "that" as a relative pronoun or "there is"/"those movies": only a bare
            # trailing "that"/"there" ("turn that off", "what's the weather there") refers.
            if index == len(words) - 1 or (
                base == "that"
                and index + 1 < len(words)
                and words[index + 1] in {"one", "off", "on", "up"}
            ):
                found.append(index)
            continue
        found.append(index)
    return found


def _has_reference(words: list[str]) -> bool:
    return bool(references(words))


def dependency(query: str) -> str | None:
    """The kind of discourse dependency of `query`, or None when it stands on its own."""
    words = split_words(query)
    if not words:
        return None
    if words[0] == "why" or (len(words) > 1 and words[:2] == ["and", "why"]):
        return "why"
    if _starts(words, _FOLLOW_UP_OPENERS) or _ends(words, _FOLLOW_UP_ENDINGS):
        return "follow_up"
    if _COMPARISON.search(" ".join(words)):
        return "comparison"
    if _has_reference(words):
        return "reference"
    return None


def is_follow_up(query: str, max_fragment_words: int = 3) -> bool:
    """A query a session may complete: discourse-dependent, or a bare fragment ("tomorrow?")."""
    if dependency(query) is not None:
        return True
    words = split_words(query)
    return 0 < len(words) <= max_fragment_words
