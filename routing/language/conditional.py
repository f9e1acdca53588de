"""Pull a condition out of a query: "if it rains tomorrow, are the windows open?".

The condition ("it rains tomorrow") and the consequence ("are the windows open") become
two sub-parts; the condition runs first and its answer is attached to the consequence's.
Whatever follows the conditional sentence is the remainder, routed as ordinary parts.
All three are substrings of the query.

A condition about the asker ("if I have five dollars, how much is that in euros", "if we
leave at six, will we hit traffic") is a premise of the question, not something a source
can check first: the sentence stays whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from routing.language.lexicon import lexicon
from routing.language.text import CLAUSE_TRIM, CLAUSE_WORD

# Words that open a request, and "when is ..." questions: the decomposition's own lists
# (routing/words.yaml), read here without importing the decomposer that uses this module.
OPENERS = lexicon().decompose.openers
QUESTION_AFTER_WHEN = lexicon().decompose.question_after_when

_LEADING = re.compile(r"^\s*(?:if|when|whenever|unless|in case)\s+", re.IGNORECASE)
# A trailing "when" is far more often a time clause than a condition to check first
# ("who will cry when you die", "turn on the heating when I get home"): only "if",
# "unless" and "in case" split a sentence from behind.
_TRAILING = re.compile(r"\s(?:if|unless|in case)\s+", re.IGNORECASE)

# "then" or a comma ends the condition when present.
_CONDITION_END = re.compile(r",|\bthen\b", re.IGNORECASE)
# The consequence ends at a sentence end or a hard separator; the rest is the remainder.
_CONSEQUENCE_END = re.compile(r"[?!.;]|\band\s+(?:also|then)\b", re.IGNORECASE)
_WORDS = lexicon().conditional  # routing/words.yaml
# "tell me if", "check if": an embedded question ("whether"), not a condition.
_WHETHER_VERBS = _WORDS.whether_verbs
# The asker as subject: the condition is a premise, not a fact to look up.
_PREMISE_SUBJECTS = _WORDS.premise_subjects


def _phrases(words: frozenset[str]) -> re.Pattern[str]:
    """Any of `words` (phrases of single-spaced words) as whole words, any spacing."""
    alternatives = sorted((r"\s+".join(map(re.escape, w.split())) for w in words), key=len)
    return re.compile(r"(?<![\w'’])(?:" + "|".join(reversed(alternatives)) + r")(?![\w'’])", re.I)


_MARKERS = _phrases(_WORDS.markers)


@lru_cache(maxsize=2048)
def condition_words(text: str) -> str | None:
    """The words that make something in `text` depend on a condition ("only if", "provided",
    "should it"), wherever they stand; None without any. A command in such a request is not
    carried out, whether or not `extract_conditional` could say what the condition is (an
    asker's premise, "if i am late", is no fact to look up, but still a condition; "if you
    can" is withheld too: when in doubt, nothing is done)."""
    found = _MARKERS.search(text.replace("’", "'"))
    return None if found is None else " ".join(found.group().lower().split())


_DOUBTS = _phrases(_WORDS.doubts)
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "`": "'", "´": "'"})  # "don`t" is "don't"


@lru_cache(maxsize=2048)
def doubt_words(text: str) -> str | None:
    """The words that deny, take back or only imagine a command in `text` ("do not",
    "actually", "never mind", "imagine"), wherever they stand; None without any. Splitting
    a request can leave a clean command beside such words ("do not, under any
    circumstances, | unlock the door"), so the gate reads the whole request for them."""
    found = _DOUBTS.search(text.translate(_APOSTROPHES))
    return None if found is None else " ".join(found.group().lower().split())


@dataclass(frozen=True, slots=True)
class Conditional:
    """`negated` for "unless": the consequence is meant when the condition does NOT hold."""

    condition: str
    consequence: str
    remainder: str
    negated: bool = False


def _negates(opener: str) -> bool:
    return opener.strip().lower() == "unless"


def _clean(text: str) -> str:
    return text.strip(CLAUSE_TRIM)


def _is_premise(condition: str) -> bool:
    first = CLAUSE_WORD.match(condition.lstrip())
    return first is not None and first.group().lower().replace("’", "'") in _PREMISE_SUBJECTS


def _split_leading(text: str) -> tuple[str, str] | None:
    """'if A, B' / 'if A then B' / 'if A B' (B opens like a request) -> (A, B+rest)."""
    head = _LEADING.match(text)
    if not head:
        return None
    body = text[head.end() :]
    if _is_premise(body):
        return None
    first = CLAUSE_WORD.match(body)
    if (
        head.group().strip().lower().startswith("when")
        and first is not None
        and first.group().lower() in QUESTION_AFTER_WHEN
    ):
        return None
    marker = _CONDITION_END.search(body)
    if marker and marker.start() > 0:
        return body[: marker.start()], body[marker.end() :]
    # No comma: the consequence starts at the first request opener after two words.
    words = list(CLAUSE_WORD.finditer(body))
    for index, word in enumerate(words):
        if index >= 2 and word.group().lower() in OPENERS:
            return body[: word.start()], body[word.start() :]
    return None


def extract_conditional(text: str) -> Conditional | None:
    """The condition, consequence and remainder of `text`, or None if it has no condition."""
    leading = _split_leading(text)
    if leading:
        condition, rest = leading
        end = _CONSEQUENCE_END.search(rest)
        consequence, remainder = (rest[: end.start()], rest[end.end() :]) if end else (rest, "")
        condition, consequence = _clean(condition), _clean(consequence)
        if condition and consequence:
            head = _LEADING.match(text)
            negated = head is not None and _negates(head.group())
            return Conditional(condition, consequence, _clean(remainder), negated)
        return None
    sentence_end = _CONSEQUENCE_END.search(text)
    sentence = text[: sentence_end.start()] if sentence_end else text
    remainder = text[sentence_end.end() :] if sentence_end else ""
    trailing = _TRAILING.search(sentence)
    if not trailing:
        return None
    before = [w.lower() for w in CLAUSE_WORD.findall(sentence[: trailing.start()])]
    if len(before) < 2 or before[0] not in OPENERS or before[-1] in _WHETHER_VERBS:
        return None
    consequence = _clean(sentence[: trailing.start()])
    condition = _clean(sentence[trailing.end() :])
    if not condition or _is_premise(condition):
        return None
    return Conditional(condition, consequence, _clean(remainder), _negates(trailing.group()))
