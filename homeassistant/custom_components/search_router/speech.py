"""What Assist says for a router answer, and what its debug view shows about why.

Pure functions of the router's `/search` response body (no Home Assistant import), so the
wording is the same however the agent is run. One sentence per part, in part order: an
answer's first sentence, a device command's outcome, and plainly when a part was not
served or a command was not carried out (the router's own words say why).
"""

from __future__ import annotations

import re
from typing import Any

MAX_SENTENCE_CHARS = 300
# Device answers are short and come several at a time ("Kitchen Lights is on", ...); an
# encyclopedia answer is long: only its first sentence is spoken.
SHORT_ITEM_CHARS = 90
MAX_SHORT_ITEMS = 5

# The router's withheld item says "Would <command> with <source>, but did nothing: <why>."
_WITHHELD_WORDS = "did nothing:"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def first_sentence(text: str) -> str:
    """The text's first sentence, cut at a word near MAX_SENTENCE_CHARS, ending in a stop."""
    # A source's snippet may open mid-text ("…designed and built by"); said, it is noise.
    text = " ".join(text.split()).lstrip("….").lstrip()
    sentence = _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""
    if len(sentence) > MAX_SENTENCE_CHARS:
        sentence = sentence[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
    if sentence and sentence[-1] not in ".!?…":
        sentence += "."
    return sentence


def _items_sentence(items: list[dict[str, Any]]) -> str:
    texts = [str(i.get("text") or i.get("title") or "").strip() for i in items]
    texts = [t for t in texts if t]
    if not texts:
        return ""
    if len(texts) > 1 and all(len(t) <= SHORT_ITEM_CHARS for t in texts):
        shown = texts[:MAX_SHORT_ITEMS]
        more = len(texts) - len(shown)
        joined = "; ".join(t.rstrip(".") for t in shown)
        return joined + (f"; and {more} more." if more else ".")
    return first_sentence(texts[0])


def _why_withheld(part: dict[str, Any]) -> str:
    """The router's own words for why ("it depends on a condition ..."), else its reason."""
    for item in part.get("items") or []:
        text = str(item.get("text") or "")
        if _WITHHELD_WORDS in text:
            return text.split(_WITHHELD_WORDS, 1)[1].strip().rstrip(".")
    reason = (part.get("withheld") or {}).get("reason") or "not allowed"
    return str(reason).replace("_", " ")


def part_sentence(part: dict[str, Any]) -> str:
    """One spoken sentence for one part of the answer."""
    query = str(part.get("query") or "").strip()
    status = part.get("status")
    items = part.get("items") or []
    if status == "ok":
        return _items_sentence(items) or f"I found nothing to say about “{query}”."
    if status == "empty":  # an act that changed nothing may say why ("Which device?")
        return _items_sentence(items) or f"I found nothing for “{query}”."
    if status == "unserved":
        return f"I can't help with “{query}”: none of my sources serves that."
    if status == "withheld":
        return f"I did not do “{query}”: {_why_withheld(part)}."
    if status == "planned":
        return f"I would send “{query}” to {part.get('route')}."
    source = part.get("source") or part.get("route") or "the source"
    return f"I couldn't answer “{query}”: {source} failed."


def speech_of(body: dict[str, Any]) -> str:
    """The whole answer: a condition's answer before what depends on it, each part once."""
    sentences: list[str] = []
    for part in body.get("results") or []:
        condition = part.get("condition")
        if isinstance(condition, dict):
            sentences.append(part_sentence(condition))
        sentences.append(part_sentence(part))
    return " ".join(s for s in sentences if s) or "The search router gave no answer."


def acted(body: dict[str, Any]) -> bool:
    """Whether a command was carried out: the chain's record of a source acting."""
    return any(
        e.get("step") == "source_invoked"
        and e.get("operation") == "act"
        and e.get("outcome") == "ok"
        for e in body.get("explanation") or []
    )


def _part_facts(part: dict[str, Any]) -> dict[str, Any]:
    facts = {
        "query": part.get("query"),
        "status": part.get("status"),
        "route": part.get("route"),
        "stage": part.get("stage"),
        "confidence": part.get("confidence"),
        "source": part.get("source"),
    }
    if part.get("rewritten"):
        facts["rewritten"] = part["rewritten"]
    if part.get("withheld"):
        facts["withheld"] = (part["withheld"] or {}).get("reasons")
    if part.get("error"):
        facts["error"] = (part["error"] or {}).get("type")
    if isinstance(part.get("condition"), dict):
        facts["condition"] = _part_facts(part["condition"])
    return facts


def debug_data(body: dict[str, Any], router_url: str) -> dict[str, Any]:
    """What Assist's debug view shows: the trace, and each part's route, stage, confidence."""
    trace_id = str(body.get("trace_id") or "")
    return {
        "trace_id": trace_id,
        "trace_url": f"{router_url.rstrip('/')}/ui#/trace/{trace_id}" if trace_id else None,
        "acted": acted(body),
        "cached": body.get("cached"),
        "fallback_occurred": body.get("fallback_occurred"),
        "parts": [_part_facts(p) for p in body.get("results") or []],
        # What Home Assistant's own sentence matching made of each command carried out.
        "recognized": [
            {k: e.get(k) for k in ("part", "intent", "matched", "targets", "error") if k in e}
            for e in body.get("explanation") or []
            if e.get("step") == "command_recognized"
        ],
    }
