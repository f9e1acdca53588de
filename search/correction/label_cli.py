"""`search label` and `search check`: store a correction; pin phrasings as a regression test.

    search label TRACE_ID ROUTE [--part P]   # as POST /traces/{id}/labels; part "0" by default
    search label --export FILE               # the effective labels as a `search check` file
    search check FILE                        # route each query (dry run), compare, exit 0/1/2

Exit status: 0 on success (check: every query routed as expected); 1 when check found a
miss, or label names a trace the store doesn't have; 2 on bad usage, a bad file, an unknown
part or route.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from search.config import Config, ConfigError, load_config
from search.correction.check import (
    CheckFileError,
    CheckRow,
    Expectation,
    check_row,
    read_expectations,
)
from search.correction.labels import Label, LabelError, effective_labels, is_pseudonym
from search.terminal import say
from search.traces.store import SQLiteTraceStore, TraceIdError

EXIT_OK, EXIT_MISS, EXIT_USAGE = 0, 1, 2
EXIT_NOT_FOUND = 1


class LabelUsageError(Exception):
    """Bad arguments: exit 2."""


def add_commands(commands: Any) -> dict[str, Any]:
    """Register `label` and `check` on the `search` subparsers; returns their handlers."""
    label = commands.add_parser("label", help="label a part of a stored trace with its route")
    label.add_argument("trace_id", nargs="?", help="trace id (or a unique prefix of 6+)")
    label.add_argument("route", nargs="?", help="the route it should have had, or none")
    label.add_argument("--part", default="0", help='the part path, as in the chain (default "0")')
    label.add_argument(
        "--export", metavar="FILE", help="write the stored labels as a `search check` file instead"
    )
    label.add_argument("--config", help="config file (default: $SEARCH_CONFIG or config.yaml)")
    label.add_argument("--store", help="trace database (default: the config's trace.path)")

    check = commands.add_parser("check", help="route each query of FILE (dry run) and compare")
    check.add_argument("file", help="YAML: query: route, or a list of {query, route}")
    check.add_argument("--config", help="config file (default: $SEARCH_CONFIG or config.yaml)")
    return {"label": _guarded(cmd_label), "check": _guarded(cmd_check)}


def _guarded(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(handler(args))
        except (LabelUsageError, LabelError, CheckFileError, ConfigError) as exc:
            say(f"search: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run


def known_routes(config: Config) -> list[str]:
    from routing.stages.build import route_descriptions

    return list(route_descriptions(config))


def _store(config: Config, path: str | None) -> SQLiteTraceStore:
    trace = config.trace.model_copy(update={"enabled": True, **({"path": path} if path else {})})
    store = SQLiteTraceStore(trace)
    if not store.path.exists():
        raise LabelUsageError(f"no trace store at {store.path}")
    return store


# --- label ---------------------------------------------------------------------------


def cmd_label(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.export:
        if args.trace_id or args.route:
            raise LabelUsageError("label --export FILE takes no TRACE_ID or ROUTE")
        return _export(config, args)
    if not args.trace_id or not args.route:
        raise LabelUsageError("label: give TRACE_ID and ROUTE (or --export FILE)")
    store = _store(config, args.store)
    try:
        try:
            full = store.resolve_id(args.trace_id)
        except TraceIdError as exc:
            raise LabelUsageError(str(exc)) from None
        if full is None:
            say(f"search: trace {args.trace_id}: no such trace in {store.path}", file=sys.stderr)
            return EXIT_NOT_FOUND
        try:
            label = store.add_label(full, args.part, args.route, known_routes(config))
        except KeyError:  # pruned between the lookup and the label
            say(f"search: trace {args.trace_id}: no such trace in {store.path}", file=sys.stderr)
            return EXIT_NOT_FOUND
    finally:
        store.close_sync()
    say(
        f"labelled part {label.part} of trace {label.trace_id} ({label.query!r}): "
        f"{label.decision or NONE_TEXT} -> {label.route}"
    )
    return EXIT_OK


NONE_TEXT = "none"


def export_entries(labels: list[Label]) -> tuple[list[dict[str, str]], int]:
    """The effective labels (latest wins per query) as `{query, route}`, and how many were
    left out because the store kept only their pseudonym."""
    entries, redacted = [], 0
    for label in effective_labels(labels):
        if label.redacted or is_pseudonym(label.query):
            redacted += 1
            continue
        entries.append({"query": label.query, "route": label.route})
    return entries, redacted


def _export(config: Config, args: argparse.Namespace) -> int:
    store = _store(config, args.store)
    try:
        labels = store.labels()
        entries, redacted = export_entries(labels)
        text = yaml.safe_dump(entries, allow_unicode=True, sort_keys=False, width=1000)
        _write_whole(Path(args.export), text)
        # exported: the labelled traces may now leave the store by the usual retention
        store.mark_exported(label.id for label in labels)
    finally:
        store.close_sync()
    target = Path(args.export)
    say(f"wrote {len(entries)} label(s) to {target}")
    if redacted:
        say(
            f"left out {redacted} label(s) stored redacted (the store keeps only a pseudonym "
            "of their query)"
        )
    return EXIT_OK


def _write_whole(target: Path, text: str) -> None:
    """Whole or not at all: a check file half-written is a wrong test. A symlink's file is
    the one written (the link stays), an existing file keeps its permissions, a new one
    gets the usual ones (the umask's), and a stream (`/dev/stdout`, a pipe) is written
    straight; nothing is left behind when writing fails."""
    target = target.resolve() if target.is_symlink() else target
    try:
        if target.exists() and not target.is_file() and not target.is_dir():
            target.write_text(text, encoding="utf-8")  # a device or a pipe: no rename there
            return
        mode = stat.S_IMODE(target.stat().st_mode) if target.is_file() else _new_file_mode()
        fd, temp = tempfile.mkstemp(
            dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}."
        )
    except OSError as exc:
        raise LabelUsageError(f"--export: cannot write {target}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, mode)
        os.replace(temp, target)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise LabelUsageError(f"--export: cannot write {target}: {exc.strerror}") from None


def _new_file_mode() -> int:
    """The mode `open()` would give a new file: 0o666 less the process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


# --- check ---------------------------------------------------------------------------


async def route_expectations(
    config: Config, expectations: list[Expectation], name: str = "expectations"
) -> list[CheckRow]:
    """Each expectation routed as a dry run (the model loaded once; no trace stored). An
    entry that splits into too many parts makes the file (`name`) bad input, refused as
    `search route` refuses it, and before the model loads."""
    from routing.pipeline import TooManyParts
    from search.service import Service
    from search.traces.records import NullTraceSink

    service = Service(config, traces=NullTraceSink())
    for expectation in expectations:
        try:
            service.router.check_parts(expectation.query)
        except TooManyParts as exc:
            raise CheckFileError(f"{name}: {expectation.query!r}: {exc}") from None
    rows = []
    try:
        await service.start(sources=False)
        for expectation in expectations:
            outcome = await service.search(expectation.query, dry_run=True)
            rows.append(check_row(expectation, outcome))
    finally:
        await service.aclose()
    return rows


def check_table(rows: list[CheckRow]) -> str:
    from search.traces.render import aligned

    table = [("", "query", "expected", "got", "stage", "confidence")]
    for row in rows:
        confidence = "-" if row.confidence is None else f"{row.confidence:.2f}"
        table.append(
            ("ok" if row.ok else "MISS", row.query, row.expected, row.got, row.stage, confidence)
        )
    return aligned(table)


def cmd_check(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    expectations = read_expectations(args.file, known_routes(config), config.server.max_query_chars)
    rows = asyncio.run(route_expectations(config, expectations, args.file))
    say(check_table(rows))
    misses = [row for row in rows if not row.ok]
    say()
    if misses:
        say(f"{len(misses)} of {len(rows)} queries did not route as expected:")
        for row in misses:
            say(f"  {row.query!r}: expected {row.expected}, got {row.got}")
        return EXIT_MISS
    say(f"all {len(rows)} queries routed as expected")
    return EXIT_OK
