"""What a trace becomes on disk: the table, and the row a finished request is turned into.

The one place that decides what is kept: metadata by default (items dropped), captured
source answers only with `capture_results`, and with `redact` every text that is not the
router's own vocabulary (`KEPT_FIELDS`) as a keyed pseudonym (HMAC-SHA256 under the
store's own key, `search.pseudonym`).
It imports nothing heavy, because the trace writer process (`search.traces.writer`) runs it.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from routing.chain.steps import Step
from search.correction.labels import LABELS_SCHEMA, upgrade_labels_5
from search.json_codec import dumps_text
from search.pseudonym import LEGACY_PREFIX, PREFIX, Pseudonymizer, ephemeral
from search.traces.records import TraceRecord


class RowPolicy(Protocol):
    """The `trace:` settings a row depends on (`TraceConfig` has them)."""

    @property
    def capture_results(self) -> bool: ...

    @property
    def redact(self) -> bool: ...


SCHEMA_VERSION = 5
# Redaction keeps only what is known not to quote the user: these fields' string values
# (at any depth) come from the router's own vocabulary (steps, parts, source and route
# names, stage and rule names, outcomes, reasons, error types, the artefact a stage
# routed with). Every other string is a pseudonym in a redacted row and in exported
# spans, so a field added later cannot leak the words it carries.
KEPT_FIELDS = frozenset(
    {
        # every event
        "step",
        "part",
        # where a part went, and who decided
        "source",
        "sources",
        "decision",
        "route",
        "routes",
        "label",
        "answer",  # the LLM's route ("none" included)
        "habits",  # routes an LLM names for any query
        "from_source",
        "to_source",
        "from_route",
        "to_route",
        "live_route",
        "stage",
        "previous_stage",
        "origin",
        "fit",
        "tier",
        "method",
        "operation",
        "rule",
        "discourse",
        "kind",
        "classifier_prior",
        "component",
        # how it ended, and why
        "outcome",
        "status",
        "reason",
        "reasons",
        "declined",  # "semantic 0.41 < 0.55": a template of numbers
        "error_type",
        "error",  # a recognizer's exception type (an error dict is walked key by key)
        "type",
        "field",
        # the LLM stage's own settings
        "model",
        "response_format",
        "next",
        "confidence_source",
        "role",
        # a command, as the source's vocabulary names it (its target is the user's words)
        "action",
        "recognizer",
        "intent",
    }
)
# Free text written by the router or a source (error messages), which may quote the user:
# kept readable, with every query text and every word of one inside them replaced.
MESSAGE_FIELDS = frozenset({"message", "detail", "confidence_detail"})
OUTCOMES = ("ok", "empty", "error", "timeout", "cached", "skipped")
SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS traces (
    id INTEGER PRIMARY KEY,
    trace_id TEXT NOT NULL UNIQUE,
    started_at REAL NOT NULL,
    query TEXT NOT NULL,
    status_code INTEGER NOT NULL,
    duration_ms REAL NOT NULL,
    failed INTEGER NOT NULL,
    fallback INTEGER NOT NULL,
    cached INTEGER NOT NULL,
    dry_run INTEGER NOT NULL,
    redacted INTEGER NOT NULL,
    captured INTEGER NOT NULL,
    replay_of TEXT,
    part_count INTEGER NOT NULL,
    steps TEXT NOT NULL,
    sources TEXT NOT NULL,
    outcomes TEXT NOT NULL,
    dropped_events INTEGER NOT NULL,
    error TEXT,
    chain TEXT NOT NULL,
    results TEXT NOT NULL,
    captures TEXT,
    session_id TEXT
);
CREATE INDEX IF NOT EXISTS traces_session ON traces(session_id) WHERE session_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS traces_replay_of ON traces(replay_of) WHERE replay_of IS NOT NULL;
"""
    + LABELS_SCHEMA
)
# No index on started_at: every index costs each insert, and rows arrive in time order,
# so "older than" is "before the first young row" in id order (see `prune`), and a time
# filter scans at most `max_traces` rows.
COLUMNS = (
    "trace_id",
    "started_at",
    "query",
    "status_code",
    "duration_ms",
    "failed",
    "fallback",
    "cached",
    "dry_run",
    "redacted",
    "captured",
    "replay_of",
    "part_count",
    "steps",
    "sources",
    "outcomes",
    "dropped_events",
    "error",
    "chain",
    "results",
    "captures",
    "session_id",
)
# Schema upgrades, applied in order from the file's `user_version` (the CREATE above is
# the newest shape, for a new file). Version 3 changes no table: its step, keying the
# unkeyed digests of older redacted rows, is `rekey_legacy_digests` (it needs the key).
# Version 4 adds the labels beside the traces (search/correction/labels.py); 5, one label per
# part with a count of those it replaced, and when a label was exported.
MIGRATIONS: dict[int, str | Callable[[sqlite3.Connection], None]] = {
    2: "ALTER TABLE traces ADD COLUMN session_id TEXT;"
    "CREATE INDEX IF NOT EXISTS traces_session ON traces(session_id) "
    "WHERE session_id IS NOT NULL;",
    3: "",
    4: LABELS_SCHEMA,
    5: upgrade_labels_5,
}
INSERT = (
    f"INSERT OR IGNORE INTO traces ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in COLUMNS)})"
)


# Not the tail of a keyed one ('hmac-sha256:...').
_LEGACY = re.compile("(?<![a-z-])" + re.escape(LEGACY_PREFIX) + "[0-9a-f]{64}")
_process_pseudonym: Pseudonymizer | None = None


def is_digest(value: Any) -> bool:
    return isinstance(value, str) and value.startswith((PREFIX, LEGACY_PREFIX))


def rekey_legacy_digests(conn: sqlite3.Connection, pseudonym: Pseudonymizer) -> int:
    """Schema 3: every unkeyed 'sha256:' digest in a redacted row becomes the keyed
    pseudonym of that digest, so a phrase list no longer reverses it (in one transaction).
    The exact text still finds such a row: lookups also try `pseudonym.legacy(text)`."""
    rows = conn.execute(
        "SELECT id, query, session_id, chain, results, error FROM traces WHERE redacted = 1"
    ).fetchall()

    def rekey(text: Any) -> Any:
        if not isinstance(text, str) or LEGACY_PREFIX not in text:
            return text
        return _LEGACY.sub(lambda m: pseudonym(m.group()), text)

    conn.execute("BEGIN IMMEDIATE")
    try:
        for row in rows:
            conn.execute(
                "UPDATE traces SET query = ?, session_id = ?, chain = ?, results = ?, error = ? "
                "WHERE id = ?",
                (*(rekey(v) for v in row[1:]), row[0]),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(rows)


_DIGEST = re.compile(
    "(?:" + re.escape(PREFIX) + "|(?<![a-z-])" + re.escape(LEGACY_PREFIX) + ")[0-9a-f]{64}"
)
_WORD = re.compile(r"\w{3,}")  # shorter words say little, and are in every message


class _Redactor:
    """Every string not in a KEPT_FIELDS field becomes a pseudonym; messages are scrubbed
    of the texts seen (and their words) in a second pass."""

    def __init__(self, pseudonym: Pseudonymizer) -> None:
        self.seen: set[str] = set()
        self.pseudonym = pseudonym
        self._compiled: tuple[int, re.Pattern[str] | None] | None = None

    def text(self, value: Any) -> Any:
        """`value` as a user's text: strings (in lists and dicts too) become pseudonyms."""
        if isinstance(value, str):
            if is_digest(value):
                return value
            if value.strip():
                self.seen.add(value)
            return self.pseudonym(value)
        if isinstance(value, list):
            return [self.text(v) for v in value]
        if isinstance(value, dict):
            return self.fields(value)
        return value

    def fields(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {key: self._field(key, value) for key, value in data.items()}

    def _field(self, key: str, value: Any) -> Any:
        if isinstance(value, str):
            return value if key in KEPT_FIELDS or key in MESSAGE_FIELDS else self.text(value)
        if isinstance(value, list):
            return [self._field(key, v) for v in value]
        if isinstance(value, dict):
            return self.fields(value)
        return value

    def scrub(self, value: Any, key: str | None = None) -> Any:
        """Second pass: query texts quoted inside messages become their pseudonyms."""
        if isinstance(value, dict):
            return {k: self.scrub(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.scrub(v, key) for v in value]
        if isinstance(value, str) and key in MESSAGE_FIELDS:
            return self._scrub_text(value)
        return value

    def _scrub_text(self, text: str) -> str:
        if self._compiled is None or self._compiled[0] != len(self.seen):
            self._compiled = (len(self.seen), self._pattern())
        pattern = self._compiled[1]
        if pattern is None:
            return text
        return pattern.sub(self._replace, text)

    def _pattern(self) -> re.Pattern[str] | None:
        """One alternation, so a replacement is never scanned again: pseudonyms already
        there (kept), then the seen texts, longest first (a part quoted inside the whole
        query is not left half-replaced), then their words."""
        if not self.seen:
            return None
        texts = {t.lower() for t in self.seen if len(t) >= 3}
        words = {w.lower() for t in self.seen for w in _WORD.findall(t)} - texts
        alternatives = [_DIGEST.pattern]
        alternatives += [re.escape(t) for t in sorted(texts, key=len, reverse=True)]
        alternatives += [
            rf"(?<!\w){re.escape(w)}(?!\w)" for w in sorted(words, key=len, reverse=True)
        ]
        return re.compile("|".join(alternatives), re.IGNORECASE)

    def _replace(self, match: re.Match[str]) -> str:
        found = match.group()
        if _DIGEST.fullmatch(found):
            return found
        original = next((t for t in self.seen if t.lower() == found.lower()), found.lower())
        return str(self.pseudonym(original))


def redact(data: Any, pseudonym: Pseudonymizer | None = None) -> Any:
    """`data` (event, list of events, trace dict) with every query text as a pseudonym.

    Without a `pseudonym` (a store's), a random key of this process is used: the texts
    still cannot be guessed back, and within the process equal texts stay equal.
    """
    global _process_pseudonym
    if pseudonym is None:
        if _process_pseudonym is None:
            _process_pseudonym = ephemeral()
        pseudonym = _process_pseudonym
    redactor = _Redactor(pseudonym)
    return redactor.scrub(redactor.fields(data) if isinstance(data, dict) else redactor.text(data))


def stores_content(config: RowPolicy) -> bool:
    """Whether rows under `config` keep source content (captured answers, and the items of
    results served from the cache, `replay_captures`); a redacted row never does."""
    return config.capture_results and not config.redact


def counted_results(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`results` with each part's `items` (and its condition's) replaced by `item_count`:
    all a row keeps of them unless it captures source content. The server sends these to
    the writer process instead of the items; copies, as the caller's dicts are the
    response's. `_metadata_results` of them is the same as of `results`."""
    counted: list[dict[str, Any]] = []
    for result in results:
        result = result.copy()
        items = result.pop("items", None)
        result["item_count"] = len(items) if items else 0
        if "condition" in result and isinstance(result["condition"], dict):
            result["condition"] = counted_results([result["condition"]])[0]
        counted.append(result)
    return counted


def _metadata_results(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Part results without source content: item counts instead of items (an `item_count`
    already there, as `counted_results` leaves it, is kept when the items are gone)."""
    kept: list[dict[str, Any]] = []
    for result in results:
        entry = {k: v for k, v in result.items() if k not in ("items", "condition")}
        if "items" in result or "item_count" not in entry:
            entry["item_count"] = len(result.get("items") or [])
        if isinstance(result.get("condition"), dict):
            entry["condition"] = _metadata_results([result["condition"]])[0]
        kept.append(entry)
    return kept


def _flat_results(results: list[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for result in results:
        if isinstance(result.get("condition"), dict):
            yield result["condition"]
        yield result


def replay_captures(record: TraceRecord) -> list[dict[str, Any]]:
    """Everything a deterministic replay needs from the sources, in call order.

    The record's own captures are the real answers (ok / empty). Failures are taken from
    the recorded `source_invoked` events, and answers served from the result cache from
    the part result they produced, so a replay reproduces those steps too.
    """
    captures = record.captures_as_dicts()
    answered = {(c["source"], c["query"]) for c in captures}
    for event in record.chain:
        step = event.get("step")
        if step == Step.SOURCE_INVOKED and event.get("outcome") in ("error", "timeout"):
            captures.append(
                {
                    "source": event.get("source"),
                    "query": event.get("query"),
                    "error": {
                        "outcome": event.get("outcome"),
                        "reason": event.get("reason") or event.get("outcome"),
                        "message": event.get("message") or "",
                    },
                }
            )
        elif step == Step.RESULT_CACHE_HIT:
            key = (event.get("source"), event.get("query"))
            if key in answered:
                continue
            for result in _flat_results(record.results):
                if (result.get("source"), result.get("query")) == key and result.get(
                    "route"
                ) == key[0]:
                    captures.append(
                        {
                            "source": key[0],
                            "query": key[1],
                            "items": result.get("items", []),
                            "from_cache": True,
                        }
                    )
                    answered.add(key)
                    break
    return captures


def _tokens(values: set[Any]) -> str:
    """'|a|b|' for instr() filters: exact membership without LIKE wildcards."""
    unique = sorted(str(v) for v in values if v is not None and v != "")
    return "|" + "|".join(unique) + "|" if unique else ""


_SOURCE_KEYS = ("source", "decision", "from_source", "to_source", "route")
_OUTCOME_STEPS = frozenset({Step.SOURCE_INVOKED, Step.RESULT_CACHE_HIT, Step.SOURCE_SKIPPED})


def _event_outcome(event: dict[str, Any]) -> str | None:
    step = event.get("step")
    if step == Step.SOURCE_INVOKED:
        return str(event.get("outcome"))
    if step == Step.RESULT_CACHE_HIT:
        return "cached"
    if step == Step.SOURCE_SKIPPED:
        return "skipped"
    return None


_dumps = dumps_text


def trace_row(
    record: TraceRecord, config: RowPolicy, pseudonym: Pseudonymizer | None = None
) -> tuple[Any, ...]:
    """The row stored for `record` under `config`: the one place that decides what is kept.

    `pseudonym` (the store's key) is required when `config.redact` is on.
    """
    chain = record.chain
    results = record.results
    failed = record.status_code != 200 or any(
        r.get("status") == "error" for r in _flat_results(results)
    )
    # The filters match dropped events too: a truncated chain still fell back.
    counted = record.statistic_events() if record.dropped else chain
    # Comprehensions, not per-event calls: this runs for every request.
    step_set = {e.get("step") for e in counted}
    source_set = {e[k] for e in counted for k in _SOURCE_KEYS if k in e}
    if "fusion" in step_set:
        source_set.update(
            s for e in counted if e.get("step") == Step.FUSION for s in e.get("sources", ())
        )
    outcome_set = {_event_outcome(e) for e in counted if e.get("step") in _OUTCOME_STEPS}
    steps, sources, outcomes = _tokens(step_set), _tokens(source_set), _tokens(outcome_set)
    captures: list[dict[str, Any]] | None = None
    if stores_content(config):
        captures = replay_captures(record)
    query: str = record.query
    session_id = record.session_id
    error = record.error
    stored_results = _metadata_results(results)
    if config.redact:
        if pseudonym is None:
            raise ValueError("trace.redact needs the trace store's key")
        redactor = _Redactor(pseudonym)
        query = redactor.text(query)
        session_id = pseudonym(session_id) if session_id else None
        chain = redactor.fields({"chain": chain})["chain"]
        stored_results = redactor.fields({"r": stored_results})["r"]
        error = redactor.fields(error) if error else None
        chain, stored_results, error = redactor.scrub([chain, stored_results, error])
    return (
        record.trace_id,
        record.started_at,
        query,
        record.status_code,
        record.duration_ms,
        int(failed),
        int("|fallback|" in steps),
        int("|result_cache_hit|" in steps),
        int(record.dry_run),
        int(config.redact),
        int(captures is not None),
        record.replay_of,
        len(results),
        steps,
        sources,
        outcomes,
        record.dropped_events,
        _dumps(error) if error else None,
        _dumps(chain),
        _dumps(stored_results),
        _dumps(captures) if captures is not None else None,
        session_id,
    )


# A labelled trace is the user's evidence for a correction: retention never removes it.
LABEL_KEEP_DAYS = 365.0  # an unexported label keeps its trace this long at most
# A trace that retention leaves alone: one whose label is not exported and not too old.
_UNPROTECTED = (
    "trace_id NOT IN (SELECT trace_id FROM labels WHERE exported_at IS NULL AND created_at >= ?)"
)


def prune(conn: sqlite3.Connection, now: float, max_age_days: float, max_traces: int) -> None:
    """Retention: younger than `max_age_days`, and only the newest `max_traces` (by id), except
    traces whose label is still to be exported (and younger than LABEL_KEEP_DAYS)."""
    oldest = now - max_age_days * 86400.0
    kept_since = now - LABEL_KEEP_DAYS * 86400.0
    conn.execute(
        "DELETE FROM traces WHERE id < COALESCE("
        "(SELECT id FROM traces WHERE started_at >= ? ORDER BY id LIMIT 1), "
        f"(SELECT MAX(id) + 1 FROM traces)) AND {_UNPROTECTED}",
        (oldest, kept_since),
    )
    conn.execute(
        f"DELETE FROM traces WHERE id <= (SELECT MAX(id) FROM traces) - ? AND {_UNPROTECTED}",
        (max_traces, kept_since),
    )
