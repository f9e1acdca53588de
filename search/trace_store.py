"""The persistent trace store: every request's chain in one SQLite file, kept after the request.

Why this shape:
- One file (`trace.path`), WAL mode, so readers (`GET /traces`, `search trace`) never
  block the writer and a killed process loses at most the traces not yet committed.
- `submit()` only puts the record on a queue; one writer thread (started in `start()`)
  turns records into rows and commits them in batches. Nothing touches the disk on the
  event loop, and `aclose()` drains the queue before it returns.
- What is kept is decided here, at write time: metadata by default (items dropped),
  captured source answers only with `capture_results`, query texts as SHA-256 digests
  with `redact`. A record never reaches the file in any other form.
- The file is created 0600 before SQLite opens it; SQLite gives its -wal/-shm the same mode.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import re
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from routing.events import run_in_thread
from search.json_codec import dumps_text
from search.config import ConfigError, TraceConfig
from search.traces import NullTraceSink, TraceRecord, TraceSink

log = logging.getLogger("search.traces")

SCHEMA_VERSION = 1
DIGEST_PREFIX = "sha256:"
# Event fields (and nested keys) that hold query text, or text matched against it
# (keywords, exemplars, earlier queries, prompts); redaction replaces them by digests.
QUERY_FIELDS = frozenset(
    {
        "query", "parts", "condition", "consequence", "remainder", "matched_query", "matched",
        "previous_query", "nearest", "candidates", "candidate", "exemplar", "text", "prompt",
        "prompts", "messages", "content", "completion", "response", "raw", "raw_answer",
    }
)
# Free-text fields that may quote a query; redaction replaces any query inside them.
MESSAGE_FIELDS = frozenset({"message", "detail"})
OUTCOMES = ("ok", "empty", "error", "timeout", "cached", "skipped")
MAX_LIMIT = 1000
_SCHEMA = """
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
    captures TEXT
);
CREATE INDEX IF NOT EXISTS traces_replay_of ON traces(replay_of) WHERE replay_of IS NOT NULL;
"""
# No index on started_at: every index costs each insert, and rows arrive in time order,
# so "older than" is "before the first young row" in id order (see `_prune`), and a time
# filter scans at most `max_traces` rows.
_COLUMNS = (
    "trace_id", "started_at", "query", "status_code", "duration_ms", "failed", "fallback",
    "cached", "dry_run", "redacted", "captured", "replay_of", "part_count", "steps", "sources",
    "outcomes", "dropped_events", "error", "chain", "results", "captures",
)
_INSERT = (
    f"INSERT OR IGNORE INTO traces ({', '.join(_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _COLUMNS)})"
)
_SUMMARY = (
    "id, trace_id, started_at, query, status_code, duration_ms, failed, fallback, cached, "
    "dry_run, redacted, captured, replay_of, part_count, sources"
)


class TraceStoreError(ConfigError):
    """The store cannot be opened (bad `trace.path`, permissions): names the key."""


class FilterError(ValueError):
    """A bad filter value; `field` names the parameter (HTTP 422, CLI exit 2)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


# --- what is kept --------------------------------------------------------------------


def digest(text: str) -> str:
    return DIGEST_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_digest(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(DIGEST_PREFIX)


class _Redactor:
    """Replaces query texts by digests, and scrubs them out of free-text messages."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def text(self, value: Any) -> Any:
        if isinstance(value, str):
            if is_digest(value):
                return value
            if value.strip():
                self.seen.add(value)
            return digest(value)
        if isinstance(value, list):
            return [self.text(v) for v in value]
        if isinstance(value, dict):
            return self.fields(value)
        return value

    def fields(self, data: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key in QUERY_FIELDS:
                out[key] = self.text(value)
            elif isinstance(value, dict):
                out[key] = self.fields(value)
            elif isinstance(value, list):
                out[key] = [self.fields(v) if isinstance(v, dict) else v for v in value]
            else:
                out[key] = value
        return out

    def scrub(self, value: Any) -> Any:
        """Second pass: query texts quoted inside messages become their digests."""
        if isinstance(value, dict):
            return {
                k: self._scrub_text(v) if k in MESSAGE_FIELDS and isinstance(v, str)
                else self.scrub(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.scrub(v) for v in value]
        return value

    def _scrub_text(self, text: str) -> str:
        # Longest first, so a part quoted inside the whole query is not left half-replaced.
        for query in sorted(self.seen, key=len, reverse=True):
            if len(query) >= 3:
                text = re.sub(re.escape(query), digest(query), text, flags=re.IGNORECASE)
        return text


def redact(data: Any) -> Any:
    """`data` (event, list of events, trace dict) with every query text as a digest."""
    redactor = _Redactor()
    return redactor.scrub(redactor.fields(data) if isinstance(data, dict) else redactor.text(data))


def _metadata_results(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Part results without source content: item counts instead of items."""
    kept: list[dict[str, Any]] = []
    for result in results:
        entry = {k: v for k, v in result.items() if k not in ("items", "condition")}
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


def _captures_of(record: TraceRecord) -> list[dict[str, Any]]:
    """The record's captured answers as dicts (kept raw on the record until stored)."""
    as_dicts = getattr(record, "captures_as_dicts", None)
    if as_dicts is not None:
        return list(as_dicts())
    return [dict(c) for c in record.captures]  # type: ignore[call-overload]


def replay_captures(record: TraceRecord) -> list[dict[str, Any]]:
    """Everything a deterministic replay needs from the sources, in call order.

    The record's own captures are the real answers (ok / empty). Failures are taken from
    the recorded `source_invoked` events, and answers served from the result cache from
    the part result they produced, so a replay reproduces those steps too.
    """
    captures = _captures_of(record)
    answered = {(c["source"], c["query"]) for c in captures}
    for event in record.chain:
        step = event.get("step")
        if step == "source_invoked" and event.get("outcome") in ("error", "timeout"):
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
        elif step == "result_cache_hit":
            key = (event.get("source"), event.get("query"))
            if key in answered:
                continue
            for result in _flat_results(record.results):
                if (result.get("source"), result.get("query")) == key and result.get(
                    "route"
                ) == key[0]:
                    captures.append(
                        {"source": key[0], "query": key[1], "items": result.get("items", []),
                         "from_cache": True}
                    )
                    answered.add(key)
                    break
    return captures


def _tokens(values: set[Any]) -> str:
    """'|a|b|' for instr() filters: exact membership without LIKE wildcards."""
    unique = sorted(str(v) for v in values if v is not None and v != "")
    return "|" + "|".join(unique) + "|" if unique else ""


_SOURCE_KEYS = ("source", "decision", "from_source", "to_source", "route")
_OUTCOME_STEPS = frozenset({"source_invoked", "result_cache_hit", "source_skipped"})


def _event_outcome(event: dict[str, Any]) -> str | None:
    step = event.get("step")
    if step == "source_invoked":
        return str(event.get("outcome"))
    if step == "result_cache_hit":
        return "cached"
    if step == "source_skipped":
        return "skipped"
    return None


_dumps = dumps_text


def trace_row(record: TraceRecord, config: TraceConfig) -> tuple[Any, ...]:
    """The row stored for `record` under `config`: the one place that decides what is kept."""
    chain = record.chain
    results = record.results
    failed = record.status_code != 200 or any(
        r.get("status") == "error" for r in _flat_results(results)
    )
    # Comprehensions, not per-event calls: this runs for every request.
    step_set = {e.get("step") for e in chain}
    source_set = {e[k] for e in chain for k in _SOURCE_KEYS if k in e}
    if "fusion" in step_set:
        source_set.update(s for e in chain if e.get("step") == "fusion" for s in e["sources"])
    outcome_set = {_event_outcome(e) for e in chain if e.get("step") in _OUTCOME_STEPS}
    steps, sources, outcomes = _tokens(step_set), _tokens(source_set), _tokens(outcome_set)
    captures: list[dict[str, Any]] | None = None
    if config.capture_results and not config.redact:
        captures = replay_captures(record)
    query: str = record.query
    error = record.error
    stored_results = _metadata_results(results)
    if config.redact:
        redactor = _Redactor()
        query = redactor.text(query)
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
    )


# --- reading -------------------------------------------------------------------------

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(field: str, value: str, now: float | None = None) -> float:
    """Unix seconds from '1712345678', '2024-05-01T10:00:00Z', '2024-05-01' or '2h' ago."""
    text = value.strip()
    now = time.time() if now is None else now
    try:
        return float(text)
    except ValueError:
        pass
    relative = _RELATIVE.match(text.lower())
    if relative:
        return now - float(relative.group(1)) * _UNIT_S[relative.group(2)]
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise FilterError(
            field, f"{value!r} is not a time (unix seconds, ISO 8601, or an age like 2h, 7d)"
        ) from None
    return moment.timestamp()  # naive times are local, as a user typing them means


@dataclass(frozen=True, slots=True)
class TraceFilter:
    """Which traces to list; every set field must hold (AND)."""

    step: str | None = None
    source: str | None = None
    outcome: str | None = None
    failed: bool = False
    fallback: bool = False
    since: float | None = None
    until: float | None = None
    text: str | None = None
    originals_only: bool = False  # leave out replays
    limit: int = 50
    offset: int = 0
    cursor: int | None = None
    oldest_first: bool = False


_FILTER_PARAMS = {
    "step", "source", "outcome", "failed", "fallback", "since", "until", "q", "limit",
    "offset", "cursor",
}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _flag(field: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise FilterError(field, f"{value!r} is not a boolean (true/false)")


def _int(field: str, value: str, low: int, high: int | None = None) -> int:
    try:
        number = int(value)
    except ValueError:
        raise FilterError(field, f"{value!r} is not an integer") from None
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise FilterError(field, f"must be {bound}")
    return number


def parse_filters(params: Mapping[str, str], now: float | None = None) -> TraceFilter:
    """Filters from query-string style parameters; FilterError names the bad one."""
    for name in params:
        if name not in _FILTER_PARAMS:
            known = ", ".join(sorted(_FILTER_PARAMS))
            raise FilterError(name, f"unknown filter (known: {known})")
    step = params.get("step")
    if step is not None and not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", step):
        raise FilterError("step", f"{step!r} is not a step name")
    source = params.get("source")
    if source is not None and not (0 < len(source) <= 200 and "|" not in source):
        raise FilterError("source", "must be a source name")
    outcome = params.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise FilterError("outcome", f"{outcome!r} is not one of {', '.join(OUTCOMES)}")
    text = params.get("q")
    if text is not None and not text.strip():
        raise FilterError("q", "must not be empty")
    since = parse_when("since", params["since"], now) if "since" in params else None
    until = parse_when("until", params["until"], now) if "until" in params else None
    if since is not None and until is not None and since > until:
        raise FilterError("until", "is before since")
    cursor = params.get("cursor")
    return TraceFilter(
        step=step,
        source=source,
        outcome=outcome,
        failed=_flag("failed", params["failed"]) if "failed" in params else False,
        fallback=_flag("fallback", params["fallback"]) if "fallback" in params else False,
        since=since,
        until=until,
        text=text,
        limit=_int("limit", params["limit"], 1, MAX_LIMIT) if "limit" in params else 50,
        offset=_int("offset", params["offset"], 0) if "offset" in params else 0,
        cursor=_int("cursor", cursor, 1) if cursor is not None else None,
    )


def _where(f: TraceFilter) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (("steps", f.step), ("sources", f.source), ("outcomes", f.outcome)):
        if value is not None:
            clauses.append(f"instr({column}, ?) > 0")
            args.append(f"|{value}|")
    if f.failed:
        clauses.append("failed = 1")
    if f.fallback:
        clauses.append("fallback = 1")
    if f.since is not None:
        clauses.append("started_at >= ?")
        args.append(f.since)
    if f.until is not None:
        clauses.append("started_at <= ?")
        args.append(f.until)
    if f.text is not None:
        # Plain text matches unredacted queries; a redacted one matches its exact text.
        escaped = f.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        clauses.append("(query LIKE ? ESCAPE '\\' OR query = ?)")
        args.extend([f"%{escaped}%", digest(f.text)])
    if f.originals_only:
        clauses.append("replay_of IS NULL")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", args


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def _summary(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "trace_id": row["trace_id"],
        "started_at": row["started_at"],
        "time": _iso(row["started_at"]),
        "query": row["query"],
        "status_code": row["status_code"],
        "duration_ms": row["duration_ms"],
        "failed": bool(row["failed"]),
        "fallback": bool(row["fallback"]),
        "cached": bool(row["cached"]),
        "dry_run": bool(row["dry_run"]),
        "redacted": bool(row["redacted"]),
        "captured": bool(row["captured"]),
        "replay_of": row["replay_of"],
        "part_count": row["part_count"],
        "sources": [s for s in row["sources"].split("|") if s],
    }


def _detail(row: sqlite3.Row) -> dict[str, Any]:
    data = _summary(row)
    data.update(
        dropped_events=row["dropped_events"],
        error=json.loads(row["error"]) if row["error"] else None,
        chain=json.loads(row["chain"]),
        results=json.loads(row["results"]),
        captures=json.loads(row["captures"]) if row["captures"] else None,
    )
    return data


# --- the store -----------------------------------------------------------------------


def ensure_private_file(path: Path) -> None:
    """Create `path` with mode 0600 (before SQLite does it with the umask's mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _private_sidecars(path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        try:
            if stat.S_IMODE(side.stat().st_mode) & 0o077:
                side.chmod(0o600)
        except FileNotFoundError:
            pass


class TraceReader(Protocol):
    """What `GET /traces`, `search trace` and replay read through."""

    def list_traces(self, filters: TraceFilter) -> dict[str, Any]: ...

    def get_trace(self, trace_id: str) -> dict[str, Any] | None: ...

    async def flush(self) -> None: ...


WRITER_NICE = 10


def _lower_thread_priority(nice: int) -> None:
    """Make the calling thread a background one (Linux: per-thread nice), best effort.

    The writer's work is off the request path, but on a busy machine it competes with the
    event loop for cores; at a lower priority the scheduler runs requests first.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), nice))
    except (AttributeError, OSError):
        pass


@dataclass(slots=True)
class _Control:
    """A marker in the write queue: set `done` once everything before it is committed."""

    done: threading.Event
    stop: bool = False


class SQLiteTraceStore:
    """`TraceSink` + `TraceReader` over one SQLite file."""

    def __init__(
        self,
        config: TraceConfig,
        *,
        linger_s: float = 0.05,
        batch_max: int = 500,
        max_pending: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`linger_s` lets a burst share one commit; `max_pending` bounds memory if disk stalls."""
        self.config = config
        self.path = Path(os.path.abspath(os.path.expanduser(config.path)))
        self.linger_s = linger_s
        self.batch_max = batch_max
        self.max_pending = max_pending
        self.clock = clock
        self._queue: queue.SimpleQueue[TraceRecord | _Control] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._read_conn: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self.written = 0
        self.dropped = 0
        self.failed_writes = 0

    # -- opening

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None,
                               check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout = 10000")
        return conn

    def open_sync(self) -> None:
        """Create the file (0600), switch to WAL, create the schema, apply retention."""
        try:
            ensure_private_file(self.path)
            conn = self._connect()
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("PRAGMA secure_delete = FAST")
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise TraceStoreError(
                        f"trace.path: {self.path} was written by a newer version "
                        f"(schema {version})"
                    )
                conn.executescript(_SCHEMA)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self._prune(conn)
            finally:
                conn.close()
            _private_sidecars(self.path)
        except (OSError, sqlite3.Error) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise TraceStoreError(f"trace.path: cannot open {self.path}: {reason}") from None

    async def start(self) -> None:
        await run_in_thread(self._start_sync)

    def _start_sync(self) -> None:
        with self._open_lock:
            if self._thread is not None or self._closed:
                return
            self.open_sync()
            conn = self._connect()
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA secure_delete = FAST")
            self._thread = threading.Thread(
                target=self._writer, args=(conn,), name="trace-writer", daemon=True
            )
            self._thread.start()

    # -- writing

    def submit(self, trace: TraceRecord) -> None:
        """Queue `trace`; never blocks. Dropped (and counted) if the writer is far behind."""
        if self._closed:
            self.dropped += 1
            return
        if self._queue.qsize() >= self.max_pending:
            self.dropped += 1
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning("trace store is behind; %d traces dropped so far", self.dropped)
            return
        self._queue.put(trace)

    def _writer(self, conn: sqlite3.Connection) -> None:
        _lower_thread_priority(WRITER_NICE)
        try:
            while True:
                self._wake.clear()
                first = self._queue.get()
                if not isinstance(first, _Control) and self.linger_s > 0:
                    self._wake.wait(self.linger_s)  # a flush or close ends the wait early
                batch: list[TraceRecord | _Control] = [first]
                while len(batch) < self.batch_max:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                records = [b for b in batch if isinstance(b, TraceRecord)]
                if records:
                    self._write(conn, records)
                stop = False
                for control in batch:
                    if isinstance(control, _Control):
                        stop = stop or control.stop
                        control.done.set()
                if stop:
                    return
        finally:
            conn.close()

    def _write(self, conn: sqlite3.Connection, records: list[TraceRecord]) -> None:
        rows = []
        for index, record in enumerate(records, start=1):
            try:
                rows.append(trace_row(record, self.config))
            except Exception:  # one odd record must not stop the writer
                log.exception("trace store: dropping trace %s", record.trace_id)
                self.failed_writes += 1
            if index % 8 == 0:
                # Hand the GIL back now and then: serialising is pure Python, and without
                # this a big batch could hold the event loop off for a switch interval.
                time.sleep(0)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_INSERT, rows)
            self._prune(conn)
            conn.execute("COMMIT")
            self.written += len(rows)
        except sqlite3.Error:
            log.exception("trace store: writing %d traces failed", len(rows))
            self.failed_writes += len(rows)
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _prune(self, conn: sqlite3.Connection) -> None:
        """Retention: younger than `max_age_days`, and only the newest `max_traces`."""
        oldest = self.clock() - self.config.max_age_days * 86400.0
        conn.execute(
            "DELETE FROM traces WHERE id < COALESCE("
            "(SELECT id FROM traces WHERE started_at >= ? ORDER BY id LIMIT 1), "
            "(SELECT MAX(id) + 1 FROM traces))",
            (oldest,),
        )
        conn.execute(
            "DELETE FROM traces WHERE id <= (SELECT MAX(id) FROM traces) - ?",
            (self.config.max_traces,),
        )

    def _control(self, stop: bool = False) -> threading.Event | None:
        if self._thread is None or not self._thread.is_alive():
            return None
        done = threading.Event()
        self._queue.put(_Control(done, stop))
        self._wake.set()
        return done

    def flush_sync(self, timeout: float = 30.0) -> None:
        """Block until every trace submitted so far is committed."""
        done = self._control()
        if done is not None:
            done.wait(timeout)

    async def flush(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            await run_in_thread(self.flush_sync)

    async def aclose(self) -> None:
        """Commit everything submitted, stop the writer, close the files."""
        await run_in_thread(self.close_sync)

    def close_sync(self, timeout: float = 30.0) -> None:
        pending = not self._queue.empty()
        if self._thread is None and pending and not self._closed:
            try:
                self._start_sync()  # submitted but never started: still keep them
            except TraceStoreError:
                log.exception("trace store: %d traces could not be kept", self._queue.qsize())
        self._closed = True
        done = self._control(stop=True)
        if done is not None:
            done.wait(timeout)
        if self._thread is not None:
            self._thread.join(timeout)
        with self._read_lock:
            if self._read_conn is not None:
                self._read_conn.close()
                self._read_conn = None

    # -- reading (sync: call from a thread, or from the CLI)

    def _reader(self) -> sqlite3.Connection:
        if self._read_conn is None:
            if not self.path.exists():
                raise TraceStoreError(f"trace.path: no trace store at {self.path}")
            conn = self._connect()
            conn.execute("PRAGMA query_only = ON")
            self._read_conn = conn
        return self._read_conn

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._read_lock:
            return self._reader().execute(sql, tuple(args)).fetchall()

    def list_traces(self, filters: TraceFilter) -> dict[str, Any]:
        """One page, newest first (or oldest first), with a cursor for the next page."""
        where, args = _where(filters)
        total = self._query(f"SELECT COUNT(*) FROM traces{where}", args)[0][0]
        page_where, page_args = where, list(args)
        if filters.cursor is not None:
            op = ">" if filters.oldest_first else "<"
            page_where += (" AND " if page_where else " WHERE ") + f"id {op} ?"
            page_args.append(filters.cursor)
        order = "ASC" if filters.oldest_first else "DESC"
        rows = self._query(
            f"SELECT {_SUMMARY} FROM traces{page_where} ORDER BY id {order} LIMIT ? OFFSET ?",
            [*page_args, filters.limit + 1, filters.offset],
        )
        more = len(rows) > filters.limit
        rows = rows[: filters.limit]
        return {
            "traces": [_summary(r) for r in rows],
            "total": total,
            "limit": filters.limit,
            "offset": filters.offset,
            "next_cursor": str(rows[-1]["id"]) if more and rows else None,
        }

    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM traces WHERE trace_id = ?", (trace_id,))
        return _detail(rows[0]) if rows else None

    def resolve_id(self, prefix: str) -> str | None:
        """The full id for an id or a unique prefix of one (at least 6 characters)."""
        if self.get_trace(prefix) is not None:
            return prefix
        if len(prefix) < 6 or not re.fullmatch(r"[0-9a-f]+", prefix):
            return None
        rows = self._query(
            "SELECT trace_id FROM traces WHERE trace_id LIKE ? LIMIT 2", (prefix + "%",)
        )
        return rows[0][0] if len(rows) == 1 else None

    def count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM traces")[0][0])

    def stats(self) -> dict[str, Any]:
        return {"path": str(self.path), "written": self.written, "dropped": self.dropped,
                "failed_writes": self.failed_writes, "pending": self._queue.qsize()}


def open_trace_sink(config: TraceConfig) -> TraceSink:
    """The sink `trace:` asks for: the SQLite store, or nothing when switched off.

    No I/O happens here (the service is built on the event loop); the file is opened by
    `start()`, in a worker thread.
    """
    if not config.enabled:
        return NullTraceSink()
    return SQLiteTraceStore(config)

