"""Labels: a user's correction of one part's routing decision, stored beside its trace.

A label names a trace, one of its parts (the part path of the events, "0", "1.0"), and the
route that part should have had, or `none` for "no source serves this". It keeps the part's
query as the trace stored it: the text on a plain store, its keyed pseudonym on a redacted
one (a redacted store never learns the text back from a label). It also keeps the decision
the part had, so a list of labels reads as "was X, should be Y".

Conflicts: several labels may name the same query (the same trace relabelled, or the same
words asked again and labelled differently). The latest label wins: labels are numbered in
the order they were stored, and for each query (compared after `routing.language.text.normalise`)
only the highest-numbered one counts, in `effective_labels`, in the export and in a fit.
A user who changes their mind is believed; the outcome depends on nothing but that order.

One label per part is kept: a new label of a part replaces the one before it (the row
keeps a count, `replaced`, of those it replaced), so relabelling a part a thousand times
stores one row. The store keeps at most `trace.max_labels` labels (the oldest go first).
A labelled trace outlives retention (`search.traces.rows.prune`) until its label was
exported (`search label --export`) or is older than `LABEL_KEEP_DAYS`; then it leaves by
the same rules as any trace. The label itself stays until the label bound removes it.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from routing.language.text import normalise
from search.pseudonym import LEGACY_PREFIX, PREFIX

log = logging.getLogger("search.correction.labels")

NONE = "none"  # "no configured source serves this"
INTENT_STEPS = (
    "intent_label",
    "intent_keyword",
    "intent_cached",
    "intent_semantic",
    "intent_llm",
    "intent_session",
    "intent_world",
    "intent_default",
)
# The labels table as schema 4 created it; schema 5's columns are added to it by
# `upgrade_labels_5`, on a new file as on an old one (the one place they are written).
LABELS_SCHEMA = """
CREATE TABLE IF NOT EXISTS labels (
    id INTEGER PRIMARY KEY,
    trace_id TEXT NOT NULL,
    part TEXT NOT NULL,
    route TEXT NOT NULL,
    query TEXT NOT NULL,
    decision TEXT,
    created_at REAL NOT NULL,
    redacted INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS labels_trace ON labels(trace_id);
"""
# Schema 5: `replaced` counts the earlier labels of the same part that this one replaced
# (one row per part is kept); `exported_at` is when `search label --export` wrote it out.
LABELS_SCHEMA_5 = {
    "replaced": "ALTER TABLE labels ADD COLUMN replaced INTEGER NOT NULL DEFAULT 0",
    "exported_at": "ALTER TABLE labels ADD COLUMN exported_at REAL",
}


def upgrade_labels_5(conn: sqlite3.Connection) -> None:
    """Schema 5's columns, each added only where the file lacks it (a file may have had
    its labels table created in the newest shape under an older version number)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(labels)")}
    for column, statement in LABELS_SCHEMA_5.items():
        if column not in have:
            conn.execute(statement)


LABEL_COLUMNS = (
    "id",
    "trace_id",
    "part",
    "route",
    "query",
    "decision",
    "created_at",
    "redacted",
    "replaced",
    "exported_at",
)
MAX_PART_CHARS = 64


class LabelError(ValueError):
    """A label that cannot be stored; `field` names what is wrong (HTTP 422, CLI exit 2)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Label:
    """One stored label."""

    id: int
    trace_id: str
    part: str
    route: str
    query: str  # as the trace stored it: text, or a pseudonym on a redacted store
    decision: str | None  # what the part had when it was labelled
    created_at: float
    redacted: bool
    replaced: int = 0  # earlier labels of the same part that this one replaced
    exported_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "label_id": self.id,
            "trace_id": self.trace_id,
            "part": self.part,
            "route": self.route,
            "query": self.query,
            "decision": self.decision,
            "created_at": self.created_at,
            "time": datetime.fromtimestamp(self.created_at, UTC).isoformat(timespec="milliseconds"),
            "redacted": self.redacted,
            "replaced": self.replaced,
            "exported": self.exported_at is not None,
        }


def is_pseudonym(text: str) -> bool:
    return isinstance(text, str) and text.startswith((PREFIX, LEGACY_PREFIX))


# --- what a part is -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartDecision:
    """A labellable part of a trace: its query and the route its intent stages chose."""

    part: str
    query: str
    decision: str | None  # None when judged unserved
    stage: str


def part_decisions(chain: Sequence[Mapping[str, Any]]) -> dict[str, PartDecision]:
    """Each part that was routed, by part path: the last intent event of the part decides
    (a keyword match escalated to the LLM is decided by the LLM)."""
    parts: dict[str, PartDecision] = {}
    for event in chain:
        if event.get("step") not in INTENT_STEPS:
            continue
        decision = event.get("decision")
        if event.get("step") == "intent_semantic" and not event.get("matched", True):
            continue  # a miss decides nothing: a later stage (or the default) does
        if event.get("step") == "intent_llm" and event.get("outcome") == "timeout":
            continue  # cut off by the request's deadline: it decided nothing
        query = event.get("query")
        if not isinstance(query, str):
            continue
        parts[str(event.get("part", ""))] = PartDecision(
            str(event.get("part", "")),
            query,
            decision if isinstance(decision, str) else None,
            str(event["step"]),
        )
    return parts


def check_label(
    trace: Mapping[str, Any], part: Any, route: Any, routes: Iterable[str]
) -> PartDecision:
    """The part a label `{part, route}` names on `trace`; LabelError names a bad field."""
    known = sorted({*routes, NONE})
    if not isinstance(part, str) or not part.strip() or len(part) > MAX_PART_CHARS:
        raise LabelError("part", 'must be a part path such as "0" or "1.0"')
    if not isinstance(route, str) or not route.strip():
        raise LabelError("route", f"must be a route name (one of {', '.join(known)})")
    parts = part_decisions(trace.get("chain") or [])
    if part not in parts:
        have = ", ".join(repr(p) for p in sorted(parts)) or "none"
        raise LabelError("part", f"{part!r} is not a routed part of this trace (parts: {have})")
    if route not in known:
        raise LabelError("route", f"{route!r} is not a route (known: {', '.join(known)})")
    return parts[part]


# --- storing and reading --------------------------------------------------------------


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One real transaction around a label write, committed whole or rolled back.

    The store's connections are autocommit (`isolation_level=None`), where `with conn:`
    begins nothing: each statement committed alone, so two writers labelling one part at
    once each deleted the other's new row. `BEGIN IMMEDIATE` takes the write lock first, so
    concurrent writers queue (the connection's busy timeout) and each sees the one before.
    Inside a transaction the caller already holds, a savepoint does the same."""
    if conn.in_transaction:
        conn.execute("SAVEPOINT label_write")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK TO label_write")
            conn.execute("RELEASE label_write")
            raise
        conn.execute("RELEASE label_write")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def insert_label(
    conn: sqlite3.Connection,
    trace_id: str,
    target: PartDecision,
    route: str,
    redacted: bool,
    now: float | None = None,
    max_labels: int | None = None,
) -> Label:
    """Store the label only if its trace is still there (retention may have just removed
    an unlabelled trace); KeyError when it is gone. In one transaction it replaces the
    part's earlier label (counting it and every label that one replaced) and keeps only
    the newest `max_labels` rows."""
    created = time.time() if now is None else now
    with write_transaction(conn):
        earlier = conn.execute(
            "SELECT COALESCE(SUM(replaced + 1), 0) FROM labels WHERE trace_id = ? AND part = ?",
            (trace_id, target.part),
        ).fetchone()[0]
        cursor = conn.execute(
            "INSERT INTO labels (trace_id, part, route, query, decision, created_at, redacted,"
            " replaced) SELECT ?, ?, ?, ?, ?, ?, ?, ?"
            " WHERE EXISTS (SELECT 1 FROM traces WHERE trace_id = ?)",
            (
                trace_id,
                target.part,
                route,
                target.query,
                target.decision,
                created,
                int(redacted),
                int(earlier),
                trace_id,
            ),
        )
        if cursor.rowcount != 1:
            raise KeyError(trace_id)
        label_id = int(cursor.lastrowid or 0)
        conn.execute(
            "DELETE FROM labels WHERE trace_id = ? AND part = ? AND id != ?",
            (trace_id, target.part, label_id),
        )
        if max_labels is not None:
            bound_labels(conn, max_labels)
    return Label(
        label_id,
        trace_id,
        target.part,
        route,
        target.query,
        target.decision,
        created,
        redacted,
        int(earlier),
    )


def bound_labels(conn: sqlite3.Connection, max_labels: int) -> None:
    """Keep the newest `max_labels` rows. Counted in rows, not ids: relabelling one part
    spends an id each time while keeping one row, so `id <= MAX(id) - max_labels` dropped
    every other label after enough relabels of one part."""
    # the `max_labels`-th newest id (NULL while there are fewer rows: nothing goes)
    conn.execute(
        "DELETE FROM labels WHERE id < (SELECT id FROM labels ORDER BY id DESC LIMIT 1 OFFSET ?)",
        (max(int(max_labels), 1) - 1,),
    )


def mark_exported(conn: sqlite3.Connection, ids: Iterable[int], now: float | None = None) -> None:
    """Note that these labels were written out: their traces may leave by retention."""
    when = time.time() if now is None else now
    with write_transaction(conn):
        conn.executemany("UPDATE labels SET exported_at = ? WHERE id = ?", [(when, i) for i in ids])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _label(row: Sequence[Any]) -> Label | None:
    """The row as a Label, or None when a field has a type no label write gives it (a
    damaged or hand-edited store: SQLite keeps whatever it is given, a BLOB query too)."""
    id_, trace_id, part, route, query, decision, created, redacted, replaced, exported = row
    if not (
        isinstance(id_, int)
        and all(isinstance(text, str) for text in (trace_id, part, route, query))
        and (decision is None or isinstance(decision, str))
        and _is_number(created)
        and isinstance(redacted, int)
        and isinstance(replaced, int)
        and (exported is None or _is_number(exported))
    ):
        return None
    return Label(
        int(id_),
        trace_id,
        part,
        route,
        query,
        decision,
        float(created),
        bool(redacted),
        int(replaced),
        None if exported is None else float(exported),
    )


def read_labels(conn: sqlite3.Connection, trace_id: str | None = None) -> list[Label]:
    """Labels in the order they were stored (all of them, or one trace's). A row whose
    fields have the wrong type is left out and the number left out is logged, so one
    damaged row cannot stop `search fit` or `search label --export`."""
    sql = f"SELECT {', '.join(LABEL_COLUMNS)} FROM labels"
    args: tuple[Any, ...] = ()
    if trace_id is not None:
        sql += " WHERE trace_id = ?"
        args = (trace_id,)
    labels, damaged = [], 0
    for row in conn.execute(sql + " ORDER BY id", args).fetchall():
        label = _label(tuple(row))
        if label is None:
            damaged += 1
        else:
            labels.append(label)
    if damaged:
        log.warning(
            "labels: left out %d stored label(s) whose fields have the wrong type "
            "(a damaged or edited trace store)",
            damaged,
        )
    return labels


def effective_labels(labels: Iterable[Label]) -> list[Label]:
    """One label per query, the latest stored (highest id); in the order they won."""
    latest: dict[str, Label] = {}
    for label in sorted(labels, key=lambda item: item.id):
        key = label.query if is_pseudonym(label.query) else normalise(label.query)
        latest.pop(key, None)
        latest[key] = label
    return list(latest.values())
