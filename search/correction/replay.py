"""Replay: run a recorded request again under the current (or given) config, and compare.

Sources answer from the trace's captured results where present (keyed by source and
query) and are called live otherwise; every answer is noted as one or the other. The
new run goes through the ordinary `Service`, so it records its own chain and is stored
as its own trace with `replay_of` set. The comparison aligns old and new chains by part
and step and names the first divergence in each part; whether routing changed follows
the part's outcome (its decision, route, sources, status, action), whatever diverged first.

A replay never acts. Its Service is built with `acting=False`, so the control gate
withholds every command (reason `replay`), and a `ReplaySource` has no `act` at all, captured
results or not. What the comparison reports instead is the action the trace would take now
(the command, had replay not withheld it) against the one it took.
"""

from __future__ import annotations

import asyncio
import difflib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Self, runtime_checkable

from routing.chain.events import NullRouteLog, route_log
from routing.chain.steps import Step
from routing.language.text import normalise
from routing.pipeline import TooManyParts
from routing.stages.labels import HouseholdRouting
from search.config import Config
from search.service import Service
from search.traces.narrative import part_key
from search.traces.records import TraceSink
from sources.base import Command, Item, Source, SourceError

# Divergences that mean routing changed (the sweep fails on these).
ROUTING_KINDS = frozenset(
    {
        "decision",
        "fallback_gone",
        "fallback_new",
        "fallback_changed",
        "parts",
        "route",
        "part_gone",
        "part_new",
        "action",
    }
)


class ReplayError(Exception):
    """The trace cannot be replayed (unknown id, stored redacted)."""


# --- answering from captures ---------------------------------------------------------


@dataclass(slots=True)
class Answered:
    source: str
    query: str
    how: str  # "capture" | "live"


class CaptureBook:
    """The captured answers of one trace, handed out in recorded order per (source, query)."""

    def __init__(self, captures: Iterable[dict[str, Any]] | None = None) -> None:
        self._answers: dict[tuple[str, str], deque[dict[str, Any]]] = {}
        self.cached: list[dict[str, Any]] = []
        for entry in captures or []:
            if entry.get("from_cache"):
                self.cached.append(entry)
            else:
                key = (str(entry.get("source")), str(entry.get("query")))
                self._answers.setdefault(key, deque()).append(entry)
        self.log: list[Answered] = []

    def take(self, source: str, query: str) -> dict[str, Any] | None:
        """The next recorded answer; the last one again once they run out; None if none."""
        answers = self._answers.get((source, query))
        if not answers:
            return None
        return answers.popleft() if len(answers) > 1 else answers[0]


def _replayed_error(error: dict[str, Any]) -> SourceError:
    """A SourceError whose reason and message are the recorded ones."""
    reason = str(error.get("reason") or "error")
    kind = type("ReplayedSourceError", (SourceError,), {"reason": reason})
    return kind(str(error.get("message") or reason))


class ReplaySource(Source):
    """Wraps a real source: answers from the book when it can, else calls it (started lazily).

    It reads commands as the real source does (so the replay can say what would be done)
    and reports the real source's `allow_control`, but it is no `ActingSource`: there is no
    way through it to the real source's `act`.
    """

    def __init__(self, inner: Source, holder: BookHolder) -> None:
        super().__init__(inner.name, inner.timeout_s)
        self.inner = inner
        self.kind = inner.kind  # type: ignore[misc]
        self.allow_control = bool(getattr(inner, "allow_control", False))
        self.holder = holder
        self._started = False
        self._start_lock = asyncio.Lock()

    def command(self, query: str) -> Command | None:
        return self.inner.command(query)

    async def search(self, query: str) -> list[Item]:
        book = self.holder.book
        entry = book.take(self.name, query)
        if entry is None:
            book.log.append(Answered(self.name, query, "live"))
            await self._ensure_started()
            return await self.inner.search(query)
        book.log.append(Answered(self.name, query, "capture"))
        if "error" in entry:
            raise _replayed_error(entry["error"])
        return [Item.from_dict(i) for i in entry.get("items", [])]

    async def _ensure_started(self) -> None:
        async with self._start_lock:
            if not self._started:
                await self.inner.start()
                self._started = True

    async def start(self) -> None:
        """Nothing: a replay answered entirely from captures never touches the real source."""

    async def aclose(self) -> None:
        if self._started:
            await self.inner.aclose()
            self._started = False

    async def info(self) -> dict[str, Any]:
        return await self.inner.info()


@dataclass(slots=True)
class BookHolder:
    """The book the wrapped sources read from; swapped per replayed trace."""

    book: CaptureBook = field(default_factory=CaptureBook)


# --- comparing chains ----------------------------------------------------------------


def is_attempt(event: dict[str, Any]) -> bool:
    """A stage that looked and passed (no decision), an LLM failure, or shared state
    (Redis) being unreachable: not a decision.

    Which stages get to look depends on caches and on what is configured, so attempts
    are shown side by side but never count as a divergence.
    """
    step = str(event.get("step"))
    if step in (Step.LLM_ERROR, Step.SHARED_STATE_DEGRADED):
        return True
    return step.startswith("intent_") and event.get("decision") is None


def _command_words(event: dict[str, Any]) -> str:
    command = event.get("command")
    if isinstance(command, dict):
        return f"{command.get('action')} {command.get('target')}"
    return ""


def signature(event: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for two events to mean the same thing (no timings, no stage name).

    A decision reached by another stage (cache vs keyword) is the same decision, and an
    answer from the result cache is the same answer as a live ok.
    """
    step = event.get("step")
    if is_attempt(event):
        return ("attempt", step, event.get("outcome"))
    if step == Step.DECOMPOSED:
        return ("decomposed", tuple(event.get("parts") or ()))
    if step == Step.CONDITIONAL_DETECTED:
        return (
            "conditional",
            event.get("condition"),
            event.get("consequence"),
            event.get("remainder"),
            bool(event.get("negated")),
        )
    if isinstance(step, str) and step.startswith("intent_"):
        return ("intent", event.get("query"), event.get("decision"))
    if step == Step.SOURCE_INVOKED and event.get("operation") == "act":
        return ("action", event.get("source"), _command_words(event), "acts")
    if step == Step.CONTROL_WITHHELD:
        # A replay withholds every command; what it would do is what the other reasons say.
        others = [r for r in event.get("reasons") or [event.get("reason")] if r != "replay"]
        return (
            "action",
            event.get("source"),
            _command_words(event),
            "withheld: " + ", ".join(str(r) for r in others) if others else "acts",
        )
    if step == Step.RESULT_CACHE_HIT:
        return ("answer", event.get("source"), "ok", "")
    if step == Step.SOURCE_INVOKED:
        outcome = event.get("outcome")
        reason = event.get("reason", "") if outcome in ("error", "timeout") else ""
        return ("answer", event.get("source"), outcome, reason)
    if step == Step.SOURCE_SKIPPED:
        return ("answer", event.get("source"), "skipped", event.get("reason"))
    if step == Step.FALLBACK:
        return ("fallback", event.get("from_source"), event.get("to_source"))
    if step == Step.FUSION:
        return ("fusion", tuple(event.get("sources") or ()))
    if step == Step.PLANNED:
        return ("planned", event.get("route"))
    if step == Step.ERROR:
        return ("error", event.get("error_type"))
    ignored = {"step", "seq", "t_ms", "part", "elapsed_ms", "message", "similarity"}
    return (str(step), tuple(sorted((k, repr(v)) for k, v in event.items() if k not in ignored)))


@dataclass(slots=True)
class Divergence:
    part: str
    kind: str
    description: str
    row: int  # index into the part's aligned rows

    @property
    def routing(self) -> bool:
        return self.kind in ROUTING_KINDS


@dataclass(slots=True)
class PartComparison:
    part: str
    query: str | None
    rows: list[tuple[dict[str, Any] | None, dict[str, Any] | None]]
    # The verdict: the routing change when there is one (its description then starts with
    # the first divergence, when that came earlier), else the first divergence.
    divergence: Divergence | None
    # The first divergence alone, as the rows show it (context for `divergence`).
    first: Divergence | None = None


# Learnt only while a command is carried out, which a replay never does: part of the
# action (compared as such), not a step a replay could repeat.
_ACTING_ONLY = frozenset({Step.COMMAND_RECOGNIZED})


def _by_part(chain: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    parts: dict[str, list[dict[str, Any]]] = {}
    for event in sorted(chain, key=lambda e: e.get("seq", 0)):
        if event.get("step") in _ACTING_ONLY:
            continue
        parts.setdefault(str(event.get("part", "")), []).append(event)
    return parts


def _align(
    old: list[dict[str, Any]], new: list[dict[str, Any]]
) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
    """Pairs of events, matched by the kind of step (intent with intent, answer with answer)."""
    old_kinds = [signature(e)[0] for e in old]
    new_kinds = [signature(e)[0] for e in new]
    rows: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = []
    matcher = difflib.SequenceMatcher(a=old_kinds, b=new_kinds, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend(zip(old[i1:i2], new[j1:j2], strict=False))
            continue
        width = max(i2 - i1, j2 - j1)
        for k in range(width):
            left = old[i1 + k] if i1 + k < i2 else None
            right = new[j1 + k] if j1 + k < j2 else None
            if tag == "replace" and left is not None and right is not None:
                rows.append((left, None))
                rows.append((None, right))
            else:
                rows.append((left, right))
    return rows


def _describe(old: dict[str, Any] | None, new: dict[str, Any] | None) -> tuple[str, str]:
    """(kind, words) for the first pair of events that differ."""
    if old is not None and new is not None:
        kind = signature(old)[0]
        if kind == "intent":
            if old.get("query") != new.get("query"):
                return "parts", f"part text changed: {old.get('query')!r} -> {new.get('query')!r}"
            return "decision", f"decision changed: {old.get('decision')} -> {new.get('decision')}"
        if kind == "answer":
            if old.get("source") != new.get("source"):
                return "route", f"answered by {new.get('source')} instead of {old.get('source')}"
            was = signature(old)[2:]
            now = signature(new)[2:]
            return "outcome", (
                f"{old.get('source')} outcome changed: "
                f"{'/'.join(str(x) for x in was if x)} -> "
                f"{'/'.join(str(x) for x in now if x)}"
            )
        if kind == "fallback":
            return "fallback_changed", (
                f"fallback changed: {old.get('from_source')} -> {old.get('to_source')} became "
                f"{new.get('from_source')} -> {new.get('to_source')}"
            )
        if kind in ("decomposed", "conditional"):
            return "parts", f"{old.get('step')} changed"
        if kind == "planned":
            return "decision", f"plan changed: {old.get('route')} -> {new.get('route')}"
        if kind == "fusion":
            return "route", "fusion members changed"
        if kind == "action":
            was, now = signature(old), signature(new)
            return "action", f"{new.get('source')} would {_acting(now)} (it {_acting(was, True)})"
        return "other", f"{old.get('step')} changed"
    if old is not None:
        step = old.get("step")
        if signature(old)[0] == "action":
            was = signature(old)
            return "action", f"{old.get('source')} would no longer act (it {_acting(was, True)})"
        if step == Step.FALLBACK:
            return "fallback_gone", (
                f"fallback no longer fires ({old.get('from_source')} -> {old.get('to_source')})"
            )
        if step in (Step.DECOMPOSED, Step.CONDITIONAL_DETECTED):
            return "parts", f"no longer {step}"
        if signature(old)[0] == "intent":
            return "decision", f"no longer decided ({old.get('decision')})"
        return "other", f"{step} no longer happens"
    assert new is not None
    step = new.get("step")
    if signature(new)[0] == "action":
        return "action", f"{new.get('source')} would {_acting(signature(new))} (it did not act)"
    if step == Step.FALLBACK:
        return "fallback_new", (
            f"fallback now fires ({new.get('from_source')} -> {new.get('to_source')})"
        )
    if step in (Step.DECOMPOSED, Step.CONDITIONAL_DETECTED):
        return "parts", f"now {step}"
    if signature(new)[0] == "intent":
        return "decision", f"now decided ({new.get('decision')})"
    return "other", f"{step} now happens"


def _acting(sig: tuple[Any, ...], past: bool = False) -> str:
    """'unlock front door' or 'not unlock front door (withheld: conditional)'."""
    _, _, words, how = sig
    if how == "acts":
        return f"{'did ' if past else ''}{words}"
    return f"{'did not' if past else 'not'} {words} ({how})"


@dataclass(frozen=True, slots=True)
class PartOutcome:
    """Where a part ended, read off its events: what a routing change is about, however the
    steps to it align (a redirect or a rewrite that came or went shifts every row after it)."""

    decision: str | None  # the deciding stage's route (None: nothing served it)
    route: str | None  # where it was sent, after any redirect
    sources: frozenset[str]  # the sources asked (a fallback or fusion asks several)
    status: str  # "answered" | "planned" | "unserved"
    actions: tuple[tuple[Any, ...], ...]  # action signatures, in order

    @classmethod
    def of(cls, events: list[dict[str, Any]]) -> Self:
        decision: str | None = None
        route: str | None = None
        sources: set[str] = set()
        status = "answered"
        for event in events:
            step, kind = event.get("step"), signature(event)[0]
            if kind == "intent" and not is_attempt(event):
                decision = route = event.get("decision")
            elif step == Step.INTENT_DEFAULT and event.get("outcome") == "unserved":
                decision, route, status = None, None, "unserved"
            elif step in (Step.TIME_SENSITIVE, Step.TIME_STABLE) and event.get("to_route"):
                route = str(event["to_route"])
            elif step == Step.PLANNED:
                route, status = event.get("route"), "planned"
            elif step in (Step.SOURCE_INVOKED, Step.RESULT_CACHE_HIT):
                sources.add(str(event.get("source")))
        actions = tuple(signature(e) for e in events if signature(e)[0] == "action")
        return cls(decision, route, frozenset(sources), status, actions)


def _names(sources: frozenset[str]) -> str:
    return "+".join(sorted(sources)) or "none"


def _lost_action(was: tuple[Any, ...], new: list[dict[str, Any]]) -> str:
    """'ha would not turn on the light (ha skipped: disabled) (it did turn on the light)':
    an action that is gone is an action change, whatever took its place."""
    _, source, words, _ = was
    skipped = next(
        (
            e.get("reason")
            for e in new
            if e.get("step") == Step.SOURCE_SKIPPED and e.get("source") == source
        ),
        None,
    )
    asked = any(e.get("step") == Step.SOURCE_INVOKED and e.get("source") == source for e in new)
    why = (
        f"{source} skipped: {skipped}"
        if skipped
        else ("no longer read as a command" if asked else f"{source} not asked")
    )
    return f"{source} would {_acting(('action', source, words, why))} (it {_acting(was, True)})"


def _action_change(old: PartOutcome, new: PartOutcome, events: list[dict[str, Any]]) -> str:
    """The first action that differs, as `_describe` words a changed one."""
    for was, now in zip(old.actions, new.actions, strict=False):
        if was != now:
            return f"{now[1]} would {_acting(now)} (it {_acting(was, True)})"
    if len(old.actions) > len(new.actions):
        return _lost_action(old.actions[len(new.actions)], events)
    now = new.actions[len(old.actions)]
    return f"{now[1]} would {_acting(now)} (it did not act)"


def _outcome_change(
    old: PartOutcome, new: PartOutcome, events: list[dict[str, Any]]
) -> tuple[str, str, str] | None:
    """(what moved, kind, words) for how the part's outcome moved, the most telling first;
    None if it did not."""
    if old.actions != new.actions:
        return "action", "action", _action_change(old, new, events)
    if old.decision != new.decision:
        return "decision", "decision", f"decision changed: {old.decision} -> {new.decision}"
    if old.route != new.route:
        return "route", "route", f"route changed: {old.route} -> {new.route}"
    if old.sources != new.sources:
        words = f"sources asked changed: {_names(old.sources)} -> {_names(new.sources)}"
        return "sources", "route", words
    if old.status != new.status:
        return "status", "decision", f"status changed: {old.status} -> {new.status}"
    return None


# Where the side-by-side shows what moved: the kinds of step, the likeliest first.
_SHOWN_IN: dict[str, tuple[str, ...]] = {
    "action": ("action",),
    "decision": ("intent", "planned"),
    "route": (Step.TIME_SENSITIVE, Step.TIME_STABLE, "planned", "intent", "answer"),
    "sources": ("fallback", "fusion", "answer"),
    "status": ("intent", "planned"),
}


def _differing_rows(
    rows: list[tuple[dict[str, Any] | None, dict[str, Any] | None]],
) -> list[int]:
    """Rows whose events differ (a stage that merely looked never does)."""
    return [
        index
        for index, (left, right) in enumerate(rows)
        if not any(e is not None and is_attempt(e) for e in (left, right))
        and (left is None or right is None or signature(left) != signature(right))
    ]


def _row_kind(row: tuple[dict[str, Any] | None, dict[str, Any] | None]) -> str:
    """The kind of step a row aligned (its events share it when both are there)."""
    event = row[0] if row[0] is not None else row[1]
    return "" if event is None else str(signature(event)[0])


def _row_showing(
    moved: str, rows: list[tuple[dict[str, Any] | None, dict[str, Any] | None]], after: int
) -> int:
    """The first differing row from `after` on that shows what moved (else `after`)."""
    differing = [index for index in _differing_rows(rows) if index >= after]
    for kind in _SHOWN_IN[moved]:
        for index in differing:
            if _row_kind(rows[index]) == kind:
                return index
    return after


def _first_divergence(
    path: str,
    rows: list[tuple[dict[str, Any] | None, dict[str, Any] | None]],
    new: list[dict[str, Any]],
) -> Divergence | None:
    """The first pair of events that differ, named and classified."""
    for index in _differing_rows(rows):
        left, right = rows[index]
        kind, words = _describe(left, right)
        if kind == "action" and left is not None and right is None:
            words = _lost_action(signature(left), new)
        return Divergence(path, kind, words, index)
    return None


def _compare_part(
    path: str,
    old: list[dict[str, Any]],
    new: list[dict[str, Any]],
    rows: list[tuple[dict[str, Any] | None, dict[str, Any] | None]],
) -> tuple[Divergence | None, Divergence | None]:
    """(the verdict, the first divergence) of a part both chains have.

    A first divergence that is no routing change (a redirect, a rewrite, a source's
    outcome) may come before one: the part's outcome decides, and the verdict then says
    both, the first divergence first."""
    first = _first_divergence(path, rows, new)
    if first is None or first.routing:
        return first, first
    change = _outcome_change(PartOutcome.of(old), PartOutcome.of(new), new)
    if change is None:
        return first, first
    moved, kind, words = change
    row = _row_showing(moved, rows, first.row)
    if moved == "sources" and _row_kind(rows[row]) == "fallback":
        words = _describe(*rows[row])[1]  # "fallback now fires (ha -> web)" says it best
    return Divergence(path, kind, f"{first.description}, then {words}", row), first


def _one_sided(path: str, old: list[dict[str, Any]], new: list[dict[str, Any]]) -> Divergence:
    """A part only one chain has."""
    if path == "":
        # The request's own events (a split, a condition, a request-wide error) came or
        # went: say which; an error is an outcome, not a routing decision.
        only = (old or new)[0]
        kind, words = _describe(None, only) if not old else _describe(only, None)
        return Divergence(path, kind, words, 0)
    if not new:
        return Divergence(path, "part_gone", "part no longer exists", 0)
    return Divergence(path, "part_new", "new part", 0)


def compare(
    old_chain: list[dict[str, Any]], new_chain: list[dict[str, Any]]
) -> list[PartComparison]:
    """Per part (in part order): aligned rows, the first divergence, and the verdict (the
    part's routing change if any, else that first divergence)."""
    old_parts, new_parts = _by_part(old_chain), _by_part(new_chain)
    comparisons: list[PartComparison] = []
    for path in sorted(set(old_parts) | set(new_parts), key=part_key):
        old, new = old_parts.get(path, []), new_parts.get(path, [])
        rows = _align(old, new)
        query = next((e["query"] for e in old + new if isinstance(e.get("query"), str)), None)
        if old and new:
            divergence, first = _compare_part(path, old, new, rows)
        else:
            divergence = first = _one_sided(path, old, new)
        comparisons.append(PartComparison(path, query, rows, divergence, first))
    return comparisons


# --- running -------------------------------------------------------------------------


@dataclass(slots=True)
class ReplayOutcome:
    original: dict[str, Any]
    new_trace_id: str
    new_status: int
    new_chain: list[dict[str, Any]]
    answered: list[Answered]
    parts: list[PartComparison]
    # Earlier turns of the original's session, routed again (not answered, not stored)
    # so a follow-up meets the session it had.
    session_turns: list[str] = field(default_factory=list)

    @property
    def divergences(self) -> list[Divergence]:
        return [p.divergence for p in self.parts if p.divergence is not None]

    @property
    def routing_changed(self) -> bool:
        return any(d.routing for d in self.divergences)

    @property
    def live_calls(self) -> int:
        return sum(1 for a in self.answered if a.how == "live")


MAX_SESSION_TURNS = 20
SESSION_PAGE = 100  # earlier turns read per look-up


def _session_kept(turn: dict[str, Any], original: dict[str, Any]) -> bool:
    """Whether the live session kept this earlier turn, so its replay must meet it.

    A dry run plans and changes nothing, the session included (the router does not
    `remember` it); a request over `max_parts` (422) was refused before routing; a redacted
    turn's words are not stored, so there is nothing to route again."""
    return (
        turn["trace_id"] != original.get("trace_id")
        and turn["started_at"] < original["started_at"]
        and not turn.get("dry_run")
        and not turn.get("redacted")
        and turn.get("status_code") != 422
    )


@runtime_checkable
class SessionHistory(Protocol):
    """Where the earlier turns of a session are read from (the trace store)."""

    def list_traces(self, filters: Any) -> dict[str, Any]: ...


class Replayer:
    """One Service for any number of replays; caches and sessions are emptied between them.

    A trace with a `session_id` is replayed in its session: the session's earlier turns
    (from `history`, within the session lifetime, at most `MAX_SESSION_TURNS`) are routed
    again under the current config first, so a follow-up ("what about tomorrow?") inherits
    what its previous turn would decide now, as it did then.
    """

    def __init__(
        self,
        config: Config,
        traces: TraceSink,
        history: SessionHistory | None = None,
        household: HouseholdRouting | None | Literal["data_dir"] = "data_dir",
    ) -> None:
        """`household`: the routing artefact to replay under (default: the data
        directory's, as the server routes; `search fit` passes the one it would write)."""
        self.holder = BookHolder()
        self.config = config
        self.history = (
            history
            if history is not None
            else (traces if isinstance(traces, SessionHistory) else None)
        )
        self.service = Service(
            config,
            traces=traces,
            wrap_source=lambda src: ReplaySource(src, self.holder),
            acting=False,
            household=household,
        )

    def _earlier_turns(self, original: dict[str, Any]) -> list[str]:
        """The queries of the turns before `original` that its live session kept, oldest
        first (at most `MAX_SESSION_TURNS`, the latest)."""
        session, started = original.get("session_id"), original.get("started_at")
        if not session or self.history is None or not isinstance(started, (int, float)):
            return []
        from search.traces.store import TraceFilter

        ttl = self.config.routing.session_ttl_s
        kept: list[str] = []
        cursor: int | None = None
        while len(kept) < MAX_SESSION_TURNS:  # newest first, page by page: dry runs are skipped
            page = self.history.list_traces(
                TraceFilter(
                    session=str(session),
                    since=started - ttl,
                    until=started,
                    originals_only=True,
                    limit=SESSION_PAGE,
                    cursor=cursor,
                )
            )
            kept.extend(t["query"] for t in page["traces"] if _session_kept(t, original))
            if not page.get("next_cursor"):
                break
            cursor = int(page["next_cursor"])
        return list(reversed(kept[:MAX_SESSION_TURNS]))

    async def _rebuild_session(self, session: str, turns: list[str]) -> None:
        """Route the earlier turns (dry run, nothing recorded) to refill the session. A turn
        this config's `max_parts` refuses is one its session would not have kept."""
        for query in turns:
            with route_log(factory=NullRouteLog):
                try:
                    await self.service.router.run(
                        query, dry_run=True, session_id=session, remember=True
                    )
                except TooManyParts:
                    continue

    async def __aenter__(self) -> Self:
        await self.service.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.service.aclose()

    async def replay(self, original: dict[str, Any]) -> ReplayOutcome:
        if original.get("redacted"):
            raise ReplayError(
                f"trace {original.get('trace_id')} was stored redacted; "
                "its query cannot be replayed"
            )
        book = CaptureBook(original.get("captures"))
        self.holder.book = book
        # One trace's replay must not steer the next one's.
        self.service.reset_routing_state()
        turns = self._earlier_turns(original)
        if turns:
            await self._rebuild_session(str(original["session_id"]), turns)
        for entry in book.cached:  # answers the original got from the result cache
            items = [Item.from_dict(i) for i in entry.get("items", [])]
            self.service.result_cache.set(
                (str(entry["source"]), normalise(str(entry["query"]))), items
            )
        outcome = await self.service.search(
            original["query"],
            dry_run=bool(original.get("dry_run")),
            session_id=original.get("session_id"),
            replay_of=original["trace_id"],
            # with the authority the original had, read from its chain: a replay never
            # acts (the service is built unable to), but it says what the request would do
            authorized=not _was_unauthorized(original.get("chain") or []),
        )
        return ReplayOutcome(
            original=original,
            new_trace_id=outcome.trace_id,
            new_status=outcome.status_code,
            new_chain=outcome.chain,
            answered=list(book.log),
            parts=compare(original.get("chain", []), outcome.chain),
            session_turns=turns,
        )


def _was_unauthorized(chain: Iterable[dict[str, Any]]) -> bool:
    """Whether the recorded request came from someone who might not act."""
    return any(
        event.get("step") == Step.CONTROL_WITHHELD
        and "not_authorized" in (event.get("reasons") or [event.get("reason")])
        for event in chain
    )


# --- the regression sweep (`replay --all`, and what `search fit` predicts) -------------


@dataclass(slots=True)
class Sweep:
    """What replaying a set of stored traces found."""

    replayed: int = 0
    from_captures: int = 0
    skipped: list[str] = field(default_factory=list)  # stored redacted: not replayable
    changes: list[tuple[str, str]] = field(default_factory=list)  # (trace, what changed)
    other: list[tuple[str, str]] = field(default_factory=list)  # not routing changes

    @property
    def changed_traces(self) -> list[str]:
        return sorted({trace for trace, _ in self.changes})


class TraceSource(Protocol):
    def get_trace(self, trace_id: str) -> dict[str, Any] | None: ...


async def sweep(replayer: Replayer, store: TraceSource, ids: Iterable[str]) -> Sweep:
    """Replay each trace (oldest first, as given) and sort what diverged into routing
    changes and other differences, each described for a reader."""
    found = Sweep()
    for trace_id in ids:
        original = store.get_trace(trace_id)
        if original is None:  # pruned meanwhile
            continue
        try:
            result = await replayer.replay(original)
        except ReplayError:
            found.skipped.append(trace_id)
            continue
        found.replayed += 1
        found.from_captures += result.live_calls == 0
        for part in result.parts:
            d = part.divergence
            if d is None:
                continue
            where = "the request" if d.part == "" else f"part {d.part}"
            if part.query is not None and d.part != "":
                where += f" {part.query!r}"
            (found.changes if d.routing else found.other).append(
                (trace_id, f"{where}: {d.description}")
            )
    return found


def original_ids(store: Any, base: Any, failed_only: bool, limit: int | None) -> list[str]:
    """Ids of recorded (not replayed) traces, oldest first (`replay --all`, `search fit`)."""
    from search.traces.store import TraceFilter

    ids: list[str] = []
    cursor: int | None = None
    while True:
        page_filter = TraceFilter(
            since=base.since,
            until=base.until,
            failed=failed_only,
            originals_only=True,
            limit=500,
            cursor=cursor,
            oldest_first=True,
        )
        page = store.list_traces(page_filter)
        ids.extend(t["trace_id"] for t in page["traces"])
        if limit is not None and len(ids) >= limit:
            return ids[:limit]
        if not page["next_cursor"]:
            return ids
        cursor = int(page["next_cursor"])
