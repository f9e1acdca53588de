"""Human-readable text for results and explanation chains (CLI output)."""

from __future__ import annotations

from typing import Any

_COLUMNS = ("seq", "t_ms", "part", "step", "source/decision", "outcome", "elapsed", "reason")


def _event_row(event: dict[str, Any]) -> tuple[str, ...]:
    target = event.get("decision") or event.get("source") or ""
    if event["step"] == "fallback":
        target = f"{event.get('from_source')} -> {event.get('to_source')}"
    elif event["step"] == "fusion":
        target = "+".join(event.get("sources", []))
    elapsed = event.get("elapsed_ms")
    reason = event.get("reason") or event.get("error_type") or ""
    if event["step"] == "intent_semantic" and "similarity" in event:
        reason = f"similarity {event['similarity']:.3f}"
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
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    return "\n".join(lines)


def results_text(results: list[dict[str, Any]]) -> str:
    """Each part with where it went and its first items."""
    lines: list[str] = []
    for index, result in enumerate(results):
        condition = result.get("condition")
        if condition:
            lines.append(f"[{index}] if {condition['query']!r}: {condition['status']} "
                         f"from {condition['source']}")
            for item in condition["items"][:1]:
                lines.append(f"      {item['title']}: {item['text'][:160]}")
        lines.append(f"[{index}] {result['query']!r} -> {result['source']} ({result['status']})")
        if result.get("error"):
            lines.append(f"    error: {result['error']['type']}: {result['error']['message']}")
        for item in result["items"][:3]:
            lines.append(f"    - {item['title']}: {item['text'][:200]}")
            if item.get("url"):
                lines.append(f"      {item['url']}")
    return "\n".join(lines)
