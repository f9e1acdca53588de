"""Split a compound query into parts that can each be routed on their own.

Hard separators (";", "and also", "and then", sentence ends) always split. Soft ones
("and", "also", ",", "then") split only between two complete requests, so
"salt and pepper" and "who wrote Romeo and Juliet" stay whole while
"turn off the lights and what's the weather" splits. Every part is a substring of the
query, and splitting a part again returns it unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Words that open a request on their own: questions, polite forms and imperatives.
OPENERS = frozenset(
    """
    what what's whats who who's whos whom whose where where's when when's which why how how's
    is isn't are aren't was were do does did don't can can't could will won't would should shall
    may might has have had am
    i i'd i'm im i'll i've id my we let let's lets please pls hey ok okay
    tell show give find search look lookup play open close lock unlock turn switch set dim
    brighten raise lower start stop pause resume check list read send call order book get make
    put add remove remind wake explain define describe say increase decrease change activate
    deactivate enable disable run fetch translate compare calculate count plan schedule cancel
    """.split()
)

# A clause opening with one of these is a condition, not a request: "if it rains, ...".
CONDITION_OPENERS = frozenset({"if", "when", "whenever", "unless", "once", "in case"})

_HARD = r";|\band\s+(?:also|then)\b|(?<=[?!])\s+(?=\S)|(?<=\w{3}\.)\s+(?=[A-Za-z])"
_SOFT = r",|\balso\b|\band\b|\bthen\b"
_SEPARATORS = re.compile(rf"(?P<hard>{_HARD})|(?P<soft>{_SOFT})", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z0-9'’]+")
_TRIM = " \t\r\n,;.!?:-"


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int


def _words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def is_complete_request(text: str) -> bool:
    """A clause that could be asked on its own: opens like a request and has substance."""
    words = _words(text)
    return len(words) >= 2 and words[0] in OPENERS


def _can_stand_alone(left: str) -> bool:
    """The text before a soft separator could end a request (it is not a lone word or a condition)."""
    words = _words(left)
    if len(words) < 2:
        return False
    return words[0] not in CONDITION_OPENERS


def _trim(query: str, start: int, end: int) -> Span | None:
    while start < end and query[start] in _TRIM:
        start += 1
    while end > start and query[end - 1] in _TRIM:
        end -= 1
    return Span(start, end) if end > start else None


def split_spans(query: str) -> list[Span]:
    """The parts of `query` as spans into it, in order."""
    cuts: list[tuple[int, int]] = []  # separator spans that were accepted
    candidates = list(_SEPARATORS.finditer(query))
    segment_start = 0
    for index, match in enumerate(candidates):
        next_start = candidates[index + 1].start() if index + 1 < len(candidates) else len(query)
        left = query[segment_start : match.start()]
        right = query[match.end() : next_start]
        if match.group("hard") is not None:
            accept = bool(left.strip(_TRIM)) and bool(right.strip(_TRIM))
        else:
            accept = _can_stand_alone(left) and is_complete_request(right)
        if accept:
            cuts.append((match.start(), match.end()))
            segment_start = match.end()
    spans: list[Span] = []
    position = 0
    for cut_start, cut_end in cuts:
        span = _trim(query, position, cut_start)
        if span:
            spans.append(span)
        position = cut_end
    last = _trim(query, position, len(query))
    if last:
        spans.append(last)
    return spans


def decompose(query: str) -> list[str]:
    """The parts of `query`; a query with no separator comes back as one part."""
    spans = split_spans(query)
    if not spans:
        return [query.strip()] if query.strip() else []
    return [query[s.start : s.end] for s in spans]
