"""`search trace list|show` and `search replay`: reading and replaying the trace store.

Exit status: 0 on success; 1 when a replay changed a routing decision (one trace or any
in `--all`), or when `trace show` finds no trace with the id given (a failed lookup); 2 on
bad usage (an id prefix under 6 characters, or one several traces start with), a bad
filter, a replay of an unknown id, or a trace that cannot be replayed (stored redacted).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from search.config import Config, ConfigError, TraceConfig, load_config
from search.terminal import escape_controls, say
from search.traces.narrative import decision_only, narrative
from search.traces.store import (
    MIN_ID_PREFIX,
    FilterError,
    SQLiteTraceStore,
    TraceFilter,
    TraceIdError,
    parse_filters,
)

EXIT_OK, EXIT_CHANGED, EXIT_USAGE = 0, 1, 2
EXIT_NOT_FOUND = 1
Handler = Callable[[argparse.Namespace], int]


class TraceUsageError(Exception):
    """Bad arguments or a bad filter: exit 2."""


class TraceNotFound(Exception):
    """No trace has the id asked for (a failed lookup, not bad usage): exit 1."""


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="config file (default: $SEARCH_CONFIG or config.yaml)")
    parser.add_argument("--store", help="trace database (default: the config's trace.path)")


def _filter_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", help="unix seconds, ISO 8601, or an age such as 2h or 7d")
    parser.add_argument("--until", help="same forms as --since")


def add_commands(commands: Any) -> dict[str, Handler]:
    """Register `trace` and `replay` on the `search` subparsers; returns their handlers."""
    trace = commands.add_parser("trace", help="read stored traces")
    actions = trace.add_subparsers(dest="trace_command", required=True)

    listing = actions.add_parser("list", help="list stored traces, newest first")
    listing.add_argument("--step", help="has an event with this step (e.g. fallback)")
    listing.add_argument("--source", help="involves this source")
    listing.add_argument(
        "--outcome", help="a source call ended so: ok|empty|error|timeout|cached|skipped"
    )
    listing.add_argument("--failed", action="store_true", help="only failed requests or parts")
    listing.add_argument(
        "--fallback", action="store_true", help="only requests where a fallback fired"
    )
    listing.add_argument("-q", "--text", help="query text contains")
    listing.add_argument("--session", help="the turns of this session_id")
    listing.add_argument(
        "--replays", action="store_true", help="list replays too (left out by default)"
    )
    _filter_options(listing)
    listing.add_argument("--limit", default="50", help="page size (1-1000, default 50)")
    listing.add_argument("--offset", help="skip this many")
    listing.add_argument("--cursor", help="the next_cursor of the previous page")
    listing.add_argument("--json", action="store_true", help="print the page as JSON")
    _store_options(listing)

    show = actions.add_parser("show", help="one trace: its chain and a diagnosis")
    show.add_argument("id", help=f"trace id (or a unique prefix of {MIN_ID_PREFIX}+ characters)")
    show.add_argument("--json", action="store_true", help="print the stored trace as JSON")
    show.add_argument(
        "--decision-only",
        action="store_true",
        help="structure and reasons only, no query text (safe for a bug report)",
    )
    _store_options(show)

    replay = commands.add_parser("replay", help="re-run recorded requests under a config")
    replay.add_argument("id", nargs="?", help="trace id (or a unique prefix)")
    replay.add_argument("--all", action="store_true", help="regression sweep over stored traces")
    replay.add_argument("--failed-only", action="store_true", help="with --all: failed traces only")
    replay.add_argument("--limit", type=int, help="with --all: at most this many traces")
    _filter_options(replay)
    replay.add_argument("--json", action="store_true", help="print the comparison as JSON")
    _store_options(replay)
    return {"trace": _guarded(cmd_trace), "replay": _guarded(cmd_replay)}


def _guarded(handler: Handler) -> Handler:
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (TraceUsageError, FilterError, ConfigError) as exc:
            say(f"search: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except TraceNotFound as exc:
            say(f"search: {exc}", file=sys.stderr)
            return EXIT_NOT_FOUND

    return run


def _trace_config(args: argparse.Namespace) -> tuple[Config | None, TraceConfig]:
    """The trace settings (and the whole config when one was needed or given)."""
    if args.store and not args.config:
        return None, TraceConfig(path=args.store)
    config = load_config(args.config)
    trace = config.trace
    if args.store:
        trace = trace.model_copy(update={"path": args.store})
    return config, trace


def _existing_store(trace: TraceConfig) -> SQLiteTraceStore:
    store = SQLiteTraceStore(trace.model_copy(update={"enabled": True}))
    if not store.path.exists():
        raise TraceUsageError(f"no trace store at {store.path}")
    return store


def _find(store: SQLiteTraceStore, trace_id: str, *, replaying: bool = False) -> dict[str, Any]:
    """The trace; an unknown id fails the lookup (exit 1), but not a replay, whose 1 means
    "routing changed": a mistyped id must not read as a regression (exit 2). A prefix too
    short to look up, or one several traces start with, is bad usage (exit 2), said so."""
    try:
        full = store.resolve_id(trace_id)
    except TraceIdError as exc:
        raise TraceUsageError(str(exc)) from None
    trace = store.get_trace(full) if full else None
    if trace is None:
        error = TraceUsageError if replaying else TraceNotFound
        raise error(f"trace {trace_id}: no such trace in {store.path}")
    return trace


# --- trace list / show ---------------------------------------------------------------


def cmd_trace(args: argparse.Namespace) -> int:
    _, trace_config = _trace_config(args)
    if args.trace_command == "list" and not args.store:
        # The config's own store, before the first request wrote it: nothing stored yet
        # is an empty list, not an error (a --store FILE that is missing is a typo: exit 2).
        unopened = SQLiteTraceStore(trace_config.model_copy(update={"enabled": True}))
        if not unopened.path.exists():
            return _list(None, args, empty_at=unopened.path)
    store = _existing_store(trace_config)
    try:
        if args.trace_command == "list":
            return _list(store, args)
        return _show(store, args)
    finally:
        store.close_sync()


def _list(
    store: SQLiteTraceStore | None, args: argparse.Namespace, *, empty_at: Path | None = None
) -> int:
    from search.traces.render import trace_list_table

    params = {
        name: str(value)
        for name, value in (
            ("step", args.step),
            ("source", args.source),
            ("outcome", args.outcome),
            ("q", args.text),
            ("session", args.session),
            ("since", args.since),
            ("until", args.until),
            ("limit", args.limit),
            ("offset", args.offset),
            ("cursor", args.cursor),
        )
        if value is not None
    }
    if args.failed:
        params["failed"] = "true"
    if args.fallback:
        params["fallback"] = "true"
    if args.replays:
        params["replays"] = "true"
    try:
        filters = parse_filters(params)
    except FilterError as exc:
        option = "text" if exc.field == "q" else exc.field
        raise TraceUsageError(f"--{option}: {exc.problem}") from None
    if store is None:
        page: dict[str, Any] = {
            "traces": [],
            "total": 0,
            "limit": filters.limit,
            "offset": filters.offset,
            "next_cursor": None,
        }
    else:
        page = store.list_traces(filters)
    if args.json:
        say(json.dumps(page, indent=2, ensure_ascii=False), json_text=True)
        return EXIT_OK
    if page["traces"]:
        say(trace_list_table(page["traces"]))
    shown = len(page["traces"])
    footer = f"{shown} of {page['total']} traces"
    if empty_at is not None:
        footer += f" (none stored yet at {empty_at})"
    if page["next_cursor"]:
        footer += f"; next page: --cursor {page['next_cursor']}"
    say(footer)
    say("flags: F fallback, C cached, E failed, D dry run, R replay")
    return EXIT_OK


def _show(store: SQLiteTraceStore, args: argparse.Namespace) -> int:
    from search.traces.render import chain_table

    trace = _find(store, args.id)
    if args.decision_only:
        safe = decision_only(trace)
        if args.json:
            say(json.dumps(safe, indent=2, ensure_ascii=False), json_text=True)
            return EXIT_OK
        say(_header(safe))
        if safe["error"]:
            say(f"error: {safe['error']['type']}")
        say()
        say(chain_table(safe["chain"]))
        say()
        for line in narrative(
            safe["chain"],
            with_text=False,
            dropped_events=safe["dropped_events"],
            labels=safe["labels"],
        ):
            say(escape_controls(line))
        return EXIT_OK
    if args.json:
        say(json.dumps(trace, indent=2, ensure_ascii=False), json_text=True)
        return EXIT_OK
    say(_header(trace))
    say(f"query: {trace['query']!r}")
    if trace["error"]:
        error = trace["error"]
        say(escape_controls(f"error: {error['type']}: {error['message']}"))
    say()
    say(chain_table(trace["chain"]))
    say()
    for line in narrative(
        trace["chain"], dropped_events=trace["dropped_events"], labels=trace.get("labels", [])
    ):
        say(escape_controls(line))  # one line per part, whatever the query held
    if trace.get("labels"):
        say()
        say(label_table(trace["labels"]))
    return EXIT_OK


def label_table(labels: list[dict[str, Any]]) -> str:
    """The labels beside the decisions they correct, oldest first (the last one counts)."""
    from search.traces.render import aligned

    rows = [("label", "time", "part", "decision", "labelled", "replaced")]
    for label in labels:
        rows.append(
            (
                str(label["label_id"]),
                str(label["time"])[:23],
                str(label["part"]),
                str(label.get("decision") or "none"),
                str(label["route"]),
                str(label.get("replaced") or 0),
            )
        )
    return aligned(rows)


def _header(trace: dict[str, Any]) -> str:
    words = [
        f"trace {trace['trace_id']}",
        str(trace["time"]),
        f"status {trace['status_code']}",
        f"{trace['duration_ms']:.1f} ms",
    ]
    if trace.get("dry_run"):
        words.append("dry run")
    if trace.get("replay_of"):
        words.append(f"replay of {trace['replay_of']}")
    return "  ".join(words)


# --- replay --------------------------------------------------------------------------


def cmd_replay(args: argparse.Namespace) -> int:
    if bool(args.id) == bool(args.all):
        raise TraceUsageError("replay: give either a trace ID or --all")
    if args.id and (args.failed_only or args.since or args.until or args.limit is not None):
        raise TraceUsageError("replay: --since, --until, --failed-only and --limit go with --all")
    if args.limit is not None and args.limit < 1:
        raise TraceUsageError("--limit: must be at least 1")
    config, trace_config = _trace_config(args)
    if config is None:
        config = load_config(None)
    store = _existing_store(trace_config)
    if args.all:
        params = {k: v for k, v in (("since", args.since), ("until", args.until)) if v}
        try:
            base = parse_filters(params)
        except FilterError as exc:
            raise TraceUsageError(f"--{exc.field}: {exc}") from None
        return asyncio.run(_replay_all(config, store, base, args))
    original = _find(store, args.id, replaying=True)
    return asyncio.run(_replay_one(config, store, original, args.json))


async def _replay_one(
    config: Config, store: SQLiteTraceStore, original: dict[str, Any], as_json: bool
) -> int:
    from search.correction.replay import Replayer, ReplayError

    async with Replayer(config, store) as replayer:
        try:
            result = await replayer.replay(original)
        except ReplayError as exc:
            raise TraceUsageError(str(exc)) from None
    if as_json:
        say(json.dumps(_replay_json(result), indent=2, ensure_ascii=False), json_text=True)
    else:
        say("\n".join(escape_controls(line) for line in _replay_text(result)))
    return EXIT_CHANGED if result.routing_changed else EXIT_OK


def _replay_json(result: Any) -> dict[str, Any]:
    return {
        "original": result.original["trace_id"],
        "new_trace_id": result.new_trace_id,
        "session_turns": len(result.session_turns),
        "status": {"old": result.original["status_code"], "new": result.new_status},
        "answers": [{"source": a.source, "query": a.query, "from": a.how} for a in result.answered],
        "parts": [
            {
                "part": p.part,
                "query": p.query,
                "divergence": None
                if p.divergence is None
                else {
                    "kind": p.divergence.kind,
                    "description": p.divergence.description,
                    "routing": p.divergence.routing,
                },
            }
            for p in result.parts
        ],
        "routing_changed": result.routing_changed,
        "new_chain": result.new_chain,
    }


def _replay_text(result: Any) -> list[str]:
    from search.traces.render import side_by_side

    original = result.original
    lines = [
        (
            f"replay of {original['trace_id']} (recorded {original['time']}, status "
            f"{original['status_code']}) -> new trace {result.new_trace_id} "
            f"(status {result.new_status})"
        )
    ]
    if result.session_turns:
        lines.append(
            f"session {original.get('session_id')!r}: rebuilt from "
            f"{len(result.session_turns)} earlier turn(s), routed again under this config"
        )
    if result.answered:
        lines.append("sources answered:")
        for answer in result.answered:
            how = "from the capture" if answer.how == "capture" else "LIVE (no capture)"
            lines.append(f"  {answer.source} {answer.query!r}: {how}")
    else:
        lines.append("sources answered: none called")
    for part in result.parts:
        label = "the request" if part.part == "" else f"part {part.part}"
        if part.query is not None and part.part != "":
            label += f" {part.query!r}"
        verdict = "same"
        if part.divergence is not None:
            verdict = f"first divergence: {part.divergence.description}"
        lines.append(f"{label}: {verdict}")
        marked = part.divergence.row if part.divergence else None
        mark = part.divergence.description if part.divergence else ""
        lines.extend(side_by_side(part.rows, marked, mark))
    changed = [d for d in result.divergences if d.routing]
    if changed:
        lines.append(f"routing changed in {len(changed)} part(s)")
    elif result.divergences:
        lines.append("routing unchanged (other differences marked above)")
    else:
        lines.append("identical chain (timings aside)")
    return lines


async def _replay_all(
    config: Config, store: SQLiteTraceStore, base: TraceFilter, args: argparse.Namespace
) -> int:
    from search.correction.replay import Replayer, original_ids, sweep

    ids = original_ids(store, base, args.failed_only, args.limit)
    async with Replayer(config, store) as replayer:
        found = await sweep(replayer, store, ids)
    replayed, from_captures, skipped = found.replayed, found.from_captures, found.skipped
    changed, other = found.changes, found.other
    changed_traces = found.changed_traces
    if args.json:
        say(
            json.dumps(
                {
                    "replayed": replayed,
                    "answered_from_captures_only": from_captures,
                    "skipped_redacted": skipped,
                    "routing_changed": changed_traces,
                    "changes": [{"trace_id": t, "change": c} for t, c in changed],
                    "other_differences": [{"trace_id": t, "change": c} for t, c in other],
                },
                indent=2,
                ensure_ascii=False,
            ),
            json_text=True,
        )
    else:
        say(
            f"replayed {replayed} traces ({from_captures} entirely from captures, "
            f"{replayed - from_captures} with live calls); skipped {len(skipped)} (redacted)"
        )
        if changed:
            say(f"routing changed in {len(changed_traces)} trace(s):")
            for trace_id, change in changed:
                say(f"  {trace_id} {change}")
        else:
            say("no routing decision changed")
        if other:
            say(f"other differences ({len(other)}, not counted as routing changes):")
            for trace_id, change in other:
                say(f"  {trace_id} {change}")
    return EXIT_CHANGED if changed else EXIT_OK
