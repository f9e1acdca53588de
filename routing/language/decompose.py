"""Split a compound query into parts that can each be routed on their own.

Hard separators (";", "and also", "and then") always split. A sentence end splits only
between two requests: a sentence of context ("I'm planning a trip.", see
routing/language/sentences.py) or one that leans on the sentence before ("How tall is it?")
stays with its request. Soft ones ("and", "also", ",", "then") split only between two
complete requests, so "salt and pepper" and "who wrote Romeo and Juliet" stay whole while
"turn off the lights and what's the weather" splits. A request opens with a question word,
an imperative or a request's topic ("weather in Oslo", "the latest tech headlines"); two
paired modifiers joined ("the upper and lower falls") are one phrase. After "and", a condition with its consequence ("and if it
rains close the windows") opens one too, while a verb and a pronoun ("and use it", ", turn
it up") continue the request before. Where the grammar sees one request, the routing rules
may still see two: given `claims` (the keyword stage's verdict on a clause), a soft
separator between two clauses claimed by different routes splits ("what will the weather
be in Lago Vista and the last hawk gets three out of six stars"). Every part is a
substring of the query, and splitting a part again returns it unchanged.

Each rule here pays for itself on bench/decomposition.py's compounds and singles (its
`--ablate` table): one that changes nothing there, or whose absence helps, does not belong.
The exceptions are the sentence-end rules for context, greetings and a sentence leaning on
the one before, and a joining word after a sentence end: those sentences cannot occur among
that bench's rows (each is a request of its own), so it cannot judge them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from routing.language.conditional import extract_conditional
from routing.language.discourse import dependency
from routing.language.lexicon import lexicon
from routing.language.sentences import (
    first_person_request,
    is_context,
    is_greeting,
    is_question,
    is_statement,
)
from routing.language.text import CLAUSE_TRIM, CLAUSE_WORD

_WORDS = lexicon().decompose  # routing/words.yaml: what each list is for
# Words that open a request on their own: questions, polite forms and imperatives.
OPENERS = _WORDS.openers
# "when is ...", "when did ...": a question about a time, not a condition.
QUESTION_AFTER_WHEN = _WORDS.question_after_when
# Nouns that head a request on their own, and the words that may come before one.
TOPIC_OPENERS = _WORDS.topic_openers
_TOPIC_MODIFIERS = _WORDS.topic_modifiers
# A clause made only of wake words and fillers ("hey google") is not a request on its own.
_FILLERS = _WORDS.wake_words | _WORDS.fillers
_ARTICLES = _WORDS.articles
_PAIRED = _WORDS.paired_modifiers
_PREPOSITIONS = _WORDS.prepositions
_WH_WORDS = _WORDS.wh_words
# Words that continue the clause before a comma rather than start a new one.
_CONTINUATIONS = _WORDS.continuations
# A clause opening with one of these is a condition, not a request: "if it rains, ...".
CONDITION_OPENERS = _WORDS.condition_openers
# "On average, ...", "In 1988, ...": an introduction to the clause after it.
_INTRODUCTIONS = _WORDS.introductions
_IN_PLACE_QUESTIONS = _WORDS.in_place_questions
_RELATIVES = _WORDS.relatives
_PARTICIPLES = _WORDS.participles
_SPEECH_VERBS = _WORDS.speech_verbs

_HARD = r";|\band\s+(?:also|then)\b"
# A sentence end: "?" or "!", or a full stop after a number or two letters ("a score of 5.",
# "at 8 pm.", not "u. s. d.") and before a word; an abbreviation ("Mr.") is no end (below).
_STOP = r"(?<=[?!])\s+(?=\S)|(?:(?<=\w{2}\.)|(?<=\d\.))\s+(?=[A-Za-z])"
# The words that may join two requests (with ","), and do split them when both are whole.
_SOFT_WORDS = frozenset({"also", "and", "then"})
_SOFT = ",|" + "|".join(rf"\b{word}\b" for word in sorted(_SOFT_WORDS))
_SEPARATORS = re.compile(rf"(?P<hard>{_HARD})|(?P<stop>{_STOP})|(?P<soft>{_SOFT})", re.IGNORECASE)
_SENTENCE_ENDS = re.compile(_STOP)
_HARD_SEPARATOR = re.compile(_HARD, re.IGNORECASE)
# The discourse dependencies that tie a sentence to the one before: "How tall is it?",
# "What about Friday?" continue the request before them; "Why is the sky blue?" need not.
_LEANS_BACK = frozenset({"reference", "follow_up"})
_LEANING_WORDS = 6
_ABBREVIATIONS = lexicon().sentences.abbreviations


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    # Split from the part before only because the keyword rules claim the two for
    # different routes: (the route before, this part's route). None: the grammar split.
    claimed: tuple[str, str] | None = None


def _words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in CLAUSE_WORD.findall(text)]


def is_complete_request(text: str) -> bool:
    """A clause that could be asked on its own: opens like a request and has substance."""
    words = _words(text)
    if len(words) < 2:
        return False
    if words[0] in {"it's", "its"}:
        return True
    if words[0] in _PREPOSITIONS and words[1] in _WH_WORDS:
        return True  # "at what age ...", "in which year ..."
    return words[0] in OPENERS or words[0] in TOPIC_OPENERS or _topic_phrase(words)


def _topic_phrase(words: list[str]) -> bool:
    """Three words or more whose head, after its modifiers, is a request's topic: "recent
    tech headlines", "the weather in homestead". A bare "weather" or "the news" is not
    enough."""
    if len(words) < 3:
        return False
    index = 0
    while index < len(words) and index < 4 and words[index] in _TOPIC_MODIFIERS:
        index += 1
    return 0 < index < len(words) and words[index] in TOPIC_OPENERS


def _introduces(words: list[str]) -> bool:
    """An adverbial introduction ("on average", "in the novel the clique", "according to
    legend"): a preposition and no verb or question word we know after it."""
    return (
        bool(words)
        and words[0] in _INTRODUCTIONS
        and not any(w in OPENERS or w in _WH_WORDS for w in words[1:])
    )


def _asks_in_place(text: str) -> bool:
    """The rest of a question whose subject came before the separator: a clause that does
    not open like a request, or opens a relative clause, and asks later on ("derives from
    which language", "which is part of the museum, was built in what year", "died
    where"); or a predicate ("was nicknamed the great profile"). `text`: the rest of the
    sentence after the separator."""
    words = _words(text)
    if len(words) < 2:
        return False
    if words[0] in QUESTION_AFTER_WHEN and _participle(words[1]):
        return True  # "..., was nicknamed ...", "..., was originally made ..."
    if not (words[0] in _RELATIVES or not is_complete_request(text)):
        return False
    # The first question word decides. One that opens a clause of its own ("..., and
    # what's the weather") does not ask in place, and nothing after it does: the words
    # after it belong to that clause.
    asked = next((i for i, w in enumerate(words[1:], start=1) if w in _IN_PLACE_QUESTIONS), None)
    return asked is not None and words[asked - 1] not in _SOFT_WORDS


def _participle(word: str) -> bool:
    """A verb's participle or an adverb after an auxiliary: a predicate ("was built"), not
    a question's subject ("was it")."""
    return word in _PARTICIPLES or (len(word) > 4 and word.endswith(("ed", "en", "ly")))


def _sentence_from(query: str, position: int) -> str:
    """The text from `position` to the end of its sentence."""
    end = _SENTENCE_ENDS.search(query, position)
    return query[position : end.start() if end else len(query)]


def _rest_of_sentence(query: str, position: int) -> str:
    """The text from `position` to the end of its sentence or the next hard separator."""
    sentence = _sentence_from(query, position)
    hard = _HARD_SEPARATOR.search(sentence)
    return sentence[: hard.start()] if hard else sentence


def _can_stand_alone(left: str) -> bool:
    """The text before a soft separator could end a request (not a lone word, a greeting,
    a condition or an introduction)."""
    words = _words(left)
    if len(words) < 2 or all(w in _FILLERS for w in words) or _introduces(words):
        return False
    if is_greeting(words):
        return False  # "sorry, one more thing, ..."
    if words[0] in {"when", "whenever"} and words[1] in QUESTION_AFTER_WHEN:
        return True  # "when will it be hot here": a question, not a condition
    if words[0] in CONDITION_OPENERS:
        # "if I have five dollars how much is that in euros": the condition has its
        # question, so the sentence is complete
        return any(w in _WH_WORDS for w in words[2:])
    return True


def _quotes(left: str) -> bool:
    """The text before a comma ends with a verb of saying ("what rapper once said, ..."):
    what follows is the quotation, part of the same request."""
    words = _words(left)
    return bool(words) and words[-1] in _SPEECH_VERBS


def _coordinated(left: str, right: str) -> bool:
    """Two modifiers of a pair ("the upper and lower peninsulas"): one phrase, not two
    requests. A modifier that is
    also a verb opens a request when an article or a pronoun follows it, as its object
    ("... the front door and open the window")."""
    before, after = _words(left), _words(right)
    if not (before and after):
        return False
    takes_object = len(after) > 1 and (after[1] in _ARTICLES or after[1] in _PRONOUNS)
    return before[-1] in _PAIRED and after[0] in _PAIRED and not takes_object


_PRONOUNS = _WORDS.pronouns
_PARTICLES = _WORDS.particles


def _refers_back(text: str) -> bool:
    """A verb and a pronoun ("use it", "turn them off"): the thing is in the request before,
    so the clause continues it ("activate the vacuum cleaner and use it")."""
    words = _words(text)
    return (
        2 <= len(words) <= 4 and words[1] in _PRONOUNS and all(w in _PARTICLES for w in words[2:])
    )


def _conditional_request(text: str) -> bool:
    """After "and": a condition with its consequence opens a request of its own
    ("turn on the fan and if it rains close the windows"; "... and if i have five dollars
    how much is that in euros"). A bare condition ("... and if it's dark") stays with the
    request before it."""
    words = _words(text)
    if len(words) < 4 or words[0] not in {"if", "unless"}:
        return False
    return _can_stand_alone(text) or extract_conditional(text) is not None


def _is_request(sentence: str) -> bool:
    """A sentence that may ask something on its own. A sentence end is a strong boundary,
    so any sentence of two words or more counts ("Nighttime mode.", "Desk lamp one off.")
    but a greeting and a statement of context (routing/language/sentences.py)."""
    words = _words(sentence)
    if len(words) < 2 or is_greeting(words):
        return False
    return first_person_request(words) or not is_context(words)


def _leans_back(sentence: str) -> bool:
    """A short sentence that points at the one before ("How tall is it?", "What about
    Friday?"); in a longer one the pronoun usually has its noun inside ("how old was
    Einstein when he ...")."""
    return len(_words(sentence)) <= _LEANING_WORDS and dependency(sentence) in _LEANS_BACK


def _two_requests(left: str, right: str) -> bool:
    """At a sentence end: split only when the text before holds a request and the
    sentence after is one too, not leaning on the one before. So "I'm planning a trip.
    What's the weather in Boston?" and "Find me a concert. I'm free this weekend." stay
    one request each, while "Who wrote Hamlet? Is it raining?" splits."""
    before = _words(left)
    if before and before[-1] in _ABBREVIATIONS and left.rstrip().endswith("."):
        return False  # "Ask Mr. Smith": an abbreviation, not a sentence end
    if not right.strip(CLAUSE_TRIM) or not _is_request(right) or _leans_back(right):
        return False
    sentences = _SENTENCE_ENDS.split(left)
    if is_question(_words(right)) and is_statement(_words(sentences[-1])):
        return False  # "The Ferrari Testarossa went into production in 1984. What does ...?"
    return any(_is_request(sentence) for sentence in sentences)


def _opens_sentence(previous: re.Match[str] | None, match: re.Match[str]) -> bool:
    """A joining word right after a sentence end ("Who painted it? And when?")."""
    return (
        previous is not None
        and previous.group("stop") is not None
        and previous.end() == match.start()
    )


def _trim(query: str, start: int, end: int, claimed: tuple[str, str] | None = None) -> Span | None:
    while start < end and query[start] in CLAUSE_TRIM:
        start += 1
    while end > start and query[end - 1] in CLAUSE_TRIM:
        end -= 1
    return Span(start, end, claimed) if end > start else None


Claims = Callable[[str], "str | None"]


def _claimed_apart(left: str, right: str, claims: Claims | None) -> tuple[str, str] | None:
    """The two routes, when the routing rules give the sides to different ones ("what will
    the weather be in Lago Vista and the last hawk gets three out of six stars"): two
    requests, even where the grammar above saw one."""
    if claims is None:
        return None
    mine, theirs = claims(left), claims(right)
    if mine is not None and theirs is not None and mine != theirs:
        return mine, theirs
    return None


def split_spans(query: str, claims: Claims | None = None) -> list[Span]:
    """The parts of `query` as spans into it, in order; each part, split again, is itself.

    `claims` (optional) names the route the keyword rules give a clause, or None: a soft
    separator the grammar rejected still splits two clauses claimed by different routes.

    A separator is judged by the rest of its sentence, which may run past a later
    separator that does split ("what what and who is and is what"): within the part
    that cut leaves, the same separator can read otherwise. So each part is split again
    until none changes: the parts are the ones each reads as on its own."""
    spans = _split_once(query, claims)
    settled: list[Span] = []
    while spans:
        span = spans.pop(0)
        if (span.start, span.end) == (0, len(query)):
            settled.append(span)  # the same text: the same pass would say the same
            continue
        inner = _split_once(query[span.start : span.end], claims)
        if len(inner) <= 1:
            settled.append(span)
            continue
        shifted = [Span(span.start + s.start, span.start + s.end, s.claimed) for s in inner]
        # the first keeps why it was split from the part before this one
        shifted[0] = Span(shifted[0].start, shifted[0].end, span.claimed)
        spans[:0] = shifted
    return settled


def _split_once(query: str, claims: Claims | None = None) -> list[Span]:
    """One left-to-right pass over the separators of `query` (see `split_spans`)."""
    # separator spans that were accepted, with the claimed routes when the rules split it
    cuts: list[tuple[int, int, tuple[str, str] | None]] = []
    candidates = list(_SEPARATORS.finditer(query))
    segment_start = 0
    for index, match in enumerate(candidates):
        next_start = candidates[index + 1].start() if index + 1 < len(candidates) else len(query)
        previous = candidates[index - 1] if index else None
        left = query[segment_start : match.start()]
        right = query[match.end() : next_start]
        claimed = None
        if match.group("hard") is not None:
            accept = bool(left.strip(CLAUSE_TRIM)) and bool(right.strip(CLAUSE_TRIM))
        elif match.group("stop") is not None:
            accept = _two_requests(left, right)
        elif _opens_sentence(previous, match):
            # "Who painted it? And when?", "... in 2018? Also, will it rain?": a joining
            # word that opens a sentence splits as the sentence end would
            accept = _two_requests(left, _rest_of_sentence(query, match.end()).lstrip(" ,"))
        elif (
            not _can_stand_alone(left)
            or (match.group("soft") == "," and _quotes(left))
            or _coordinated(left, right)
            or _refers_back(right)
            or _asks_in_place(_rest_of_sentence(query, match.end()))
        ):
            accept = False  # e.g. a condition still waiting for its consequence
        else:
            accept = is_complete_request(right) or (
                match.group("soft") != "," and _conditional_request(right)
            )
            if not accept and len(_words(right)) >= 2:
                claimed = _claimed_apart(left, right, claims)
                accept = claimed is not None
        if accept:
            cuts.append((match.start(), match.end(), claimed))
            segment_start = match.end()
    spans: list[Span] = []
    position = 0
    claimed_next: tuple[str, str] | None = None
    for cut_start, cut_end, claimed in cuts:
        span = _trim(query, position, cut_start, claimed_next)
        if span:
            spans.append(span)
        position = cut_end
        claimed_next = claimed
    last = _trim(query, position, len(query), claimed_next)
    if last:
        spans.append(last)
    return spans


def decompose(query: str, claims: Claims | None = None) -> list[str]:
    """The parts of `query`; a query with no separator comes back as one part."""
    return [text for text, _ in decompose_claimed(query, claims)]


def decompose_claimed(
    query: str, claims: Claims | None = None
) -> list[tuple[str, tuple[str, str] | None]]:
    """The parts, each with the routes the rules claimed when only they split it from the
    part before (see `Span.claimed`), so the `decomposed` event can say why."""
    spans = split_spans(query, claims)
    if not spans:
        return [(query.strip(), None)] if query.strip() else []
    return [(query[s.start : s.end], s.claimed) for s in spans]
