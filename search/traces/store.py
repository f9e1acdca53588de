"""The persistent trace store: every request's chain in one SQLite file, kept after the request.

Why this shape:
- One file (`trace.path`), WAL mode, so readers (`GET /traces`, `search trace`) never
  block the writer and a killed process loses at most the traces not yet committed.
- `submit()` encodes the record as one JSON line and queues it; the event loop writes
  queued lines in batches, without blocking, to a writer process's stdin
  (`search.traces.writer`), which turns them into rows and commits them. Row building and
  SQLite work never hold this process's GIL, so they don't slow the event loop;
  `aclose()` drains the queue and waits for the commit.
  A writer process that dies is replaced and the batch resent.
- What is kept is decided at write time (`search.traces.rows`): metadata by default (items dropped),
  captured source answers only with `capture_results`, query texts as keyed pseudonyms
  (HMAC-SHA256 under the store's own key, `search.pseudonym`) with `redact`. A record
  never reaches the file in any other form.
- The file is created 0600 before SQLite opens it; SQLite gives its -wal/-shm the same mode.
  The key file beside it (`<path>.key`) is created 0600 with the store.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import math
import os
import re
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from routing.chain.events import run_in_thread
from search.config import ConfigError, TraceConfig
from search.correction.labels import (
    Label,
    check_label,
    insert_label,
    mark_exported,
    read_labels,
    upgrade_labels_5,
)
from search.pseudonym import Pseudonymizer, key_path, legacy_digest, load_or_create_key, read_key
from search.query_text import has_visible_text
from search.trace_ids import is_trace_id_prefix
from search.traces.records import NullTraceSink, TraceRecord, TraceSink
from search.traces.rows import (  # noqa: F401 - redact: re-exported for its callers
    MIGRATIONS,
    OUTCOMES,
    SCHEMA,
    SCHEMA_VERSION,
    prune,
    redact,
    rekey_legacy_digests,
    stores_content,
)
from search.traces.writer import record_line

log = logging.getLogger("search.traces")

MAX_LIMIT = 1000
# The longest `q`: SQLite refuses a LIKE pattern over 50,000 bytes, and a text of this
# many characters stays under it escaped (an escaped character is two ASCII bytes, any
# other at most four). No one looks a trace up by a longer text.
MAX_TEXT_FILTER = 10_000
_SUMMARY = (
    "id, trace_id, started_at, query, status_code, duration_ms, failed, fallback, cached, "
    "dry_run, redacted, captured, replay_of, part_count, sources, session_id, "
    # each part's route and status, read from the stored results by SQLite itself: an
    # unserved or withheld request shows what became of it in a list of traces
    "(SELECT json_group_array(json_object('route', json_extract(value, '$.route'), "
    "'status', json_extract(value, '$.status'))) FROM json_each(traces.results)) AS parts"
)


class TraceStoreError(ConfigError):
    """The store cannot be opened (bad `trace.path`, permissions): names the key."""


class TraceIdError(ValueError):
    """An id that names no one trace for a reason other than absence: not an id at all,
    too short a prefix to look up, or one shared by several traces (CLI exit 2)."""


# `resolve_id` takes a prefix of this many hex digits or more.
MIN_ID_PREFIX = 6


class FilterError(ValueError):
    """A bad filter value; `field` names the parameter (HTTP 422, CLI exit 2)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.problem = message  # without the field's name, for a surface that names it its way


# --- reading -------------------------------------------------------------------------

_RELATIVE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([smhdw])$")
_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
# SQLite integers are 64-bit: a larger offset or cursor cannot be bound (OverflowError).
SQLITE_MAX_INT = 2**63 - 1
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(field: str, value: str, now: float | None = None) -> float:
    """Unix seconds from '1712345678', '2024-05-01T10:00:00Z', '2024-05-01' or '2h' ago."""
    text = value.strip()
    now = time.time() if now is None else now
    seconds: float | None = None
    if _NUMBER.fullmatch(text):
        seconds = float(text)
    elif relative := _RELATIVE.match(text.lower()):
        seconds = now - float(relative.group(1)) * _UNIT_S[relative.group(2)]
    else:
        try:
            # naive times are local, as a user typing them means
            seconds = datetime.fromisoformat(text).timestamp()
        except (ValueError, OverflowError, OSError):
            seconds = None
    # nan compares false with every time, inf with none: neither filters anything.
    if seconds is None or not math.isfinite(seconds):
        raise FilterError(
            field, f"{value!r} is not a time (unix seconds, ISO 8601, or an age like 2h, 7d)"
        )
    return seconds


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
    session: str | None = None  # one conversation's turns
    originals_only: bool = False  # leave out replays
    limit: int = 50
    offset: int = 0
    cursor: int | None = None
    oldest_first: bool = False


_FILTER_PARAMS = {
    "step",
    "source",
    "outcome",
    "failed",
    "fallback",
    "since",
    "until",
    "q",
    "session",
    "replays",
    "limit",
    "offset",
    "cursor",
}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _flag(field: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise FilterError(field, f"{value!r} is not a boolean (true/false)")


def _int(field: str, value: str, low: int, high: int = SQLITE_MAX_INT) -> int:
    text = value.strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,30}", text):
        raise FilterError(field, f"{_shown(value)} is not an integer")
    number = int(text)
    if not low <= number <= high:
        raise FilterError(field, f"must be between {low} and {high}")
    return number


def _shown(value: str, limit: int = 40) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")


def parse_filters(params: Mapping[str, str], now: float | None = None) -> TraceFilter:
    """Filters from query-string style parameters; FilterError names the bad one."""
    for name, value in params.items():
        if name not in _FILTER_PARAMS:
            known = ", ".join(sorted(_FILTER_PARAMS))
            raise FilterError(name, f"unknown filter (known: {known})")
        # SQLite's LIKE stops at a NUL, so 'q=%00' matched every trace; no stored text
        # is looked up by a control character.
        bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
        if bad is not None:
            raise FilterError(name, f"contains a control character (U+{ord(bad):04X})")
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
    if text is not None and not has_visible_text(text):
        raise FilterError("q", "must not be empty (it has no visible character)")
    if text is not None and len(text) > MAX_TEXT_FILTER:
        raise FilterError("q", f"must be at most {MAX_TEXT_FILTER:,} characters")
    session = params.get("session")
    if session is not None and not 0 < len(session) <= 200:
        raise FilterError("session", "must be a session id (1 to 200 characters)")
    since = parse_when("since", params["since"], now) if "since" in params else None
    until = parse_when("until", params["until"], now) if "until" in params else None
    if since is not None and until is not None and since > until:
        raise FilterError("until", "is before since")
    cursor = params.get("cursor")
    # Both would apply at once, the offset counted from the cursor: every page after the
    # first would skip `offset` rows without saying so.
    if cursor is not None and "offset" in params:
        raise FilterError(
            "cursor", "cannot be combined with offset (give offset or cursor, not both)"
        )
    return TraceFilter(
        step=step,
        source=source,
        outcome=outcome,
        failed=_flag("failed", params["failed"]) if "failed" in params else False,
        fallback=_flag("fallback", params["fallback"]) if "fallback" in params else False,
        since=since,
        until=until,
        text=text,
        session=session,
        # replays are marked (`replay_of`) and listed only when asked for: real traffic first
        originals_only=not (_flag("replays", params["replays"]) if "replays" in params else False),
        limit=_int("limit", params["limit"], 1, MAX_LIMIT) if "limit" in params else 50,
        offset=_int("offset", params["offset"], 0) if "offset" in params else 0,
        cursor=_int("cursor", cursor, 1) if cursor is not None else None,
    )


def _pseudonyms(text: str, pseudonym: Pseudonymizer | None) -> list[str]:
    """What `text` is stored as in a redacted row: its pseudonym under the store's key, that
    of its old unkeyed digest (rows from before schema 3), or that digest (not upgraded)."""
    old = legacy_digest(text)
    return [old] if pseudonym is None else [pseudonym(text), pseudonym(old), old]


def _where(f: TraceFilter, pseudonym: Pseudonymizer | None = None) -> tuple[str, list[Any]]:
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
        keyed = _pseudonyms(f.text, pseudonym)
        clauses.append(f"(query LIKE ? ESCAPE '\\' OR query IN ({', '.join('?' * len(keyed))}))")
        args.extend([f"%{escaped}%", *keyed])
    if f.session is not None:
        # A redacted trace keeps the session id's pseudonym: the exact id still finds it.
        keyed = [f.session, *_pseudonyms(f.session, pseudonym)]
        clauses.append(f"session_id IN ({', '.join('?' * len(keyed))})")
        args.extend(keyed)
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
        "session_id": row["session_id"],
        "part_count": row["part_count"],
        "sources": [s for s in row["sources"].split("|") if s],
        "parts": _parts(row),
    }


def _parts(row: sqlite3.Row) -> list[dict[str, Any]]:
    """The summary's `parts` column, or (a whole row, as `get_trace` reads it) the same
    read off its results."""
    if "parts" in row.keys():  # noqa: SIM118 - `in` on a Row looks at its values
        return json.loads(row["parts"]) if row["parts"] else []
    return [
        {"route": r.get("route"), "status": r.get("status")} for r in json.loads(row["results"])
    ]


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


PIPE_BYTES = 1 << 20
MAX_REPLACEMENTS = 10  # writer processes started after the first, before giving up


class _WriterProcess:
    """The `search.traces.writer` child: lines in on its stdin, flush answers on its stdout."""

    def __init__(self, settings: dict[str, Any]) -> None:
        root = str(Path(__file__).resolve().parents[1])
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "search.traces.writer", json.dumps(settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.fd = self.proc.stdin.fileno()
        os.set_blocking(self.fd, False)  # written from the event loop, never waited on
        self._widen_pipe()

    def _widen_pipe(self) -> None:
        """Room for a whole burst in the pipe (Linux): fewer, larger writes."""
        if not hasattr(fcntl, "F_SETPIPE_SZ"):
            return
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # over /proc/sys/fs/pipe-max-size: the default size still works

    def read_ack(self, number: int) -> tuple[int, int]:
        """Block (in a worker thread) until the child answers flush `number`; its
        (written, failed) totals."""
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise BrokenPipeError("the trace writer process exited")
            answer = json.loads(line)
            if answer[:2] == ["flushed", number]:
                return int(answer[2]), int(answer[3])

    def cpu_seconds(self) -> float | None:
        """User + system CPU time the child has used so far (Linux), for the benchmarks."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def close(self, timeout: float) -> None:
        """End of input: the child commits what it has and exits (blocks: use a thread)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.error("trace store: the writer process did not finish in %.0fs; killed", timeout)
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class SQLiteTraceStore:
    """`TraceSink` + `TraceReader` over one SQLite file.

    Writing: `submit()`, on the request's path, encodes the record as its JSON line and
    appends the line to a bounded queue (past `max_pending` it is dropped and counted).
    Encoding at once lets the request's objects go with the request: a queue of records
    kept alive for the linger cost each request more CPU than the encoding does (their
    memory is not reused while still warm). After `linger_s` the event loop writes the
    burst's lines to the writer process's pipe in one non-blocking write
    (`search.traces.writer` turns them into rows and commits them). No thread of this
    process takes part, so row building, SQLite and waiting never compete with requests
    for the GIL. Writing needs the loop `start()` ran on; reading works from any thread.
    """

    def __init__(
        self,
        config: TraceConfig,
        *,
        linger_s: float = 0.05,
        max_pending: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`linger_s` lets a burst share one commit; `max_pending` bounds memory if disk stalls."""
        self.config = config
        self._with_content = stores_content(config)  # what `record_line` sends
        self.path = Path(os.path.abspath(os.path.expanduser(config.path)))
        self.linger_s = linger_s
        self.max_pending = max_pending
        self.clock = clock
        self._pending: list[bytes] = []  # encoded traces not yet handed to the pipe
        self._outbuf = bytearray()  # handed over, not yet taken by the pipe
        self._in_flight = 0  # traces in `_outbuf`
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._drain_handle: asyncio.TimerHandle | None = None
        self._watching = False
        self._written_waiters: list[asyncio.Future[None]] = []
        self._flush_lock = asyncio.Lock()
        self._flushes = 0
        self._process: _WriterProcess | None = None
        self._started = False
        self._closed = False
        self._replacements = 0
        self._read_conn: sqlite3.Connection | None = None
        self.key_path = key_path(self.path)
        self._pseudonym: Pseudonymizer | None = None
        self._read_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self.dropped = 0
        self._lost = 0  # traces that never reached a writer process
        # Totals of writer processes that were replaced, and the current one's last report.
        self._done_before = (0, 0)
        self._reported = (0, 0)

    # -- opening

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=10.0, isolation_level=None, check_same_thread=False
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout = 10000")
        return conn

    def open_sync(self) -> None:
        """Create the file (0600) and its key, switch to WAL, create or upgrade the schema,
        apply retention."""
        try:
            ensure_private_file(self.path)
            self._pseudonym = Pseudonymizer(load_or_create_key(self.key_path))
            conn = self._connect()
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("PRAGMA secure_delete = FAST")
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise TraceStoreError(
                        f"trace.path: {self.path} was written by a newer version (schema {version})"
                    )
                for target in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                    if version:  # an older file: bring it up to date
                        step = MIGRATIONS[target]
                        if isinstance(step, str):
                            conn.executescript(step)
                        else:
                            step(conn)
                conn.executescript(SCHEMA)
                upgrade_labels_5(conn)  # the newest labels table, whatever the version
                if 0 < version < 3:
                    rekey_legacy_digests(conn, self._pseudonym)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                prune(conn, self.clock(), self.config.max_age_days, self.config.max_traces)
            finally:
                conn.close()
            _private_sidecars(self.path)
        except (OSError, sqlite3.Error) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise TraceStoreError(f"trace.path: cannot open {self.path}: {reason}") from None

    async def start(self) -> None:
        """Open the file and start the writer process; writing happens on this loop."""
        await run_in_thread(self._start_sync)
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self._pending:
            self._schedule_drain()

    def _start_sync(self) -> None:
        with self._open_lock:
            if self._started or self._closed:
                return
            self.open_sync()
            self._process = _WriterProcess(self._settings())
            self._started = True

    def _settings(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "max_traces": self.config.max_traces,
            "max_age_days": self.config.max_age_days,
            "redact": self.config.redact,
            "capture_results": self.config.capture_results,
            "key_path": str(self.key_path),
        }  # the path, never the key: argv is public

    # -- writing: on the event loop, with no thread of our own (a thread waiting for the
    # GIL while requests run makes every request pay for waking it)

    def submit(self, trace: TraceRecord) -> None:
        """Queue `trace` as its line for the writer process; never blocks.

        Encoding here costs a microsecond or two; the lines go to the pipe in one write
        per burst (`linger_s`). Dropped (and counted) if the writer is far behind.
        """
        if self._closed:
            self.dropped += 1
            return
        if len(self._pending) + self._in_flight >= self.max_pending:
            self.dropped += 1
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning("trace store is behind; %d traces dropped so far", self.dropped)
            return
        try:  # inline, no method call: this runs for every request
            line = record_line(trace, self._with_content)
        except Exception:  # one odd record must not fail the request: lost, and counted
            log.exception("trace store: dropping trace %s", trace.trace_id)
            self._lost += 1
            return
        self._pending.append(line)
        if self._drain_handle is None and self._loop is not None:
            if threading.get_ident() == self._loop_thread:
                self._schedule_drain()
            else:
                self._loop.call_soon_threadsafe(self._schedule_drain)

    def _schedule_drain(self) -> None:
        if self._drain_handle is None and self._loop is not None and not self._closed:
            self._drain_handle = self._loop.call_later(self.linger_s, self._drain)

    def _drain(self) -> None:
        """Pending lines (after the clock, for retention by age) into the pipe."""
        self._drain_handle = None
        if not self._pending or self._process is None:
            return
        # Swap the list first: a line submitted from another thread meanwhile lands in
        # one list or the other, never in neither.
        lines, self._pending = self._pending, []
        self._in_flight += len(lines)
        self._send(f'["now",{self.clock()!r}]\n'.encode() + b"".join(lines))

    def _send(self, data: bytes) -> None:
        """`data` into the pipe now if it takes it (the usual case: one write, no copy),
        else after what is already waiting."""
        process = self._process
        if not self._outbuf and process is not None:
            try:
                written = os.write(process.fd, data)
            except (BlockingIOError, OSError):
                written = 0  # a dead writer process is dealt with in `_write_some`
            data = data[written:]
            if not data:
                self._write_some()  # settles the waiters
                return
        self._outbuf += data
        self._write_some()

    def _write_some(self) -> None:
        """As much of the buffer as the pipe takes now; the loop calls back for the rest."""
        process = self._process
        if process is None:
            return
        while self._outbuf:
            try:
                written = os.write(process.fd, self._outbuf)
            except BlockingIOError:
                break
            except OSError:  # the writer process died: a fresh one gets the rest
                log.warning("trace store: the writer process ended; starting a new one")
                self._replace_process()
                process = self._process
                if process is None:
                    return
                continue
            del self._outbuf[:written]
        if self._loop is None:
            return
        if self._outbuf:
            if not self._watching:
                self._loop.add_writer(process.fd, self._write_some)
                self._watching = True
            return
        if self._watching:
            self._loop.remove_writer(process.fd)
            self._watching = False
        self._in_flight = 0
        for waiter in self._written_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._written_waiters.clear()

    def _replace_process(self) -> None:
        """Forget a dead writer process (keeping its reported totals); start another."""
        old = self._process
        if old is not None:
            if self._watching and self._loop is not None:
                self._loop.remove_writer(old.fd)
                self._watching = False
            try:
                old.proc.kill()
                old.proc.poll()  # reap it if it is gone already
            except OSError:
                pass
        self._done_before = (
            self._done_before[0] + self._reported[0],
            self._done_before[1] + self._reported[1],
        )
        self._reported = (0, 0)
        self._process = None
        if self._replacements >= MAX_REPLACEMENTS:
            log.error(
                "trace store: the writer process keeps dying; %d traces lost",
                self._in_flight + len(self._pending),
            )
            self._lost += self._in_flight + len(self._pending)
            self._in_flight = 0
            self._pending.clear()
            self._outbuf.clear()
            return
        self._replacements += 1
        try:
            self._process = _WriterProcess(self._settings())
        except OSError:
            log.exception("trace store: cannot start the writer process")

    async def _all_written(self) -> None:
        if not self._outbuf or self._loop is None:
            return
        waiter = self._loop.create_future()
        self._written_waiters.append(waiter)
        await waiter

    async def flush(self) -> None:
        """Wait until every trace submitted so far is committed."""
        if not self._started or self._loop is None:
            return
        async with self._flush_lock:
            if self._drain_handle is not None:
                self._drain_handle.cancel()
            self._drain()
            if self._process is None:
                return
            self._flushes += 1
            number = self._flushes
            self._send(f'["flush",{number}]\n'.encode())
            await self._all_written()
            process = self._process
            if process is None:
                return
            try:
                self._reported = await run_in_thread(process.read_ack, number)
            except (OSError, ValueError):
                log.warning("trace store: the writer process ended before a flush")
                self._replace_process()

    async def aclose(self) -> None:
        """Commit everything submitted, stop the writer process, close the files."""
        if self._closed:
            await run_in_thread(self.close_sync)
            return
        if not self._started and self._pending:
            try:
                await self.start()  # submitted but never started: still keep them
            except TraceStoreError:
                log.exception("trace store: %d traces could not be kept", len(self._pending))
        await self.flush()
        self._closed = True
        if self._drain_handle is not None:
            self._drain_handle.cancel()
            self._drain_handle = None
        process, self._process = self._process, None
        if process is not None:
            if self._watching and self._loop is not None:
                self._loop.remove_writer(process.fd)
                self._watching = False
            await run_in_thread(process.close, 30.0)
        await run_in_thread(self.close_sync)

    def close_sync(self, timeout: float = 30.0) -> None:
        """Close the reading side (a store only read from, as the CLI does)."""
        self._closed = True
        with self._read_lock:
            if self._read_conn is not None:
                self._read_conn.close()
                self._read_conn = None

    @property
    def written(self) -> int:
        """Traces committed, as the writer process last reported (at a flush)."""
        return self._done_before[0] + self._reported[0]

    @property
    def failed_writes(self) -> int:
        return self._lost + self._done_before[1] + self._reported[1]

    def writer_cpu_seconds(self) -> float | None:
        """CPU time the writer process has used (Linux), or None when not running."""
        process = self._process
        return None if process is None else process.cpu_seconds()

    # -- reading (sync: call from a thread, or from the CLI)

    def _reader(self) -> sqlite3.Connection:
        if self._read_conn is None:
            if not self.path.exists():
                raise TraceStoreError(f"trace.path: no trace store at {self.path}")
            conn = self._connect()
            conn.execute("PRAGMA query_only = ON")
            self._read_conn = conn
        return self._read_conn

    def _reading_pseudonym(self) -> Pseudonymizer | None:
        """The store's key, for lookups by exact text (a reader that never opened the store
        for writing reads it from the key file; a store without one has no keyed rows)."""
        if self._pseudonym is None:
            key = read_key(self.key_path)
            if key is not None:
                self._pseudonym = Pseudonymizer(key)
        return self._pseudonym

    @contextmanager
    def _naming_the_path(self) -> Iterator[None]:
        """A file SQLite cannot open or read (a read-only directory, where the -shm of WAL
        mode cannot be made; a file that is no database) is the config's `trace.path`
        problem, said as `open_sync` says it: every command exits 2 naming it."""
        try:
            yield
        except sqlite3.Error as exc:
            raise TraceStoreError(f"trace.path: cannot open {self.path}: {exc}") from None

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._read_lock, self._naming_the_path():
            return self._reader().execute(sql, tuple(args)).fetchall()

    def list_traces(self, filters: TraceFilter) -> dict[str, Any]:
        """One page, newest first (or oldest first), with a cursor for the next page."""
        where, args = _where(filters, self._reading_pseudonym())
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
        """The stored trace, with the labels stored beside it (oldest first)."""
        with self._read_lock, self._naming_the_path():
            reader = self._reader()
            rows = reader.execute("SELECT * FROM traces WHERE trace_id = ?", (trace_id,)).fetchall()
            if not rows:
                return None
            labels = read_labels(reader, trace_id)
        trace = _detail(rows[0])
        trace["labels"] = [label.to_dict() for label in labels]
        return trace

    def labels(self) -> list[Label]:
        """Every stored label, in the order stored."""
        with self._read_lock, self._naming_the_path():
            return read_labels(self._reader())

    def add_label(self, trace_id: str, part: Any, route: Any, routes: Iterable[str]) -> Label:
        """Store a label on a part of a stored trace (LabelError names a bad field).

        Written on a connection of its own (labels are rare; the writer process keeps the
        traces); the part's query goes in as the trace has it, so a redacted store gets
        the pseudonym, never the text.
        """
        trace = self.get_trace(trace_id)
        if trace is None:
            raise KeyError(trace_id)
        target = check_label(trace, part, route, routes)
        with self._naming_the_path():
            conn = self._connect()
            try:
                return insert_label(
                    conn,
                    trace_id,
                    target,
                    str(route),
                    bool(trace["redacted"]),
                    max_labels=self.config.max_labels,
                )
            finally:
                conn.close()

    def mark_exported(self, ids: Iterable[int]) -> None:
        """The labels `search label --export` wrote out (their traces may then leave)."""
        with self._naming_the_path():
            conn = self._connect()
            try:
                mark_exported(conn, ids)
            finally:
                conn.close()

    def resolve_id(self, prefix: str) -> str | None:
        """The full id for an id or a unique prefix of one; None when no trace has it.

        Raises TraceIdError for text that is no id this router makes (32 lowercase hex
        digits), a prefix shorter than MIN_ID_PREFIX or one several traces start with, so a
        caller can say which instead of "no such trace".
        """
        if not is_trace_id_prefix(prefix):
            raise TraceIdError(
                f"trace {prefix!r}: not a trace id (32 lowercase hex digits, or the first"
                f" {MIN_ID_PREFIX} or more of them)"
            )
        if self.get_trace(prefix) is not None:
            return prefix
        if len(prefix) == 32:
            return None
        if len(prefix) < MIN_ID_PREFIX:
            raise TraceIdError(
                f"trace {prefix}: a trace id prefix needs at least {MIN_ID_PREFIX} characters"
            )
        rows = self._query(
            "SELECT trace_id FROM traces WHERE trace_id LIKE ? LIMIT 2", (prefix + "%",)
        )
        if len(rows) > 1:
            raise TraceIdError(
                f"trace {prefix}: the prefix matches several traces; give more of the id"
            )
        return rows[0][0] if rows else None

    def count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM traces")[0][0])

    def stats(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "written": self.written,
            "dropped": self.dropped,
            "failed_writes": self.failed_writes,
            "pending": len(self._pending) + self._in_flight,
        }


def open_trace_sink(config: TraceConfig) -> TraceSink:
    """The sink `trace:` asks for: the SQLite store, or nothing when switched off.

    No I/O happens here (the service is built on the event loop); the file is opened by
    `start()`, in a worker thread.
    """
    if not config.enabled:
        return NullTraceSink()
    return SQLiteTraceStore(config)
