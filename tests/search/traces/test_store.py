"""The SQLite trace store on real files: restart, SIGKILL, retention, redaction, permissions.

Requests go through the real `Service` over scripted sources (see tests/support/scripted.py),
so the stored chains are the ones the router really recorded.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from search.config import Config, TraceConfig, parse_config
from search.pseudonym import Pseudonymizer, key_path, read_key
from search.service import Service
from search.traces.records import NullTraceSink, TraceRecord
from search.traces.store import (
    FilterError,
    SQLiteTraceStore,
    TraceFilter,
    open_trace_sink,
    parse_filters,
    redact,
)

REPO = Path(__file__).resolve().parents[3]
KEYWORDS = {"ha": ["lights"], "web": ["news"], "broken": ["gizmo"]}


def home_config(
    db: Path,
    keywords: dict[str, list[str]] | None = None,
    sources: dict[str, dict[str, Any]] | None = None,
    **trace: Any,
) -> Config:
    """kiwix answers by default; ha refuses (falls back to web); broken always fails."""
    entries = sources or {
        "kiwix": {},
        "ha": {"fail": "unavailable", "fallback": ["web"]},
        "web": {"items": 3},
        "broken": {"fail": "error"},
    }
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "keywords": keywords or KEYWORDS,
                "semantic": {"enabled": False},
            },
            "sources": {name: {"type": "scripted", **e} for name, e in entries.items()},
            "trace": {"path": str(db), **trace},
        }
    )


async def record_queries(config: Config, queries: list[str]) -> list[Any]:
    """Run `queries` through a Service whose trace sink comes from config; close it."""
    service = Service(config)
    await service.start()
    try:
        return [await service.search(q) for q in queries]
    finally:
        await service.aclose()


def without_timings(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("t_ms", "elapsed_ms")} for e in chain]


def db_bytes(db: Path) -> bytes:
    """Every byte of the store: the file and any -wal / -shm / -journal beside it."""
    return b"".join(p.read_bytes() for p in sorted(db.parent.glob(db.name + "*")))


def make_record(
    trace_id: str, query: str = "q", started_at: float | None = None, **fields: Any
) -> TraceRecord:
    chain = fields.pop(
        "chain",
        [
            {
                "step": "intent_keyword",
                "seq": 0,
                "t_ms": 0.1,
                "part": "",
                "query": query,
                "decision": "kiwix",
                "discourse_escalated": False,
            },
            {
                "step": "source_invoked",
                "seq": 1,
                "t_ms": 0.5,
                "part": "",
                "query": query,
                "source": "kiwix",
                "elapsed_ms": 0.3,
                "outcome": "ok",
                "result_count": 1,
            },
        ],
    )
    when = time.time() if started_at is None else started_at
    return TraceRecord(
        trace_id=trace_id,
        started_at=when,
        query=query,
        status_code=200,
        duration_ms=1.0,
        chain=chain,
        **fields,
    )


def test_open_trace_sink_is_null_when_switched_off(tmp_path: Path) -> None:
    assert isinstance(
        open_trace_sink(TraceConfig(enabled=False, path=str(tmp_path / "x.db"))), NullTraceSink
    )
    assert isinstance(open_trace_sink(TraceConfig(path=str(tmp_path / "x.db"))), SQLiteTraceStore)
    assert not (tmp_path / "x.db").exists()  # nothing is opened before start()


async def test_store_survives_restart_with_chain_status_and_metadata_only(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    config = home_config(db)
    outcomes = await record_queries(
        config, ["lights status and also latest news", "history of rome", "gizmo"]
    )
    assert [o.status_code for o in outcomes] == [200, 200, 502]

    store = SQLiteTraceStore(config.trace)  # a fresh process would do exactly this
    await store.start()
    try:
        for outcome, query in zip(
            outcomes,
            ["lights status and also latest news", "history of rome", "gizmo"],
            strict=False,
        ):
            stored = store.get_trace(outcome.trace_id)
            assert stored is not None
            assert stored["query"] == query
            assert stored["status_code"] == outcome.status_code
            assert stored["chain"] == outcome.chain
            assert stored["captures"] is None  # capture_results is off by default
        failed = store.get_trace(outcomes[2].trace_id)
        assert failed is not None and failed["failed"]
        assert failed["error"]["type"] == "all_parts_failed"
        first = store.get_trace(outcomes[0].trace_id)
        assert first is not None and first["fallback"] and not first["failed"]
        assert [r["item_count"] for r in first["results"]] == [3, 3]
        assert all("items" not in r for r in first["results"])
    finally:
        await store.aclose()
    # Metadata only: no item text reached the file.
    assert b"text 0 about" not in db_bytes(db)


async def test_file_and_its_wal_and_shm_are_created_0600_whatever_the_umask(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "traces.db"
    old = os.umask(0)
    try:
        store = SQLiteTraceStore(TraceConfig(path=str(db)), linger_s=0)
        await store.start()
        store.submit(make_record("a" * 32))
        await store.flush()
        for name in ("traces.db", "traces.db-wal", "traces.db-shm"):
            mode = stat.S_IMODE((db.parent / name).stat().st_mode)
            assert mode == 0o600, f"{name} has mode {oct(mode)}"
        await store.aclose()
    finally:
        os.umask(old)


async def test_an_existing_world_readable_store_is_tightened(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    db.touch()
    db.chmod(0o644)
    store = SQLiteTraceStore(TraceConfig(path=str(db)))
    await store.start()
    await store.aclose()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


async def test_an_unopenable_path_is_an_error_naming_the_key(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = SQLiteTraceStore(TraceConfig(path=str(blocker / "traces.db")))
    with pytest.raises(Exception, match=r"trace\.path: cannot open"):
        await store.start()


_WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    sys.path.insert(0, {repo!r})
    from search.config import TraceConfig
    from search.traces.store import SQLiteTraceStore
    from search.traces.records import TraceRecord

    CHAIN = [{{"step": "intent_keyword", "seq": 0, "t_ms": 0.1, "part": "0", "query": "q",
              "decision": "kiwix", "discourse_escalated": False, "pad": "x" * 400}}]

    async def main():
        store = SQLiteTraceStore(TraceConfig(path={db!r}), linger_s=0)
        await store.start()
        n = 0
        while True:
            for _ in range(25):
                store.submit(TraceRecord(f"{{n:032x}}", time.time(), f"query {{n}}", 200, 1.0,
                                         CHAIN))
                n += 1
            await store.flush()
            print(n, flush=True)  # everything up to n is committed

    asyncio.run(main())
    """
)


def _writer_processes(parent: int) -> list[int]:
    """The pids of `parent`'s children running the trace writer (Linux /proc).

    Found while the parent lives: once it is killed they are re-parented elsewhere."""
    pids: list[int] = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            if b"search.traces.writer" in cmdline:
                pids.append(int(child))
    return pids


def test_sigkill_while_writing_leaves_a_readable_store_losing_only_in_flight(
    tmp_path: Path,
) -> None:
    db = tmp_path / "traces.db"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER.format(repo=str(REPO), db=str(db)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    confirmed = 0
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while confirmed < 2000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            confirmed = int(line)
        assert confirmed >= 2000, "the writer did not get going"
        writers = [os.pidfd_open(pid) for pid in _writer_processes(proc.pid)]
        assert len(writers) == 1, "the store's writer process was not found"
        time.sleep(0.05)  # let it be in the middle of further batches
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    # The writer process outlives its killed parent: it reads what is left in the pipe,
    # commits it and exits. Reading the store before it has exited races its last commits.
    for handle in writers:
        try:
            ready, _, _ = select.select([handle], [], [], 60)
            assert ready, "the writer process did not exit after its parent was killed"
        finally:
            os.close(handle)

    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = [int(r[0], 16) for r in conn.execute("SELECT trace_id FROM traces ORDER BY id")]
    finally:
        conn.close()
    # Every trace confirmed committed before the kill is there, in order, with no holes:
    # only traces still in flight at the kill may be missing.
    assert len(ids) >= confirmed
    assert ids == list(range(len(ids)))
    store = SQLiteTraceStore(TraceConfig(path=str(db)))
    page = store.list_traces(TraceFilter(limit=5))
    assert page["total"] == len(ids)
    assert store.get_trace(page["traces"][0]["trace_id"]) is not None
    store.close_sync()


async def test_retention_by_count_holds_under_10000_requests(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    config = home_config(db, max_traces=300)
    store = SQLiteTraceStore(config.trace)
    service = Service(config, traces=store)
    await service.start()
    seen_counts: list[int] = []
    ids: list[str] = []
    try:
        for n in range(10_000):
            outcome = await service.search(f"lights status {n}" if n % 3 else f"history {n}")
            ids.append(outcome.trace_id)
            if n % 1000 == 999:
                await store.flush()
                seen_counts.append(await asyncio.to_thread(store.count))
    finally:
        await service.aclose()
    assert all(c <= 300 for c in seen_counts), seen_counts
    reopened = SQLiteTraceStore(config.trace)
    kept = reopened.list_traces(TraceFilter(limit=1000))
    assert kept["total"] == 300
    assert {t["trace_id"] for t in kept["traces"]} == set(ids[-300:])  # the newest are kept
    reopened.close_sync()


async def test_retention_by_age_at_write_and_at_start(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    now = [1_000_000_000.0]
    config = TraceConfig(path=str(db), max_age_days=1)
    store = SQLiteTraceStore(config, linger_s=0, clock=lambda: now[0])
    await store.start()
    day = 86400.0
    store.submit(make_record("old" + "0" * 29, started_at=now[0] - 2 * day))
    store.submit(make_record("new" + "0" * 29, started_at=now[0] - 0.5 * day))
    await store.aclose()
    reader = SQLiteTraceStore(config)
    assert [t["trace_id"][:3] for t in reader.list_traces(TraceFilter())["traces"]] == ["new"]
    reader.close_sync()
    now[0] += day  # a day later the remaining one is too old: pruned when the store opens
    later = SQLiteTraceStore(config, clock=lambda: now[0])
    await later.start()
    assert later.count() == 0
    await later.aclose()


QUERY = "if it rains in zanzibar tomorrow, are the lights on? and also latest news about quokkas"
SECRET_WORDS = ["zanzibar", "quokkas", "rains in", "are the lights on"]


async def test_redaction_leaves_no_query_text_anywhere_in_the_file_bytes(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    config = home_config(db, redact=True, capture_results=True)
    store = SQLiteTraceStore(config.trace, linger_s=0)
    service = Service(config, traces=store)
    await service.start()
    outcome = await service.search(QUERY)
    assert outcome.status_code == 200
    parts = next(e for e in outcome.chain if e["step"] == "decomposed")["parts"]
    # A hand-made record with the fields a semantic/LLM stage and an error message carry.
    store.submit(
        make_record(
            "f" * 32,
            query="zanzibar quokkas please",
            session_id="quokkas-phone",
            chain=[
                {
                    "step": "intent_semantic",
                    "seq": 0,
                    "t_ms": 1.0,
                    "part": "0",
                    "query": "zanzibar quokkas please",
                    "matched_query": "quokkas near zanzibar",
                    "similarity": 0.91,
                    "decision": "web",
                    "candidates": [{"text": "zanzibar ferry", "route": "web", "similarity": 0.5}],
                },
                {
                    "step": "error",
                    "seq": 1,
                    "t_ms": 2.0,
                    "part": "0",
                    "query": "zanzibar quokkas please",
                    "error_type": "ValueError",
                    "message": "bad input: 'ZANZIBAR QUOKKAS PLEASE'",
                },
            ],
            error={"type": "ValueError", "message": "could not answer zanzibar quokkas please"},
        )
    )
    await service.aclose()

    data = db_bytes(db).lower()
    for text in [
        QUERY,
        *parts,
        *SECRET_WORDS,
        "zanzibar quokkas please",
        "quokkas near zanzibar",
        "zanzibar ferry",
    ]:
        assert text.lower().encode() not in data, f"{text!r} leaked into the store"

    reader = SQLiteTraceStore(config.trace)
    stored = reader.get_trace(outcome.trace_id)
    assert stored is not None and stored["redacted"] and stored["captures"] is None
    key = read_key(key_path(db))
    assert key is not None
    digest = Pseudonymizer(key)
    assert stored["query"] == digest(QUERY)
    # Structure, sources and reasons stay readable.
    steps = [e["step"] for e in stored["chain"]]
    assert steps == [e["step"] for e in outcome.chain]
    fallback = next(e for e in stored["chain"] if e["step"] == "fallback")
    assert (fallback["from_source"], fallback["to_source"], fallback["reason"]) == (
        "ha",
        "web",
        "connection_refused",
    )
    decomposed = next(e for e in stored["chain"] if e["step"] == "decomposed")
    assert decomposed["parts"] == [digest(p) for p in parts]
    # The exact text still finds its trace (by digest); a fragment does not.
    assert reader.list_traces(parse_filters({"q": QUERY}))["total"] == 1
    assert reader.list_traces(parse_filters({"q": "zanzibar"}))["total"] == 0
    assert reader.list_traces(parse_filters({"source": "ha", "step": "fallback"}))["total"] == 1
    reader.close_sync()


def test_redact_digests_query_fields_and_scrubs_messages() -> None:
    event = {
        "step": "conditional_detected",
        "query": "if Foo then bar",
        "condition": "Foo",
        "consequence": "bar",
        "remainder": "",
        "message": "failed on if foo then bar",
        "seq": 3,
        "reason": "timeout",
    }
    digest = Pseudonymizer(b"k" * 32)
    out = redact(event, digest)
    assert out["query"] == digest("if Foo then bar") and out["condition"] == digest("Foo")
    assert out["message"] == f"failed on {digest('if Foo then bar')}"
    assert (out["seq"], out["reason"], out["step"]) == (3, "timeout", "conditional_detected")


async def test_submit_never_blocks_even_when_the_file_is_locked(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    store = SQLiteTraceStore(TraceConfig(path=str(db)), linger_s=0)
    await store.start()
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        records = [make_record(f"{n:032x}") for n in range(2000)]
        started = time.perf_counter()  # submitting alone is timed: it must not wait
        for record in records:
            store.submit(record)
        assert time.perf_counter() - started < 0.5
        await asyncio.sleep(0.2)
        assert store.written == 0  # the writer is stuck on the lock, the loop is not
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await store.aclose()  # flushes everything that was queued
    assert SQLiteTraceStore(TraceConfig(path=str(db))).count() == 2000


async def test_traces_beyond_max_pending_are_dropped_and_counted(tmp_path: Path) -> None:
    store = SQLiteTraceStore(TraceConfig(path=str(tmp_path / "t.db")), max_pending=10)
    for n in range(25):  # not started: nothing drains the queue
        store.submit(make_record(f"{n:032x}"))
    assert store.dropped == 15
    await store.aclose()  # close still writes what was queued
    assert SQLiteTraceStore(TraceConfig(path=str(tmp_path / "t.db"))).count() == 10


async def test_a_running_stores_full_queue_drops_and_counts_and_submit_only_enqueues(
    tmp_path: Path,
) -> None:
    """The request's part is an encoding and a bounded append: a record that cannot be
    encoded does not fail `submit` (it is lost there, counted, and takes no place in the
    queue); past `max_pending` a record is dropped."""
    db = tmp_path / "t.db"
    store = SQLiteTraceStore(TraceConfig(path=str(db)), linger_s=60.0, max_pending=8)
    await store.start()
    loop: list[Any] = []
    loop.append(loop)  # a circular value: no JSON encoding of it exists
    unencodable = [{"step": "worker", "seq": 0, "t_ms": 0.1, "part": "", "value": loop}]
    store.submit(make_record("f" * 32, chain=unencodable))  # encoding raises
    assert store.failed_writes == 1 and store.stats()["pending"] == 0
    for n in range(10):
        store.submit(make_record(f"{n:032x}"))
    assert store.stats()["pending"] == 8  # nothing drained yet
    assert store.dropped == 2
    await store.flush()
    assert store.failed_writes == 1 and store.written == 8
    assert store.stats()["pending"] == 0
    store.submit(make_record("e" * 32))  # room again once drained
    await store.aclose()
    assert store.dropped == 2
    assert SQLiteTraceStore(TraceConfig(path=str(db))).count() == 9


async def test_concurrent_readers_see_a_consistent_store_while_writing(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    store = SQLiteTraceStore(TraceConfig(path=str(db)), linger_s=0)
    await store.start()
    errors: list[BaseException] = []
    done = threading.Event()

    def read_loop() -> None:
        reader = SQLiteTraceStore(TraceConfig(path=str(db)))
        try:
            while not done.is_set():
                page = reader.list_traces(TraceFilter(limit=10))
                for t in page["traces"]:
                    assert reader.get_trace(t["trace_id"]) is not None
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            reader.close_sync()

    thread = threading.Thread(target=read_loop)
    thread.start()
    for n in range(3000):
        store.submit(make_record(f"{n:032x}"))
        if n % 500 == 0:
            await asyncio.sleep(0.01)
    await store.aclose()
    done.set()
    thread.join(10)
    assert not errors


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"outcome": "great"}, "outcome"),
        ({"limit": "0"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"since": "last tuesday"}, "since"),
        ({"since": "2h", "until": "3h"}, "until"),
        ({"failed": "maybe"}, "failed"),
        ({"step": "Drop Table"}, "step"),
        ({"cursor": "abc"}, "cursor"),
        ({"cursor": "5", "offset": "0"}, "cursor"),  # both: the offset would skip rows
        ({"color": "red"}, "color"),
    ],
)
def test_bad_filters_name_the_parameter(params: dict[str, str], field: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filters(params)
    assert info.value.field == field


def test_time_filters_accept_unix_iso_and_ages() -> None:
    now = 1_700_000_000.0
    f = parse_filters({"since": "2h", "until": "2023-11-14T22:13:20+00:00"}, now=now)
    assert f.since == now - 7200 and f.until == now
    assert parse_filters({"since": "1699999999.5"}).since == 1699999999.5


def test_redact_covers_keywords_prompts_and_candidates_but_keeps_routes() -> None:
    event = {
        "step": "intent_semantic",
        "query": "dim the hallway",
        "decision": "ha",
        "matched": True,
        "similarity": 0.9,
        "candidates": [{"source": "ha", "matched": "dim the bedroom", "score": 0.9}],
        "prompt": [{"role": "user", "content": "route: dim the hallway"}],
    }
    digest = Pseudonymizer(b"k" * 32)
    out = redact(event, digest)
    assert out["candidates"] == [
        {"source": "ha", "matched": digest("dim the bedroom"), "score": 0.9}
    ]
    assert out["prompt"] == [{"role": "user", "content": digest("route: dim the hallway")}]
    assert (out["decision"], out["matched"]) == ("ha", True)
    keyword = redact({"step": "intent_keyword", "query": "hallway", "matched": ["hallway"]}, digest)
    assert keyword["matched"] == [digest("hallway")]


async def test_a_writer_process_that_dies_is_replaced_and_the_batch_resent(tmp_path: Path) -> None:
    """The rows are written by a child process (`search.traces.writer`); killing it loses
    nothing that was flushed, and the next batch goes to a fresh one."""
    db = tmp_path / "traces.db"
    store = SQLiteTraceStore(TraceConfig(path=str(db)), linger_s=0)
    await store.start()
    for n in range(20):
        store.submit(make_record(f"{n:032x}"))
    await store.flush()
    first = store._process
    assert first is not None and first.proc.pid != os.getpid()
    first.proc.kill()
    first.proc.wait()
    for n in range(20, 50):
        store.submit(make_record(f"{n:032x}"))
    await store.flush()
    assert store._process is not None and store._process.proc.pid != first.proc.pid
    assert store.written == 50 and store.failed_writes == 0
    await store.aclose()
    reader = SQLiteTraceStore(TraceConfig(path=str(db)))
    assert reader.count() == 50
    reader.close_sync()


async def test_a_store_written_by_the_previous_schema_is_upgraded_in_place(tmp_path: Path) -> None:
    from search.traces.rows import SCHEMA

    db = tmp_path / "traces.db"
    old_schema = SCHEMA.replace(",\n    session_id TEXT", "").split(
        "CREATE INDEX IF NOT EXISTS traces_session"
    )[0]
    conn = sqlite3.connect(db)
    conn.executescript(old_schema)
    conn.execute(
        "INSERT INTO traces (trace_id, started_at, query, status_code, duration_ms, failed, "
        "fallback, cached, dry_run, redacted, captured, part_count, steps, sources, outcomes, "
        "dropped_events, chain, results) VALUES ('a', ?, 'old', 200, 1, 0, 0, 0, 0, 0, 0, 1, "
        "'', '', '', 0, '[]', '[]')",
        (time.time(),),
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()

    store = SQLiteTraceStore(TraceConfig(path=str(db)), linger_s=0)
    await store.start()
    store.submit(make_record("b" * 32, session_id="kitchen"))
    await store.aclose()
    reader = SQLiteTraceStore(TraceConfig(path=str(db)))
    try:
        by_id = {t["trace_id"]: t for t in reader.list_traces(TraceFilter())["traces"]}
        assert by_id["a"]["session_id"] is None and by_id["a"]["query"] == "old"
        assert by_id["b" * 32]["session_id"] == "kitchen"
    finally:
        reader.close_sync()


def test_the_writer_process_skips_unreadable_lines_without_flooding_its_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A line the writer process cannot read (a half-written one after a crash, another
    version's) is counted and skipped; the traces around it are still committed."""
    import io
    import json

    from search.traces.writer import WriterSettings, record_line, serve

    db = tmp_path / "traces.db"
    SQLiteTraceStore(TraceConfig(path=str(db))).open_sync()
    good = [record_line(make_record(f"{n:032x}"), False) for n in range(3)]
    data = good[0] + b"not json\n" * 50 + good[1] + b'["trace", "short"]\n' + good[2]
    data += b'["flush", 1]\n'
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    answers = io.StringIO()
    settings = WriterSettings(path=str(db), max_traces=100, max_age_days=30)
    with caplog.at_level("ERROR", logger="search.traces.records"):
        serve(settings, read_end, answers, linger_s=0)
    os.close(read_end)
    assert json.loads(answers.getvalue().splitlines()[0]) == ["flushed", 1, 3, 51]
    assert len([r for r in caplog.records if "unreadable" in r.getMessage()]) == 3
    assert SQLiteTraceStore(TraceConfig(path=str(db))).count() == 3


async def test_traces_submitted_from_worker_threads_are_all_kept(tmp_path: Path) -> None:
    """Writing runs on the event loop; a trace submitted from another thread joins the
    next burst, including while a burst is being written."""
    db = tmp_path / "traces.db"
    store = SQLiteTraceStore(TraceConfig(path=str(db)), linger_s=0.001)
    await store.start()

    def submit_many(offset: int) -> None:
        for n in range(offset, offset + 200):
            store.submit(make_record(f"{n:032x}"))
            if n % 50 == 0:
                time.sleep(0.002)  # let the loop drain in between

    await asyncio.gather(
        *(asyncio.to_thread(submit_many, k * 1000) for k in range(3)), asyncio.sleep(0.05)
    )
    await store.flush()
    assert store.written == 600 and store.failed_writes == 0
    await store.aclose()


class _Kept:
    """An observer keeping every finished request's record, as the service submitted it."""

    def __init__(self) -> None:
        self.traces: list[TraceRecord] = []

    def observe(self, trace: TraceRecord) -> None:
        self.traces.append(trace)


@pytest.mark.parametrize(
    "mode",
    [{}, {"redact": True}, {"capture_results": True}, {"redact": True, "capture_results": True}],
    ids=["metadata", "redact", "capture_results", "redact_and_capture"],
)
async def test_the_stored_row_is_the_row_of_the_whole_record(
    tmp_path: Path, mode: dict[str, bool]
) -> None:
    """Unless a row keeps source content, the server sends each result's item count, not
    its items; the stored row is still, column for column, the one built in this process
    from the whole record (items, a condition's items, captures and all)."""
    from search.traces.rows import COLUMNS, trace_row

    db = tmp_path / "traces.db"
    config = home_config(db, **mode)
    kept = _Kept()
    service = Service(config, traces=SQLiteTraceStore(config.trace, linger_s=0), observers=[kept])
    await service.start()
    # The second answers from the result cache: with capture_results, its captures are
    # rebuilt from the results' items.
    outcomes = [await service.search(QUERY) for _ in range(2)]
    await service.aclose()
    assert [o.status_code for o in outcomes] == [200, 200]
    results = outcomes[1].body["results"]
    assert any(r.get("condition", {}).get("items") for r in results)
    assert all(r["items"] for r in results)  # the response keeps its items

    key = read_key(key_path(db))
    assert key is not None
    conn = sqlite3.connect(db)
    try:
        for trace in kept.traces:
            row = conn.execute(
                f"SELECT {', '.join(COLUMNS)} FROM traces WHERE trace_id = ?", (trace.trace_id,)
            ).fetchone()
            assert row == trace_row(trace, config.trace, Pseudonymizer(key))
    finally:
        conn.close()
    stored = SQLiteTraceStore(config.trace).get_trace(outcomes[1].trace_id)
    assert stored is not None
    assert all(r["item_count"] == 3 for r in stored["results"])
    if mode == {"capture_results": True}:
        assert any(c.get("from_cache") and c["items"] for c in stored["captures"])


def test_counted_results_keep_what_a_metadata_row_keeps() -> None:
    from search.traces.rows import _metadata_results, counted_results

    item = {"title": "t", "text": "x", "url": "http://x"}
    results: list[dict[str, Any]] = [
        {"query": "a", "source": "web", "status": "ok", "items": [item, item], "route": "web"},
        {"query": "b", "source": None, "status": "error", "route": None, "error": {"t": "x"}},
        {
            "query": "c",
            "source": "ha",
            "status": "ok",
            "items": [item],
            "route": "ha",
            "stage": "intent_keyword",
            "condition": {"query": "d", "source": "kiwix", "status": "ok", "items": [item]},
        },
    ]
    counted = counted_results(results)
    assert _metadata_results(counted) == _metadata_results(results)
    assert [r["item_count"] for r in counted] == [2, 0, 1]
    assert counted[2]["condition"]["item_count"] == 1
    assert "items" not in counted[0] and "items" not in counted[2]["condition"]
    assert results[0]["items"] == [item, item]  # the caller's dicts are left alone
    # Byte for byte, key order included.
    assert [list(r) for r in _metadata_results(counted)] == [
        list(r) for r in _metadata_results(results)
    ]


async def test_ctrl_c_to_the_writer_process_loses_nothing(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: the writer child keeps going until its
    parent closes its input, so what was handed over is stored."""
    db = tmp_path / "traces.db"
    store = SQLiteTraceStore(TraceConfig(path=str(db)), linger_s=0)
    await store.start()
    store.submit(make_record(f"{0:032x}"))
    await store.flush()
    writer = store._process
    assert writer is not None
    os.kill(writer.proc.pid, signal.SIGINT)
    for n in range(1, 30):
        store.submit(make_record(f"{n:032x}"))
    await store.flush()
    assert store._process is writer and writer.proc.poll() is None  # not replaced: alive
    await store.aclose()
    assert writer.proc.returncode == 0
    reader = SQLiteTraceStore(TraceConfig(path=str(db)))
    assert reader.count() == 30
    reader.close_sync()
