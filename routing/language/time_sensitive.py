"""Does a question's answer change with time? The words that say so, and which ones.

An offline encyclopedia is a snapshot: "who is the current mayor", "how old is ...", "how
many novels has ... published" have an answer that was right when it was taken and may be
wrong now. The router sends such a part to a live source when one is enabled, and says it
did (routing.pipeline). This module only reads the words: `time_cue` returns the phrase
that made it time-sensitive, so the chain can show it, or None.

Two kinds of cue. Explicit ones say "now" outright ("the current", "latest", "this year",
"how old is") and hold whatever else the question says. Implicit ones are about things
that move (who holds an office, a population, a record, a ranking, a tally "has won")
and hold only when nothing anchors the question in the past: a year ("in 1990") or a past tense
("who was the president") makes the answer fixed.

The vocabulary is data (routing/words.yaml, `time_sensitive`); the grammar is here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from routing.language.lexicon import Phrases, lexicon, phrases

_WORDS = lexicon().time_sensitive
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_YEAR = re.compile(r"\b(?:1[0-9]{3}|20[0-9]{2})s?\b")

EXPLICIT = ("present", "recent", "relative", "age")
_PHRASES: dict[str, Phrases] = {
    "present": phrases(_WORDS.present),
    "recent": phrases(_WORDS.recent),
    "relative": phrases(_WORDS.relative),
    "age": phrases(_WORDS.age),
    "holding": phrases(_WORDS.holding),
    "measures": phrases(_WORDS.measures),
}
_ROLES = phrases(_WORDS.roles)
_ROLE_FRAMES = phrases(_WORDS.role_frames)
_SUPERLATIVES = phrases(_WORDS.superlatives)
_PRESENT_FRAMES = phrases(_WORDS.present_frames)
_ROLE_REACH = 6  # words between "who is" and the role ("who is france's prime minister")


@dataclass(frozen=True, slots=True)
class TimeCue:
    """Why a question is time-sensitive: the words that said so, and what kind they are."""

    cue: str  # the query's own words, lower case ("the current", "how many novels has")
    # present | recent | relative | age | last | holding | measures | role | count |
    # perfect | superlative
    kind: str


def tokens(text: str) -> list[str]:
    """Lower-case words; a hyphen separates ("best-selling" is "best selling")."""
    return _TOKEN.findall(text.lower().replace("’", "'").replace("-", " "))


def _at(words: list[str], start: int, phrase: tuple[str, ...]) -> bool:
    return tuple(words[start : start + len(phrase)]) == phrase


def _find(words: list[str], candidates: Phrases, start: int = 0) -> tuple[int, int] | None:
    """The first (then longest) phrase of `candidates` in `words` from `start`: (from, to)."""
    for index in range(start, len(words)):
        found = [p for p in candidates if _at(words, index, p)]
        if found:
            return index, index + max(len(p) for p in found)
    return None


def _is_noun(words: list[str], index: int) -> bool:
    """'current' or 'now' used as other than "as of now": the electric current, a river's
    current, "now" opening the sentence ("now tell me ...")."""
    word = words[index]
    if word == "now":
        return index == 0 or (index + 1 < len(words) and words[index + 1] == "that")
    if word != "current":
        return False
    before = words[index - 1] if index > 0 else ""
    after = words[index + 1] if index + 1 < len(words) else ""
    return before in _WORDS.noun_current or after in ("", "of", "in", "is", "flow", "flows")


def _explicit(words: list[str]) -> TimeCue | None:
    for kind in EXPLICIT:
        start = 0
        while (hit := _find(words, _PHRASES[kind], start)) is not None:
            begin, end = hit
            if kind == "present" and _is_noun(words, begin):
                start = begin + 1
                continue
            if begin > 0 and words[begin - 1] == "the" and kind in ("present", "recent"):
                begin -= 1  # "the current", "the latest": the phrase as it reads
            return TimeCue(" ".join(words[begin:end]), kind)
    return None


def _anchored(text: str, words: list[str]) -> bool:
    """A year or a past tense fixes the answer: "in 1990", "who was", "did it"."""
    return _YEAR.search(text) is not None or any(w in _WORDS.past for w in words)


def _role(words: list[str]) -> TimeCue | None:
    """'who is the mayor of ...': an office asked of now (not 'the first mayor')."""
    frames = [f for f in _ROLE_FRAMES if _at(words, 0, f)]
    if not frames:
        return None
    start = max(len(f) for f in frames)
    for index in range(start, min(len(words), start + _ROLE_REACH)):
        if words[index] in _WORDS.fixed_roles or words[index] in _WORDS.role_ends:
            # "the first mayor"; or the asked noun ended before any role: "who is the
            # father of queen victoria" asks for a father, "queen" only names his child
            return None
        role = max((r for r in _ROLES if _at(words, index, r)), key=len, default=None)
        if role is not None:
            end = index + len(role)
            if _title(words, index, end, bare=index == start):
                return None  # "who is queen victoria": a person, not an office
            return TimeCue(" ".join(words[:end]), "role")
    return None


def _title(words: list[str], index: int, end: int, bare: bool) -> bool:
    """A role right after "who is", with no "the", and a name after it: a title."""
    return (
        bare
        and words[index - 1] != "the"
        and end < len(words)
        and words[end] not in _WORDS.office_after
    )


def _count(words: list[str]) -> TimeCue | None:
    """'how many novels has she published': a count up to now."""
    hit = _find(words, (("how", "many"), ("how", "much")))
    if hit is None:
        return None
    for index in range(hit[1], len(words)):
        if words[index] in _WORDS.perfect:
            return TimeCue(" ".join(words[hit[0] : index + 1]), "count")
    return None


def _perfect(words: list[str]) -> TimeCue | None:
    """'who has won the most ...', 'which country has the most ...': a tally up to now."""
    if words[0] not in _WORDS.perfect_subjects:
        return None
    for index in range(1, min(len(words), 4)):
        if words[index] in _WORDS.perfect:
            return TimeCue(" ".join(words[: index + 1]), "perfect")
    return None


def _superlative(words: list[str]) -> TimeCue | None:
    """'what is the largest city in ...': a ranking, asked of now."""
    frames = [f for f in _PRESENT_FRAMES if _at(words, 0, f)]
    if not frames:
        return None
    start = max(len(f) for f in frames)
    hit = _find(words[: start + 3], _SUPERLATIVES, start)
    if hit is None:
        return None
    return TimeCue(" ".join(words[: hit[1]]), "superlative")


def _last(words: list[str]) -> TimeCue | None:
    """'when did they last win': the latest time so far."""
    if words[:2] != ["when", "did"] or "last" not in words[2:]:
        return None
    return TimeCue("when did ... last", "last")


def time_cue(text: str) -> TimeCue | None:
    """The words of `text` that make its answer depend on when it is asked, or None."""
    words = tokens(text)
    if not words:
        return None
    found = _explicit(words) or _last(words)
    if found is not None or _anchored(text, words):
        return found
    for kind in ("holding", "measures"):
        hit = _find(words, _PHRASES[kind])
        if hit is not None:
            return TimeCue(" ".join(words[hit[0] : hit[1]]), kind)
    return _role(words) or _count(words) or _perfect(words) or _superlative(words)
