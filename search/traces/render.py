"""Human-readable text for results, explanation chains, stored traces and replays (CLI)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from routing.chain.steps import Step
from search.terminal import escape_controls

_COLUMNS = ("seq", "t_ms", "part", "step", "source/decision", "outcome", "elapsed", "reason")


def _target(event: dict[str, Any]) -> str:
    """The source/decision column: where this step sent the part, or which source acted."""
    target = event.get("decision") or event.get("source") or event.get("route") or ""
    if event["step"] == Step.FALLBACK:
        target = f"{event.get('from_source')} -> {event.get('to_source')}"
    elif event["step"] == Step.FUSION:
        target = "+".join(event.get("sources", []))
    return str(target)


def _event_row(event: dict[str, Any]) -> tuple[str, ...]:
    target = _target(event)
    elapsed = event.get("elapsed_ms")
    reason = event.get("reason") or event.get("error_type") or ""
    if event["step"] == Step.INTENT_SEMANTIC and isinstance(event.get("similarity"), (int, float)):
        reason = f"similarity {event['similarity']:.3f}"
    elif event["step"] == Step.INTENT_WORLD:
        changes = "changes with time" if event.get("time_sensitive") else "does not change"
        reason = f"world {event.get('world')}, answer {changes}"
    elif event["step"] == Step.SNAPSHOT_ANSWERED:
        reason = f"in place of {event.get('live_route')}"
    return (
        str(event["seq"]),
        f"{event['t_ms']:.1f}",
        event.get("part") or "-",
        event["step"],
        str(target),
        str(event.get("outcome", "")),
        f"{elapsed:.1f} ms" if isinstance(elapsed, (int, float)) else "",
        str(reason),
    )


def chain_table(chain: list[dict[str, Any]]) -> str:
    """The chain as an aligned table in seq order."""
    rows = [_COLUMNS, *(_event_row(e) for e in sorted(chain, key=lambda e: e["seq"]))]
    return "\n".join(_aligned(rows))


def aligned(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows (the first a header) as aligned columns, each cell kept to one line."""
    return "\n".join(_aligned(list(rows)))


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    # A cell is one line, whatever the stored text holds (a newline, an escape sequence).
    rows = [tuple(escape_controls(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in rows]


def event_brief(event: dict[str, Any] | None) -> str:
    """One event in a few words, without timings: 'source_invoked ha error connection_refused'."""
    if event is None:
        return "-"
    words = [str(event["step"]), _target(event)]
    if event.get("outcome"):
        words.append(str(event["outcome"]))
    if event["step"] == Step.SOURCE_INVOKED and event.get("outcome") == "ok":
        words.append(f"{event.get('result_count')} results")
    reason = event.get("reason") or event.get("error_type")
    if reason and event["step"] != Step.INTENT_KEYWORD:
        words.append(str(reason))
    return " ".join(w for w in words if w)


def side_by_side(
    rows: list[tuple[dict[str, Any] | None, dict[str, Any] | None]],
    marked: int | None,
    mark: str = "",
) -> list[str]:
    """Old and new events of one part in two columns; `marked` row gets '<- mark'."""
    table: list[tuple[str, ...]] = [("old", "new", "")]
    for index, (old, new) in enumerate(rows):
        same = old is not None and new is not None and event_brief(old) == event_brief(new)
        flag = f"<- {mark}" if index == marked else ("" if same else "*")
        table.append((event_brief(old), event_brief(new), flag))
    return ["  " + line for line in _aligned(table)]


def trace_list_table(traces: list[dict[str, Any]], with_query: bool = True) -> str:
    """`search trace list`: one line per trace, newest first."""
    header = ("trace_id", "time", "status", "ms", "flags", "sources")
    rows: list[tuple[str, ...]] = [header + (("query",) if with_query else ())]
    for t in traces:
        flags = "".join(
            letter
            for letter, on in (
                ("F", t["fallback"]),
                ("C", t["cached"]),
                ("E", t["failed"]),
                ("D", t["dry_run"]),
                ("R", bool(t["replay_of"])),
            )
            if on
        )
        row = (
            t["trace_id"],
            t["time"][:23],
            str(t["status_code"]),
            f"{t['duration_ms']:.1f}",
            flags or "-",
            ",".join(t["sources"]) or "-",
        )
        query = t["query"] if len(t["query"]) <= 60 else t["query"][:57] + "..."
        rows.append(row + ((query,) if with_query else ()))
    return "\n".join(_aligned(rows))


NO_SOURCE = "no source"  # where an unserved or withheld part went, in text


def results_text(results: list[dict[str, Any]]) -> str:
    """Each part with where it went and its first items (source text kept to one line)."""
    lines: list[str] = []
    for index, result in enumerate(results):
        condition = result.get("condition")
        if condition:
            lines.append(
                f"[{index}] {'unless' if condition.get('negated') else 'if'} "
                f"{condition['query']!r}: {condition['status']} "
                f"from {condition['source'] or NO_SOURCE}"
            )
            for item in condition["items"][:1]:
                lines.append(f"      {_one(item['title'])}: {_one(item['text'][:160])}")
        where = result["source"] or NO_SOURCE
        status = result["status"]
        if result.get("may_be_out_of_date") is True:
            status += ", may be out of date"
        lines.append(f"[{index}] {result['query']!r} -> {where} ({status})")
        if result.get("error"):
            error = result["error"]
            lines.append(f"    error: {_one(error['type'])}: {_one(error['message'])}")
        for item in result["items"][:3]:
            lines.append(f"    - {_one(item['title'])}: {_one(item['text'][:200])}")
            if item.get("url"):
                lines.append(f"      {_one(item['url'])}")
    return "\n".join(lines)


def _one(text: Any) -> str:
    return escape_controls(str(text))
