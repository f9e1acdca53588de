"""A diagnosis in words, read off the recorded events and nothing else.

Each sentence is the translation of one event, in seq order, grouped by part. Nothing
here knows how routing works: if the chain does not say it, the narrative does not
either, so the story can never disagree with what happened.

`decision_only` gives the same trace with every query text removed (a whitelist of
structural fields), safe to paste into a bug report.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from routing.chain.events import part_key
from routing.chain.steps import Step
from routing.dispatch.control import REASON_WORDS

# How a failure reason reads after the source's name.
_FAILURES = {
    "connection_refused": "refused the connection",
    "timeout": "timed out",
    "unauthorized": "rejected the credentials",
    "server_error": "answered with a server error",
    "malformed_response": "sent a malformed response",
    "rate_limited": "rate-limited the request",
    "disabled": "is disabled",
    "circuit_open": "was skipped (circuit open)",
    "cancelled": "had not answered when the request ended",
}
# Why a dry run's plan would skip a source (the `planned` event's `unavailable`).
_OUT = {"disabled": "is disabled", "circuit_open": "has its circuit open"}
# Why an act changed nothing, when the source said (`reason` beside outcome `empty`).
_UNCHANGED = {"ambiguous": "it could mean several devices"}
# Command actions that are particles of "turn": said as "turn on ...".
_PARTICLES = frozenset({"on", "off"})
_STAGES = {
    Step.INTENT_LABEL: "as the household labelled it",
    Step.INTENT_KEYWORD: "by keyword",
    Step.INTENT_CACHED: "by the routing-decision cache",
    Step.INTENT_LLM: "by the LLM",
}
# Fields kept by `decision_only`: structure, sources, timings and reasons.
_STRUCTURAL = frozenset(
    {
        "step",
        "seq",
        "t_ms",
        "part",
        "decision",
        "source",
        "sources",
        "from_source",
        "to_source",
        "outcome",
        "result_count",
        "elapsed_ms",
        "reason",
        "error_type",
        "similarity",
        "discourse_escalated",
        "route",
        "stage",
        "method",
        "status",
        "status_code",
        "item_count",
        "type",
        "reasons",
        "operation",
        "rule",
        "from_route",
        "to_route",
        "live_route",
        "kind",
    }
)
# A stage's calibrated confidence and why it declined are numbers, never query text.
_STRUCTURAL = _STRUCTURAL | {"confidence", "declined"}
# What a semantic match was to (routing/stages/semantic.py): kept when it is one of these
# words, so the narrative of a decision-only trace can say it too.
_ORIGINS = frozenset({"exemplar", "user_label", "llm"})


def _ms(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return ""
    return f"{value:.1f} ms" if value < 1 else f"{value:.0f} ms"


def _count(n: Any, word: str = "result") -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _quote(text: Any) -> str:
    return f"'{text}'"


def sentence(event: dict[str, Any], with_text: bool = True) -> str:
    """One event as a clause of the diagnosis."""
    step = event.get("step", "")
    source = event.get("source")
    decision = event.get("decision")
    if step == Step.DECOMPOSED:
        return _decomposed(event, with_text)
    if step == Step.CONDITIONAL_DETECTED:
        return _conditional(event, with_text)
    if step == Step.CONTROL_WITHHELD:
        return _withheld(event, with_text)
    if isinstance(step, str) and step.startswith("intent_") and decision is None:
        return _no_decision(event, with_text)
    if step == Step.REWRITTEN:
        return _rewritten(event, with_text)
    if step == Step.INTENT_SESSION:
        text = f"went to {decision} as a follow-up"
        if with_text and event.get("previous_query"):
            text += f" of {_quote(event['previous_query'])}"
        overrules = event.get("overrules")
        if isinstance(overrules, dict):
            text += (
                f", over the semantic stage's unserved (its nearest none example was "
                f"{overrules.get('similarity')} alike, below {overrules.get('bar')})"
            )
        return text
    if step == Step.LLM_ERROR:
        return f"the LLM failed ({event.get('reason') or 'error'})"
    if step in _STAGES:
        text = f"went to {decision} {_STAGES[step]}"
        if event.get("discourse_escalated"):
            text += " (escalated from the conversation)"
        return text
    if step == Step.INTENT_SEMANTIC:
        return _semantic(event, with_text)
    if step == Step.INTENT_DEFAULT:
        return f"went to {decision} by default ({event.get('reason') or 'no stage decided'})"
    if step == Step.TIME_SENSITIVE:
        return _time_sensitive(event, with_text)
    if step == Step.INTENT_WORLD:
        return _world(event, with_text)
    if step == Step.TIME_STABLE:
        return (
            f"the time-sensitivity model reads its answer as fixed ({event.get('probability')}), "
            f"so it went to {event.get('to_route')} ({event.get('from_route')} if that fails)"
        )
    if step == Step.SNAPSHOT_ANSWERED:
        return (
            f"{source} answered in place of the live source {event.get('live_route')}: "
            "its answer may be out of date"
        )
    if step == Step.PLANNED:
        return _planned(event)
    if step == Step.RESULT_CACHE_HIT:
        count = event.get("result_count")
        what = f"answered {_count(count)}" if isinstance(count, int) else "answered"
        return f"{source} {what} from the result cache"
    if step == Step.SOURCE_INVOKED and event.get("operation") == "act":
        return _acted(event, with_text)
    if step == Step.SOURCE_INVOKED:
        return _searched(event)
    if step == Step.SOURCE_SKIPPED:
        reason = str(event.get("reason") or "skipped")
        return f"{source} " + _FAILURES.get(reason, f"was skipped ({reason})")
    if step == Step.FALLBACK:
        return f"fallback to {event.get('to_source')} declared"
    if step == Step.FUSION:
        return "fused " + " + ".join(str(s) for s in event.get("sources") or [])
    if step == Step.ERROR:
        text = f"failed: {event.get('error_type')}"
        if with_text and event.get("message"):
            text += f" ({event['message']})"
        return text
    target = decision or source or event.get("route")
    return f"{step} {target}" if target else str(step)


def _world(event: dict[str, Any], with_text: bool) -> str:
    """ "went to web: surely a question about the world (0.85), and its answer changes with
    time ('the next', 0.98)": what the pair's confidence and the time reading said."""
    why = _quote(event["cue"]) if with_text and event.get("cue") else event.get("kind")
    reading = ", ".join(
        str(part) for part in (why, event.get("probability")) if part not in (None, "")
    )
    changes = "changes" if event.get("time_sensitive") else "does not change"
    return (
        f"went to {event.get('decision')}: surely a question about the world "
        f"({event.get('world')}), and its answer {changes} with time"
        + (f" ({reading})" if reading else "")
    )


def _decomposed(event: dict[str, Any], with_text: bool) -> str:
    """How many parts, which, and why a keyword claim split one off."""
    parts = event.get("parts") or []
    count = event.get("part_count", len(parts))
    text = f"the query was split into {count} parts"
    if with_text and parts:
        text += ": " + ", ".join(_quote(p) for p in parts)
    for claim in event.get("claimed") or []:
        routes = claim.get("routes") or ["?", "?"]
        text += (
            f" (part {claim.get('part')} split off because the keyword rules claim it"
            f" for {routes[-1]}, the part before for {routes[0]})"
        )
    return text


def _conditional(event: dict[str, Any], with_text: bool) -> str:
    word = "unless" if event.get("negated") else "if"
    if with_text:
        return (
            f"a condition was found: {word} {_quote(event.get('condition'))} "
            f"then {_quote(event.get('consequence'))}"
        )
    return f"a condition was found ({word})"


def _planned(event: dict[str, Any]) -> str:
    """A dry run's plan, and what it would meet: a source that is out and who stands in."""
    route = event.get("route")
    text = f"planned for {route} (dry run, {event.get('stage')})"
    meets = plan_outcome(route, event.get("sources"), event.get("unavailable"))
    return f"{text}; {meets}" if meets else text


def plan_outcome(route: Any, sources: Any, unavailable: Any) -> str | None:
    """What a plan would meet when some of its `sources` are out ("ha is disabled, and
    nothing stands in: it would fail"); None when all are up (or a trace from before
    plans said so)."""
    if not isinstance(unavailable, dict) or not unavailable:
        return None
    listed = [str(s) for s in sources] if isinstance(sources, list) else []
    out = ", ".join(
        f"{name} " + _OUT.get(str(why), f"is out ({why})") for name, why in unavailable.items()
    )
    up = [s for s in listed if s not in unavailable]
    if not up:
        return f"{out}, and nothing stands in: it would fail"
    return f"{out}: {' + '.join(up) if route not in listed else up[0]} would answer"


def _semantic(event: dict[str, Any], with_text: bool) -> str:
    """A semantic decision: how near, and to what (by the event's `origin`: a shipped
    exemplar, the user's label, or an earlier query the LLM routed)."""
    similarity = event.get("similarity")
    how = "similarity"
    if isinstance(similarity, (int, float)):
        how += f" {similarity:.2f}"
    matched = _quote(event.get("matched_query"))
    origin = event.get("origin")
    if origin == "user_label":
        like = f"the user's label {matched}" if with_text else "a query the user labelled"
    elif origin == "exemplar":
        like = f"the exemplar {matched}" if with_text else "an exemplar"
    elif origin == "llm":
        like = (
            f"the earlier query {matched} (an LLM decision)"
            if with_text
            else "an earlier LLM decision"
        )
    else:  # a chain recorded before events named their origin
        like = matched if with_text else "an earlier query"
    return f"went to {event.get('decision')} by {how} to {like}"


def _acted(event: dict[str, Any], with_text: bool) -> str:
    """A command a source was asked to carry out, and what came of it: `empty` is an act
    that reached no device, so it changed nothing ("carried out" only for `ok`)."""
    source = event.get("source")
    what = _command(event) if with_text else "a command"
    elapsed = _ms(event.get("elapsed_ms"))
    outcome = event.get("outcome")
    if outcome == "ok":
        return f"{source} carried out {what} in {elapsed}"
    if outcome == "empty" and event.get("reason") == "no_change":
        return f"{source} was asked to {what} and reported no change in {elapsed}"
    if outcome == "empty":
        why = _UNCHANGED.get(str(event.get("reason")))
        return (
            f"{source} changed nothing for {what}" + (f" ({why})" if why else "") + f" in {elapsed}"
        )
    reason = str(event.get("reason") or "error")
    text = f"{source} was asked to {what} and " + _FAILURES.get(reason, f"failed ({reason})")
    return text + (" (it may have taken effect)" if reason == "cancelled" else "")


def _searched(event: dict[str, Any]) -> str:
    """A source's search: what it answered, or how it failed, and how long it took."""
    source = event.get("source")
    outcome = event.get("outcome")
    elapsed = _ms(event.get("elapsed_ms"))
    if outcome == "ok":
        return f"{source} answered {_count(event.get('result_count'))} in {elapsed}"
    if outcome == "empty":
        return f"{source} found nothing in {elapsed}"
    if outcome == "timeout":
        return f"{source} timed out after {elapsed}"
    reason = str(event.get("reason") or "error")
    failure = _FAILURES.get(reason, f"failed ({reason})")
    return f"{source} {failure} after {elapsed}"


def _time_sensitive(event: dict[str, Any], with_text: bool) -> str:
    """A part whose answer changes with time: sent live, or answered from a snapshot."""
    if event.get("cue") is None:  # the time-sensitivity model alone said so
        text = f"the time-sensitivity model reads its answer as changing with time ({event.get('probability')})"
    else:
        said = f"{_quote(event.get('cue'))} makes" if with_text else "its words make"
        text = f"{said} its answer change with time"
    snapshot, live = event.get("from_route"), event.get("live_route") or event.get("to_route")
    reason = event.get("reason")
    if reason is None:
        return f"{text}, so it went to {live} ({snapshot} if {live} fails)"
    why = "is not configured" if reason == "not_configured" else "is disabled"
    return f"{text}, but the live source {live} {why}, so {snapshot} answers"


def _rewritten(event: dict[str, Any], with_text: bool) -> str:
    """A follow-up asked as the question it stands for, and which words the rule moved."""
    rule = event.get("rule") or "a rule"
    if event.get("outcome") == "declined":
        if not with_text:
            return f"not asked as a follow-up ({rule}): {event.get('declined')}"
        return (
            f"not asked as a follow-up of {_quote(event.get('previous_query'))} "
            f"({rule}): {event.get('declined')}"
        )
    if not with_text:
        return f"asked as a follow-up of the previous turn ({rule})"
    replaced, carried = _quote(event.get("replaced")), event.get("carried")
    if rule == "pronoun":
        how = f"{replaced} stands for {_quote(carried)}"
    elif carried:
        how = f"{replaced} in place of {_quote(carried)}"
    else:
        how = f"{replaced} added"
    return (
        f"asked as {_quote(event.get('to'))}, a follow-up of "
        f"{_quote(event.get('previous_query'))} ({how})"
    )


def _command(event: dict[str, Any]) -> str:
    """The command as it is said: "on"/"off" are particles ("turn on the bed light")."""
    command = event.get("command")
    if isinstance(command, dict):
        action = command.get("action")
        verb = f"turn {action}" if action in _PARTICLES else action
        return _quote(f"{verb} {command.get('target')}")
    return "a command"


def _withheld(event: dict[str, Any], with_text: bool) -> str:
    what = _command(event) if with_text else "a command"
    reasons = event.get("reasons") or [event.get("reason")]
    why = " and ".join(REASON_WORDS.get(str(r), str(r)) for r in reasons)
    when = f" ({_quote(event['when'])})" if with_text and event.get("when") else ""
    return f"did not {what} with {event.get('source')}: {why}{when}; nothing was changed"


def _no_decision(event: dict[str, Any], with_text: bool) -> str:
    """A stage that looked but did not decide (unserved, below threshold, no source)."""
    stages: dict[str, str] = {
        Step.INTENT_LABEL: "the household's label",
        Step.INTENT_KEYWORD: "the keyword rules",
        Step.INTENT_SEMANTIC: "the semantic stage",
        Step.INTENT_LLM: "the LLM",
    }
    stage = stages.get(str(event.get("step")), str(event.get("step")))
    outcome = event.get("outcome")
    if event.get("step") == Step.INTENT_DEFAULT and outcome == "unserved":
        return "no configured source serves this, so none was asked"
    if outcome in ("unserved", "no_source"):
        return f"{stage} found no source that serves it"
    if event.get("declined"):  # "semantic 0.41 < 0.55": its confidence was below the bar
        why = str(event["declined"]).split(" ", 1)[-1]
        # or a reason in words ("semantic: none of its 3 words is a word the model knows")
        return f"{stage} declined ({'confidence ' if why[:1].isdigit() else ''}{why})"
    similarity = event.get("similarity")
    text = f"{stage} did not decide ({outcome or 'no match'}"
    if isinstance(similarity, (int, float)):
        text += f", best similarity {similarity:.2f}"
        if with_text and event.get("matched_query"):
            text += f" to {_quote(event['matched_query'])}"
    return text + ")"


def _label_clause(labels: list[dict[str, Any]]) -> str:
    """The user's label of a part, beside its decision: the latest one counts."""
    latest = labels[-1]
    route = latest.get("route")
    text = (
        "the user labelled it: no source serves this"
        if route == "none"
        else f"the user labelled it {route}"
    )
    count = len(labels) + sum(int(label.get("replaced") or 0) for label in labels)
    if count > 1:
        text += f" (latest of {count} labels)"
    return text


def narrative(
    chain: Iterable[dict[str, Any]],
    *,
    with_text: bool = True,
    dropped_events: int = 0,
    labels: Iterable[dict[str, Any]] = (),
) -> list[str]:
    """One line per part (the request first), each clause from one event in seq order;
    a part's stored labels (oldest first) end its line."""
    by_part: dict[str, list[dict[str, Any]]] = {}
    for event in sorted(chain, key=lambda e: e.get("seq", 0)):
        by_part.setdefault(str(event.get("part", "")), []).append(event)
    labelled: dict[str, list[dict[str, Any]]] = {}
    for label in labels:
        labelled.setdefault(str(label.get("part")), []).append(label)
    lines: list[str] = []
    for path in sorted(by_part, key=part_key):
        events = by_part[path]
        clauses = [sentence(event, with_text) for event in events]
        if path in labelled:
            clauses.append(_label_clause(labelled[path]))
        if path == "":
            heading = "the request"
        else:
            heading = f"part {path}"
            text = next((e["query"] for e in events if isinstance(e.get("query"), str)), None)
            if with_text and text is not None:
                heading += f" {_quote(text)}"
        separator = ": " if path == "" else " "
        lines.append(heading + separator + "; ".join(clauses))
    if dropped_events:
        lines.append(f"{_count(dropped_events, 'later event')} not recorded (routing.max_events)")
    return lines


def _structural(event: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in event.items():
        if key in _STRUCTURAL or (key == "origin" and isinstance(value, str) and value in _ORIGINS):
            kept[key] = value
        elif key == "parts" and isinstance(value, list):
            kept["part_count"] = len(value)
        elif isinstance(value, (bool, int, float)) or value is None:
            kept[key] = value
    return kept


def decision_only(trace: dict[str, Any]) -> dict[str, Any]:
    """The stored trace without any query text: structure, sources, timings, reasons."""

    def result(entry: dict[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in entry.items() if k in ("source", "status", "route", "item_count")}
        if isinstance(entry.get("error"), dict):
            kept["error"] = {"type": entry["error"].get("type")}
        if isinstance(entry.get("condition"), dict):
            kept["condition"] = result(entry["condition"])
        return kept

    error = trace.get("error")
    return {
        "trace_id": trace.get("trace_id"),
        "time": trace.get("time"),
        "status_code": trace.get("status_code"),
        "duration_ms": trace.get("duration_ms"),
        "failed": trace.get("failed"),
        "fallback": trace.get("fallback"),
        "cached": trace.get("cached"),
        "dry_run": trace.get("dry_run"),
        "replay_of": trace.get("replay_of"),
        "dropped_events": trace.get("dropped_events", 0),
        "error": {"type": error.get("type")} if isinstance(error, dict) else None,
        "chain": [_structural(e) for e in trace.get("chain", [])],
        "results": [result(r) for r in trace.get("results", [])],
        "labels": [
            {k: label.get(k) for k in ("part", "route", "decision", "time")}
            for label in trace.get("labels", [])
        ],
    }
