"""The one gate a state-changing command passes through, and why it may not.

Reading is not acting: the router sits next to a household's locks, so a command ("unlock
the front door") runs only when nothing about the request makes it doubtful. The gate is
asked by the dispatcher, the only caller of a source's `act`; every reason that holds is
returned, the first one names the `control_withheld` event, and when in doubt nothing
happens:

- `not_allowed`: the source's config does not allow control (`allow_control`);
- `not_authorized`: the request did not come from someone who may act: with
  `server.api_token` set, a request without it never reaches here; with none set, only a
  client on this machine (loopback) may act, and not through a proxy (a request relayed
  by one speaks for someone the router cannot see);
- `dry_run`: the request asked for a plan, not an action;
- `replay`: a replay re-routes a recorded request; it never repeats what that request did;
- `conditional`: the command is the consequence of a condition ("if ...", "unless ...")
  that the router does not evaluate, so it cannot know the command is meant now; or the
  request holds condition words the parser could not take apart ("..., but only if it
  rains", "provided that ...", "should it rain, ..."); or it opens right after a
  question, waiting for its answer ("is it dark? then turn on the light");
- `deferred`: the command is for later or for a while ("in an hour", "tomorrow", "at
  seven", "soon", "for 10 minutes", "the minute I leave", "for the night"), in its part
  or anywhere in the request; the router has no scheduler, and doing it now is doing
  something nobody asked for;
- `low_confidence`: the part was not decided confidently (it ended at the default, or the
  LLM's confidence was not measured); or
  the request holds words that deny, take back or only imagine a command ("do not, ...",
  "actually don't", "never mind", "did I ... and ..."), or asks it as a question ("unlock
  the front door?", "..., shall I?"), or holds a word the router cannot read (look-alike
  letters of another script); or the source placed only some of the target's words
  on a device ("the bed light on arrival"), so acting would be a guess;
- `rewritten`: the command's words came from an earlier turn (a follow-up such as "and
  the kitchen?" rewritten to "turn off the lights in the kitchen"): the router guessed them;
- `read_only`: the request came through a surface that promises not to act (the MCP
  `search` tool, annotated read-only; control has a tool of its own).

The words are read as they show (`as_read`): "ｔｏｍｏｒｒｏｗ" and "tomor\u200brow" are "tomorrow".
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from routing.language.conditional import condition_words, doubt_words


class Withheld(StrEnum):
    """Why a command was not carried out, in the order they are reported."""

    NOT_ALLOWED = "not_allowed"
    DRY_RUN = "dry_run"
    REPLAY = "replay"
    CONDITIONAL = "conditional"
    DEFERRED = "deferred"
    LOW_CONFIDENCE = "low_confidence"
    REWRITTEN = "rewritten"
    READ_ONLY = "read_only"
    # Last: a more particular reason (a dry run, a condition, a read-only tool) says more.
    NOT_AUTHORIZED = "not_authorized"


@dataclass(frozen=True, slots=True)
class Circumstances:
    """What the gate must know about a part besides its words. Each default is the one
    that never acts: a caller that forgets to say the request was confident and
    authorized gets a command withheld, not carried out."""

    dry_run: bool = False
    conditional: bool = False  # the consequence of a condition (or a negated one)
    request: str = ""  # the whole request the part is of (its condition words count too)
    confident: bool = False
    read_only: bool = False  # the surface the request came through must not act
    rewritten: bool = False  # the words were completed from an earlier turn
    authorized: bool = False  # the requester may act (token, or a loopback client)
    part: str = ""  # the command's own words, as the gate is asked about them

    # Read only when a part is a command, so other requests never look. The whole request
    # counts, not the part: splitting can leave a clean command beside the words that
    # make it doubtful ("tomorrow, turn on the light and unlock the door").

    @property
    def condition(self) -> str | None:
        """Condition words anywhere in the request ("only if"), whatever the parser made of
        them."""
        if not self.request:
            return None
        read = as_read(self.request)
        return condition_words(read) or after_a_question(read)

    @property
    def when(self) -> str | None:
        """A time qualifier anywhere in the request ("tomorrow", "at seven")."""
        return deferral(self.request) if self.request else None

    @property
    def doubt(self) -> str | None:
        """Words anywhere in the request that deny, take back or only imagine a command
        ("do not", "actually", "never mind", "imagine"); "?" when the command's part was
        asked as a question ("unlock the front door?", "..., shall I?"); or a word the
        router cannot read (`unreadable`): it may say any of those."""
        if not self.request:
            return None
        read = as_read(self.request)
        found = doubt_words(read)
        if found is None and self.part and asked_as_question(as_read(self.part), read):
            return "?"
        return found or unreadable(read, as_read(self.part))


_SMALL = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
    r"fifteen|sixteen|seventeen|eighteen|nineteen"
)
_TENS = r"twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
_NUMBER = (
    rf"(?:\d+(?:[.,]\d+)?|(?:{_TENS})(?:[- ](?:{_SMALL}))?|{_SMALL}|a|an|a few|a couple of|"
    r"a couple|several|half an?)"
)
_UNIT = (
    r"(?:sec(?:ond)?s?|min(?:ute)?s?|h(?:ou)?rs?|hours?|days?|nights?|weeks?|fortnights?"
    r"|months?|years?|[smhd])"
)
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|weekday|workday)"
_PART_OF_DAY = (
    r"(?:morning|afternoon|evening|night|noon|midnight|sunrise|sunset|sundown|sunup|dawn|dusk"
    r"|daybreak|nightfall|bedtime|lunchtime|dinnertime|teatime|breakfast|lunch|dinner|supper)"
)
_MONTH = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november"
    r"|december|spring|summer|autumn|fall|winter)"
)
_HOLIDAY = r"(?:christmas(?:\s+eve)?|new\s+year'?s?(?:\s+eve)?|easter|thanksgiving|halloween)"
_DATE = r"\d{1,2}/\d{1,2}(?:/\d{2,4})?"
_CLOCK = r"\d{1,2}h\d{2}|\d{1,4}(?:[:.]\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.|[ap]|o'?clock|h|hrs|hours)?"
_SPOKEN_CLOCK = (
    rf"(?:(?:half|(?:a\s+)?quarter|{_NUMBER})\s+(?:past|to|after|before)\s+\w+"
    rf"|(?:{_SMALL})(?:\s+(?:o'?clock|thirty|fifteen|forty-five|{_TENS}|oh\s+\w+))?"
    r"(?:\s*(?:am|pm|a\.m\.|p\.m\.))?)"
)
# A time qualifier anywhere in the text: the command is for another time than now, or
# for a while (a duration asks for a second change later, which nothing here schedules).
_DEFERRAL = re.compile(
    r"\b(?:"
    rf"in\s+{_NUMBER}\s*{_UNIT}(?:\s+(?:and\s+)?(?:a\s+half|{_NUMBER}\s*{_UNIT}))?"
    rf"|(?:for|after|within|wait(?:\s+for)?)\s+{_NUMBER}\s*{_UNIT}"
    rf"|{_NUMBER}\s*{_UNIT}\s+(?:from\s+now|later|after|before|on)"
    r"|in\s+a\s+(?:bit|while|moment|sec|second|minute|jiffy)|in\s+(?:a\s+)?few"
    r"|tomorrow|tonight|later(?:\s+on|\s+today)?|overnight|soon|shortly|eventually"
    r"|first\s+thing|someday|sometime|next\s+(?:week|month|year|time)"
    rf"|(?:at|around|by|from|until|till|before|after)\s+(?:around\s+|about\s+|exactly\s+)?"
    rf"(?:{_CLOCK}|{_SPOKEN_CLOCK}|{_PART_OF_DAY})"
    rf"|(?:in|during)\s+the\s+{_PART_OF_DAY}"
    rf"|(?:this|tomorrow|every|each)\s+{_PART_OF_DAY}"
    rf"|(?:on|next|this|every|each)\s+{_WEEKDAY}s?|{_WEEKDAY}s"
    r"|every\s+(?:day|hour|week|minute|month|time|\d+\s+\w+)|daily|hourly|weekly|nightly"
    r"|(?:when|whenever|once|after|before|until|till|as\s+soon\s+as)\s+\w+"
    # a moment named by what happens then: "the minute I leave", "by the time I'm back"
    r"|the\s+(?:minute|moment|second|instant|day|night|time)\s+(?:i|we|you|they|he|she|it)\b"
    r"|by\s+the\s+time|(?:on|upon)\s+(?:my|our|your|their)\s+(?:return|arrival|way)"
    r"|(?:each|any|every|next)\s+time|anytime"
    # a day of the year, or a while: "on christmas", "in june", "for the night", "all day"
    rf"|(?:on|in|by|until|till|before|after|this|next|come|during|for)\s+(?:{_MONTH}|{_HOLIDAY})"
    r"(?!['’]s\b)"  # not someone's: "in may's room"
    rf"|come\s+(?:{_WEEKDAY}|{_PART_OF_DAY}|morning)|(?:on|by|until|till)\s+{_DATE}"
    r"|for\s+(?:a\s+(?:while|bit|moment|minute|second|sec|spell)|now|the\s+(?:night|day|"
    r"evening|morning|afternoon|weekend|week|holidays?))"
    r"|all\s+(?:night|day|morning|afternoon|evening|weekend|week)(?:\s+long)?"
    r"|temporarily|for\s+the\s+time\s+being|until\s+further\s+notice"
    # a bare number of what was meant: "in ten", "in 5" (minutes) at the end of a clause
    rf"|in\s+{_NUMBER}(?=\s*(?:$|[,.!?;]|and\b|then\b))"
    # "at the weekend", "over christmas", "in the summer", "within the hour", "one day",
    # "the next day", "december 25th", "the 3rd of may", "a week from today", "between 6
    # and 7", "at half six"
    rf"|(?:at|over|on)\s+(?:the\s+)?(?:{_WEEKDAY}|{_HOLIDAY})"
    rf"|(?:in|during|over|through)\s+the\s+{_MONTH}"
    r"|within\s+the\s+(?:hour|minute|day|week|month)|(?:some|one|any)\s+day"
    rf"|the\s+(?:next|following)\s+(?:day|{_PART_OF_DAY}|{_WEEKDAY})"
    rf"|(?:the\s+)?day\s+after|{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?"
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}"
    rf"|{_NUMBER}\s*{_UNIT}\s+from\s+(?:now|today|tomorrow|tonight)"
    rf"|between\s+(?:{_CLOCK}|{_SPOKEN_CLOCK})\s+and|half\s+(?:{_SMALL})"
    r")\b",
    re.IGNORECASE,
)


# Pure functions of the text, asked of every part an acting source answers: the last
# texts' answers are remembered (bounded).
@lru_cache(maxsize=2048)
def as_read(text: str) -> str:
    """`text` as the gate reads it: compatibility forms folded (full-width letters, "？",
    "⁇"), and invisible format characters (zero-width spaces and joiners, soft hyphens,
    direction marks) dropped, so "ｔｏｍｏｒｒｏｗ" and "tomor\u200brow" say what they show."""
    folded = unicodedata.normalize("NFKC", text).replace("‽", "?")
    if folded.isascii():
        return folded
    return "".join(c for c in folded if unicodedata.category(c) != "Cf")


_AFTER_PART = " \t\"'’”)]!.…"  # what may stand between a part's words and its question mark
# A short question about the command itself, right after it ("..., shall I?", "...; is that
# safe?", "... - would that work?"): asking whether, not asking for. Not "will you?", which
# only makes an order polite.
_TAG_QUESTION = re.compile(
    r"[\s,;:\-–—]*(?:(?:and|but|or|so)\s+)?"
    r"(?:is|was|are|would|will|shall|should|can|could|may|might|must|do|does|did|isn't|wasn't"
    r"|wouldn't|won't|shouldn't|can't|couldn't|doesn't|didn't)\s+(?:i|we|that|this)\b"
    r"[^?.!;]{0,40}\?",
    re.IGNORECASE,
)


# "Could you ...?" asks for, not whether: English puts a polite request as a question.
_POLITE_REQUEST = re.compile(
    r"(?:please\s+|hey\s+|ok(?:ay)?\s+)*(?:can|could|would|will)\s+you\b", re.I
)


def asked_as_question(part: str, request: str) -> bool:
    """Whether `part` stands in `request` right before a question mark, or before a short
    question about it ("..., shall I?"). Splitting trims a part's punctuation, so "unlock
    the front door?" reaches the source as an order; asked so, it is a question whose
    answer nobody can be sure of. Not a polite request ("could you turn on the light?"),
    which is an order put as a question. Both texts as `as_read` reads them."""
    marked = _POLITE_REQUEST.match(part.lstrip()) is None  # its own "?" counts
    if marked and part.rstrip(_AFTER_PART).endswith("?"):  # "？" or "‽" kept, read as "?"
        return True
    start = request.find(part)
    while start != -1:
        after = request[start + len(part) :]
        if marked and after.lstrip(_AFTER_PART).startswith("?"):
            return True
        if _TAG_QUESTION.match(after):
            return True
        start = request.find(part, start + 1)
    return False


# A command opening right after a question ("is it dark? then turn on the light") waits
# for the question's answer: a condition the router does not evaluate.
_AFTER_QUESTION = re.compile(
    r"\?[\s,]*(?:(?:and|but)\s+)?(?:then|so|in\s+which\s+case|after\s+that)\b", re.I
)


def after_a_question(text: str) -> str | None:
    """ "? then" when something in `text` is to be done once a question is answered."""
    found = _AFTER_QUESTION.search(text)
    return None if found is None else " ".join(found.group().lower().split())


def _latin(char: str) -> bool:
    return char.isascii() or unicodedata.name(char, "").startswith("LATIN")


_WORD = re.compile(r"[^\W\d_]+")


def unreadable(request: str, part: str = "") -> str | None:
    """A word of `request` the router cannot read: one that mixes Latin letters with
    another script's look-alikes ("kiddіng" with a Cyrillic "і"), anywhere; or one in
    another script outside the command's own `part` ("明天, unlock the door": it may say
    "tomorrow"). A command's own words in another script are the source's to place on a
    device (a household may name them so); those it cannot place withhold it too."""
    if request.isascii():
        return None
    outside = request.replace(part, " ") if part else request
    for word in _WORD.findall(request):
        if word.isascii():
            continue
        latin = [_latin(c) for c in word]
        if any(latin) and not all(latin):
            return word
        if not any(latin) and word in outside:
            return word
    return None


@lru_cache(maxsize=2048)
def deferral(text: str) -> str | None:
    """The time qualifier in `text` ("in an hour", "at 7 pm", "when I get home"), if any,
    as `as_read` reads the text."""
    found = _DEFERRAL.search(as_read(text))
    return found.group(0) if found else None


@lru_cache(maxsize=2048)
def without_deferral(text: str) -> str:
    """`text` with its time qualifiers cut out, so "in ten minutes turn off the oven" still
    reads as the command it holds (and is then withheld as deferred)."""
    cut = _DEFERRAL.sub(" ", text)
    return re.sub(r"\s{2,}", " ", cut).strip(" ,")


def withheld_reasons(
    *,
    allowed: bool,
    acting: bool,
    deferred: bool,
    circumstances: Circumstances,
    unplaced: bool = False,
) -> list[Withheld]:
    """Every reason that keeps a command from running, in reporting order; [] to act.

    `acting` is false for a replay; `deferred` when the part or its request carries a time
    qualifier; `unplaced` when the source found words in the command's target that name
    none of its devices ("turn on the bed light on arrival"): it is not sure what was
    asked. Words that deny or take back the command count as not confident too.
    """
    reasons: list[Withheld] = []
    if not allowed:
        reasons.append(Withheld.NOT_ALLOWED)
    if circumstances.dry_run:
        reasons.append(Withheld.DRY_RUN)
    if not acting:
        reasons.append(Withheld.REPLAY)
    if circumstances.conditional or circumstances.condition is not None:
        reasons.append(Withheld.CONDITIONAL)
    if deferred:
        reasons.append(Withheld.DEFERRED)
    if not circumstances.confident or unplaced or circumstances.doubt is not None:
        reasons.append(Withheld.LOW_CONFIDENCE)
    if circumstances.rewritten:
        reasons.append(Withheld.REWRITTEN)
    if circumstances.read_only:
        reasons.append(Withheld.READ_ONLY)
    if not circumstances.authorized:
        reasons.append(Withheld.NOT_AUTHORIZED)
    return reasons


REASON_WORDS: dict[str, str] = {
    Withheld.NOT_ALLOWED: "control is not allowed for this source (allow_control is off)",
    Withheld.NOT_AUTHORIZED: "the request is not authorized to act (give the API token, or ask "
    "from this machine, not through a proxy)",
    Withheld.DRY_RUN: "this was a dry run",
    Withheld.REPLAY: "a replay never acts",
    Withheld.CONDITIONAL: "it depends on a condition the router does not evaluate",
    Withheld.DEFERRED: "it is meant for later, and the router does not schedule commands",
    Withheld.LOW_CONFIDENCE: "the router was not sure the request asks for it now",
    Withheld.REWRITTEN: "its words were carried over from an earlier turn; say it in full",
    Withheld.READ_ONLY: "the request came through a read-only tool",
}
