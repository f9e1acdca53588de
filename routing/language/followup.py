"""A follow-up asked as the question it stands for: "how tall is it?" after "tell me about
the eiffel tower" is asked as "how tall is the eiffel tower?".

A source answers words, not conversations, so a follow-up is rewritten before it is routed,
from the session's previous turn (its text and its subject), by one of four small rules,
each named in the `rewritten` event:

- `pronoun`: a pronoun that stands for the previous subject is replaced by it ("how tall is
  it?" -> "how tall is the eiffel tower?"; "its" -> "the eiffel tower's"); "there" by the
  previous place ("is it cold there?" -> "is it cold in oslo?");
- `time`: "what about tomorrow?" is the previous question for another time: its time
  expression is replaced, or the new one added ("what's the weather in oslo tomorrow");
- `place`: "and in bergen?" the same for another place ("what's the weather in bergen");
- `subject`: "what about the louvre?" the same about another thing ("tell me about the
  louvre"); a bare name after a question with a place replaces the place.

No coreference model: the previous subject is the noun phrase after the request's opening
words ("tell me about", "how tall is", "turn on"), up to a preposition of place, a time or
a verb. Where a rule does not apply, nothing is rewritten and the session stage may still
route the follow-up where the previous turn went. The vocabulary is data
(routing/words.yaml, `followup`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from routing.language.decompose import TOPIC_OPENERS, is_complete_request
from routing.language.discourse import references
from routing.language.lexicon import lexicon, phrases

_WORDS = lexicon().followup
_FRAMES = sorted(phrases(_WORDS.frames), key=len, reverse=True)  # longest first
_ENDINGS = sorted(phrases(_WORDS.endings), key=len, reverse=True)
_SUBJECT_PRONOUNS = _WORDS.subject_pronouns
_POSSESSIVES = _WORDS.possessives
_PLACE_PRONOUNS = _WORDS.place_pronouns
_TIME_HEADS = _WORDS.time_heads
_TIME_WORDS = _WORDS.time_words | _TIME_HEADS
_PLACE_PREPOSITIONS = _WORDS.place_prepositions
_SUBJECT_FRAMES = _WORDS.subject_frames
_AUXILIARIES = _WORDS.auxiliaries
_SUBJECT_ENDS = _WORDS.subject_ends
_DETERMINERS = frozenset({"the", "a", "an", "my", "our", "your", "this", "that"})
_NOT_SUBJECTS = (
    _SUBJECT_PRONOUNS | _POSSESSIVES | _PLACE_PRONOUNS | _AUXILIARIES | {"you", "i", "me", "we"}
)
# Words that open another clause of the same part ("open the door and lock it", "turn
# off the tv when it ends"); "and"/"or" only before a word that is no determiner ("the
# door and the window" is one noun phrase). Commas, semicolons and colons do too.
_CLAUSE_OPENERS = frozenset(
    {"and", "or", "but", "then", "so", "if", "when", "unless", "while", "once", "because"}
)
_CLAUSE_MARKS = frozenset(",;:")
# A noun phrase that may be a pronoun's antecedent opens with one of these ("the garage
# door", "my car"); one governed by a preposition is a place or a part of something else
# ("in the kitchen, turn it off").
_ANTECEDENT_DETERMINERS = frozenset({"the", "a", "an", "my", "our", "your"})
_GOVERNING = _PLACE_PREPOSITIONS | {"of", "on", "to", "with", "by", "into", "onto", "over"}
_MAX_SUBJECT_WORDS = 8
_MAX_FRAGMENT_WORDS = 3  # "tomorrow?", "in bergen?": a follow-up without an opening

_TOKEN = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?", re.IGNORECASE)
_END_PUNCTUATION = " \t\r\n?!.,;:"


@dataclass(frozen=True, slots=True)
class _Token:
    word: str  # lower case, straight apostrophe
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The question a follow-up stands for, and what the rule carried over."""

    text: str
    rule: str  # pronoun | time | place | subject
    carried: str  # the previous turn's words put in ("the eiffel tower", "in oslo")
    replaced: str  # the follow-up's words they stand for ("it", "tomorrow")


def _tokens(text: str) -> list[_Token]:
    return [
        _Token(m.group().lower().replace("’", "'"), m.start(), m.end())
        for m in _TOKEN.finditer(text)
    ]


def _span(text: str, tokens: list[_Token]) -> str:
    return text[tokens[0].start : tokens[-1].end] if tokens else ""


def _time_runs(tokens: list[_Token]) -> list[tuple[int, int]]:
    """(start, end) token ranges of the time expressions: runs of time words and numbers
    ending with a head ("on friday", "the day after tomorrow", "in 3 days"); "the" or "at"
    alone is no time."""
    runs: list[tuple[int, int]] = []
    index = 0
    while index < len(tokens):
        end = index
        while end < len(tokens) and (tokens[end].word in _TIME_WORDS or tokens[end].word.isdigit()):
            end += 1
        last = end
        while last > index and tokens[last - 1].word not in _TIME_HEADS:
            last -= 1  # "for the week | in oslo": a run ends with its head
        if last > index:
            runs.append((index, last))
        index = max(end, index + 1)
    return runs


def _is_time(tokens: list[_Token]) -> bool:
    return bool(tokens) and _time_runs(tokens) == [(0, len(tokens))]


def _place_range(tokens: list[_Token]) -> tuple[int, int] | None:
    """The first place phrase ("in oslo", "near the station"), up to a time expression or
    the end; not one that is itself a time ("in 3 days", "for tomorrow")."""
    times = _time_runs(tokens)
    for index, token in enumerate(tokens[:-1]):
        if token.word not in _PLACE_PREPOSITIONS:
            continue
        if any(start <= index < end for start, end in times):
            continue
        end = next((start for start, _ in times if start > index), len(tokens))
        if end > index + 1:
            return index, end
    return None


def subject(text: str) -> str | None:
    """The noun phrase a request is about: "the eiffel tower" in "tell me about the eiffel
    tower" or "when was the eiffel tower built"; "the kitchen lights" in "turn on the
    kitchen lights". None when there is none ("what time is it")."""
    tokens = _tokens(text)
    index = 0
    while index < len(tokens) and tokens[index].word in _SUBJECT_FRAMES:
        word = tokens[index].word
        index += 1
        if word in {"how", "what", "which"}:
            # "how tall is", "what colour is", "how many moons does": through the auxiliary
            ahead = [t.word for t in tokens[index : index + 3]]
            aux = next((i for i, w in enumerate(ahead) if w in _AUXILIARIES), None)
            if aux is not None:
                index += aux + 1
                break
        if word in {"who", "what", "which"} and index < len(tokens):
            following = tokens[index].word  # "who wrote the hobbit": past the verb
            if following not in _SUBJECT_FRAMES and following not in _DETERMINERS:
                index += 1
                break
    start = index
    times = {i for a, b in _time_runs(tokens) for i in range(a, b)}
    while index < len(tokens) and index - start < _MAX_SUBJECT_WORDS:
        word = tokens[index].word
        if (
            index in times
            or word in _SUBJECT_ENDS
            or (word in _PLACE_PREPOSITIONS and index > start)
        ):
            break
        index += 1
    words = tokens[start:index]
    if not words or words[0].word in _NOT_SUBJECTS | _PLACE_PREPOSITIONS:
        return None  # "what time is it", "what happened in 1066"
    if all(t.word in _DETERMINERS for t in words):
        return None
    return _span(text, words)


def _replace(text: str, start: int, end: int, new: str) -> str:
    return f"{text[:start]}{new}{text[end:]}"


def _append(text: str, addition: str) -> str:
    return f"{text.rstrip(_END_PUNCTUATION)} {addition}"


def _clause_start(text: str, tokens: list[_Token], index: int) -> int:
    """The index of the first token of the clause that token `index` is in (0 when the
    part is one clause up to it)."""
    for at in range(index, 0, -1):
        if _CLAUSE_MARKS & set(text[tokens[at - 1].end : tokens[at].start]):
            return at
        word = tokens[at - 1].word
        if word in _CLAUSE_OPENERS and not (
            word in {"and", "or"} and tokens[at].word in _DETERMINERS
        ):
            return at
    return 0


def _has_antecedent(text: str, tokens: list[_Token], index: int) -> bool:
    """Whether an earlier clause of the part itself names a thing the pronoun at `index`
    can stand for ("the garage door, open it", "open the door and lock it"): a noun phrase
    with a determiner, neither a time ("the weekend") nor governed by a preposition. A
    noun phrase in the pronoun's own clause is not one: "what is the population of it"."""
    start = _clause_start(text, tokens, index)
    times = {i for a, b in _time_runs(tokens) for i in range(a, b)}
    for at in range(start - 1):
        if (
            tokens[at].word in _ANTECEDENT_DETERMINERS
            and at not in times
            and (at == 0 or tokens[at - 1].word not in _GOVERNING)
            and tokens[at + 1].word not in _NOT_SUBJECTS | _CLAUSE_OPENERS | {"same"}
        ):
            return True
    return False


def _pronoun(query: str, previous: str, previous_subject: str | None) -> Rewrite | None:
    """'how tall is it' -> 'how tall is the eiffel tower'; 'is it cold there' -> '... in oslo'.
    Only a word the discourse check counts as pointing back (not the weather's "it"), and
    not a pronoun the part's own earlier clause gives a thing to stand for."""
    tokens = _tokens(query)
    previous_tokens = _tokens(previous)
    for index in references([t.word for t in tokens]):
        token = tokens[index]
        if token.word in _PLACE_PRONOUNS:
            place = _place_range(previous_tokens)
            if place is None:
                continue
            carried = _span(previous, previous_tokens[place[0] : place[1]])
        elif token.word in _SUBJECT_PRONOUNS | _POSSESSIVES:
            if previous_subject is None or _has_antecedent(query, tokens, index):
                continue
            carried = previous_subject + ("'s" if token.word in _POSSESSIVES else "")
        else:
            continue
        return Rewrite(
            _replace(query, token.start, token.end, carried), "pronoun", carried, token.word
        )
    return None


def _strip_frame(tokens: list[_Token]) -> tuple[list[_Token], bool]:
    """The tokens after a follow-up opening ("what about", "and") and before an ending
    ("instead"), and whether there was an opening."""
    words = [t.word for t in tokens]
    opened = False
    for frame in _FRAMES:
        if tuple(words[: len(frame)]) == frame:
            tokens, words, opened = tokens[len(frame) :], words[len(frame) :], True
            break
    for ending in _ENDINGS:
        if len(words) > len(ending) and tuple(words[-len(ending) :]) == ending:
            tokens = tokens[: -len(ending)]
            break
    return tokens, opened


def _changed_slot(query: str, previous: str, previous_subject: str | None) -> Rewrite | None:
    """'what about tomorrow?' / 'and in bergen?' / 'what about the louvre?': the previous
    question with its time, place or subject changed."""
    tokens, opened = _strip_frame(_tokens(query))
    if not tokens:
        return None
    fragment = _span(query, tokens)
    if is_complete_request(fragment):
        return None  # "and what's the news": a question of its own
    if not opened and len(tokens) > _MAX_FRAGMENT_WORDS:
        return None
    previous_tokens = _tokens(previous)
    if _is_time(tokens):
        runs = _time_runs(previous_tokens)
        if runs:
            start, end = runs[-1]
            old = previous_tokens[start:end]
            text = _replace(previous, old[0].start, old[-1].end, fragment)
            return Rewrite(text, "time", _span(previous, old), fragment)
        return Rewrite(_append(previous, fragment), "time", "", fragment)
    place = _place_range(previous_tokens)
    is_place = tokens[0].word in _PLACE_PREPOSITIONS and len(tokens) > 1
    if is_place:
        if place is None:
            return Rewrite(_append(previous, fragment), "place", "", fragment)
        old = previous_tokens[place[0] : place[1]]
        text = _replace(previous, old[0].start, old[-1].end, fragment)
        return Rewrite(text, "place", _span(previous, old), fragment)
    if not opened:
        return None  # a bare word ("hmm") is not a follow-up we can place
    if place is not None and tokens[-1].word not in TOPIC_OPENERS:
        # "what about bergen?" after the weather in oslo: the same preposition, a new place
        old = previous_tokens[place[0] + 1 : place[1]]
        text = _replace(previous, old[0].start, old[-1].end, fragment)
        return Rewrite(text, "place", _span(previous, old), fragment)
    at = previous.find(previous_subject) if previous_subject else -1
    if previous_subject is None or at < 0:
        return None
    text = _replace(previous, at, at + len(previous_subject), fragment)
    return Rewrite(text, "subject", previous_subject, fragment)


def rewrite(query: str, previous: str, previous_subject: str | None) -> Rewrite | None:
    """The question `query` stands for after the turn `previous` (whose subject, see
    `subject`, is `previous_subject`), or None when no rule applies."""
    if not query.strip() or not previous.strip():
        return None
    found = _pronoun(query, previous, previous_subject) or _changed_slot(
        query, previous, previous_subject
    )
    if found is None or found.text.strip() == query.strip():
        return None
    return found
