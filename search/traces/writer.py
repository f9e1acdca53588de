"""The trace writer process: turns submitted traces into rows and commits them.

Why a process: turning a trace into a row (JSON, redaction, index tokens) and binding it
into SQLite is Python work, and a thread doing it in the server holds the GIL the event
loop needs; under load that slowed every request. Here the server only encodes each
finished trace as one JSON line on this process's stdin; this process, at a lower
priority, does the rest on another core.

Protocol, one JSON array per line on stdin:
- `["trace", trace_id, started_at, query, status_code, duration_ms, chain, dropped_events,
  error, results, dry_run, replay_of, captures, session_id, dropped]`: a finished
  request (`dropped`: [step, fields, count] per kind of event past the chain's bound), its
  chain either `["raw", started, entries]` (as `routing.chain.events` recorded it) or
  `["events", [event, ...]]`; unless the rows keep source content, its results carry an
  `item_count` instead of their items, and its captures are empty;
- `["now", unix_seconds]`: the server's clock, for retention by age;
- `["flush", n]`: answered on stdout by `["flushed", n, written, failed]` once every trace
  before it is committed (totals since start).
End of input (the server closed the pipe, or died): commit what arrived, exit.

    python -m search.traces.writer '{"path": ..., "max_traces": ..., "max_age_days": ...,
                                    "redact": false, "capture_results": false}'
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from routing.chain.events import RecordedChain
from search.json_codec import dumps
from search.pseudonym import Pseudonymizer, read_key
from search.traces.records import TraceRecord
from search.traces.rows import INSERT, counted_results, prune, trace_row

log = logging.getLogger("search.traces")

WRITER_NICE = 10
LINGER_S = 0.05  # let a burst share one commit
READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class WriterSettings:
    path: str
    max_traces: int
    max_age_days: float
    redact: bool = False
    capture_results: bool = False
    key_path: str = ""  # the store's pseudonymisation key (search.pseudonym), for redact


def _plain(value: Any) -> Any:
    """What orjson cannot write itself: a recorded entry (a named tuple) as its list, any
    other value as its text."""
    return list(value) if isinstance(value, tuple) else str(value)


def record_line(record: TraceRecord, with_content: bool) -> bytes:
    """The line the server sends for `record`.

    `with_content`: the rows keep source content (`rows.stores_content`), so the captures
    and the results' items go along. Otherwise neither does: each result's items go as
    their `item_count` (`rows.counted_results`), all a metadata row keeps of them.
    The chain goes as the request recorded it (`["raw", started, entries]`) when it came
    straight from one: the event dicts are built here, in this process, not in the server.
    """
    if with_content:
        captures = record.captures_as_dicts()
        results = record.results
    else:
        captures = []
        results = counted_results(record.results)
    recorded = record.recorded
    chain: list[Any] = (
        ["raw", recorded.started, recorded.entries]
        if recorded is not None
        else ["events", record.chain]
    )
    message = [
        "trace",
        record.trace_id,
        record.started_at,
        record.query,
        record.status_code,
        record.duration_ms,
        chain,
        record.dropped_events,
        record.error,
        results,
        record.dry_run,
        record.replay_of,
        captures,
        record.session_id,
        record.dropped,
    ]
    try:
        return orjson.dumps(message, default=_plain, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # an integer beyond 64 bits, a non-string key: the slow way
        return dumps(message) + b"\n"


def _record(fields: list[Any]) -> TraceRecord:
    (
        trace_id,
        started_at,
        query,
        status_code,
        duration_ms,
        chain,
        dropped,
        error,
        results,
        dry_run,
        replay_of,
        captures,
        session_id,
        past_bound,
    ) = fields
    events = RecordedChain.from_rows(chain[2], chain[1]) if chain[0] == "raw" else chain[1]
    return TraceRecord(
        trace_id,
        started_at,
        query,
        status_code,
        duration_ms,
        events,
        dropped,
        error,
        results,
        dry_run,
        replay_of,
        captures,
        session_id,
        [(step, fields, count) for step, fields, count in past_bound],
    )


class Writer:
    """Rows into one SQLite connection, a batch per transaction."""

    def __init__(self, settings: WriterSettings) -> None:
        self.settings = settings
        self.conn = sqlite3.connect(settings.path, timeout=10.0, isolation_level=None)
        self.conn.execute("PRAGMA busy_timeout = 10000")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute("PRAGMA secure_delete = FAST")
        self.pseudonym: Pseudonymizer | None = None
        if settings.redact:
            key = read_key(Path(settings.key_path)) if settings.key_path else None
            if key is None:  # every row would fail: say why once, loudly
                log.error(
                    "trace writer: no key at %r; redacted traces cannot be written",
                    settings.key_path,
                )
            else:
                self.pseudonym = Pseudonymizer(key)
        self.now: float | None = None
        self.written = 0
        self.failed = 0

    def write(self, lines: list[bytes]) -> list[int]:
        """Commit the traces among `lines`; the flush numbers to answer, in order."""
        rows: list[tuple[Any, ...]] = []
        flushes: list[int] = []
        for line in lines:
            try:
                message = orjson.loads(line)
                kind = message[0]
                if kind == "trace":
                    rows.append(trace_row(_record(message[1:]), self.settings, self.pseudonym))
                elif kind == "now":
                    self.now = float(message[1])
                elif kind == "flush":
                    flushes.append(int(message[1]))
            except Exception:  # one odd line must not stop the writer
                self.failed += 1
                if self.failed <= 3 or self.failed % 1000 == 0:  # a systematic fault: no flood
                    log.exception(
                        "trace writer: dropping an unreadable trace (%d so far)", self.failed
                    )
        if rows or self.now is not None:
            self._commit(rows)
        return flushes

    def _commit(self, rows: list[tuple[Any, ...]]) -> None:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany(INSERT, rows)
            if self.now is not None:
                prune(self.conn, self.now, self.settings.max_age_days, self.settings.max_traces)
            self.conn.execute("COMMIT")
            self.written += len(rows)
        except sqlite3.Error:
            log.exception("trace writer: writing %d traces failed", len(rows))
            self.failed += len(rows)
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def close(self) -> None:
        self.conn.close()


def _lines(buffer: bytearray) -> list[bytes]:
    """The complete lines at the front of `buffer`, removed from it."""
    end = buffer.rfind(b"\n")
    if end < 0:
        return []
    complete = bytes(buffer[: end + 1])
    del buffer[: end + 1]
    return complete.splitlines()


def serve(settings: WriterSettings, stdin: int, stdout: Any, linger_s: float = LINGER_S) -> None:
    """Read lines until end of input, committing a batch per burst."""
    writer = Writer(settings)
    buffer = bytearray()
    try:
        while True:
            chunk = os.read(stdin, READ_CHUNK)
            if not chunk:
                break
            buffer += chunk
            # Gather the rest of a burst (a flush ends the wait: someone is waiting on it).
            while len(buffer) < READ_CHUNK and b'["flush"' not in chunk:
                ready, _, _ = select.select([stdin], [], [], linger_s)
                if not ready:
                    break
                chunk = os.read(stdin, READ_CHUNK)
                if not chunk:
                    break
                buffer += chunk
            for number in writer.write(_lines(buffer)):
                stdout.write(json.dumps(["flushed", number, writer.written, writer.failed]) + "\n")
                stdout.flush()
            if not chunk:
                break
        if buffer.strip():
            writer.write([bytes(line) for line in buffer.splitlines()])
    finally:
        writer.close()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if len(argv) != 2:
        print("usage: python -m search.traces.writer SETTINGS_JSON", file=sys.stderr)
        return 2
    settings = WriterSettings(**json.loads(argv[1]))
    try:
        os.nice(WRITER_NICE)  # a whole process: no GIL to hold up the server's requests
    except OSError:
        pass
    # Ctrl-C reaches the whole process group, this child too; its parent decides when it
    # ends (by closing its input, after which it commits what it has), so the traces the
    # parent already handed over are stored rather than lost with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(settings, sys.stdin.fileno(), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
