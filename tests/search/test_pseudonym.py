"""`trace.redact`: query texts and session ids stored as keyed pseudonyms, on real files.

A phrase list hashed with plain SHA-256 must find nothing in the file; the key is a 0600
file beside the database, created once (atomically, even when several processes open a
new store at once) and reused; stores written before schema 3 have their unkeyed digests
keyed on opening, and the exact text still finds their traces.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import stat
import threading
from pathlib import Path

from search.pseudonym import Pseudonymizer, key_path, legacy_digest, load_or_create_key, read_key
from search.service import Service
from search.traces.store import SCHEMA_VERSION, SQLiteTraceStore, parse_filters, redact
from tests.search.traces.test_store import home_config

PHRASES = ["unlock the front door", "turn on the kitchen light", "is anyone home"]
SESSION = "kitchen-tablet"
LEGACY = re.compile(rb"(?<![a-z-])sha256:[0-9a-f]{64}")


async def record(db: Path, queries: list[str], **trace: object) -> list[str]:
    config = home_config(db, **trace)
    store = SQLiteTraceStore(config.trace, linger_s=0)
    service = Service(config, traces=store)
    await service.start()
    ids = [(await service.search(q, session_id=SESSION)).trace_id for q in queries]
    await service.aclose()
    return ids


def file_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*") if p.suffix != ".key")


async def test_a_phrase_list_hashed_without_the_key_finds_nothing(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    await record(db, PHRASES, redact=True)
    data = file_bytes(db)
    for phrase in [*PHRASES, SESSION]:
        assert phrase.encode() not in data
        assert hashlib.sha256(phrase.encode()).hexdigest().encode() not in data
    assert LEGACY.search(data) is None
    key = key_path(db)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}\n", key.read_text())
    reader = SQLiteTraceStore(home_config(db).trace)
    try:
        # The exact text and the exact session id still find their traces.
        assert reader.list_traces(parse_filters({"q": PHRASES[0]}))["total"] == 1
        assert reader.list_traces(parse_filters({"session": SESSION}))["total"] == 3
        page = reader.list_traces(parse_filters({}))
        pseudonym = Pseudonymizer(read_key(key) or b"")
        assert {t["query"] for t in page["traces"]} == {pseudonym(p) for p in PHRASES}
        assert {t["session_id"] for t in page["traces"]} == {pseudonym(SESSION)}
    finally:
        reader.close_sync()


async def test_the_key_is_reused_and_each_store_has_its_own(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "traces.db", tmp_path / "b" / "traces.db"
    await record(first, PHRASES[:1], redact=True)
    key_before = key_path(first).read_text()
    await record(first, PHRASES[:1], redact=True)  # reopened: the same key, the same pseudonym
    assert key_path(first).read_text() == key_before
    await record(second, PHRASES[:1], redact=True)

    def queries(db: Path) -> set[str]:
        reader = SQLiteTraceStore(home_config(db).trace)
        try:
            return {t["query"] for t in reader.list_traces(parse_filters({}))["traces"]}
        finally:
            reader.close_sync()

    assert len(queries(first)) == 1  # both traces of the phrase share one pseudonym
    assert queries(first).isdisjoint(queries(second))


def test_processes_creating_a_key_at_once_agree_on_one(tmp_path: Path) -> None:
    path = tmp_path / "traces.db.key"
    barrier = threading.Barrier(8)
    keys: list[bytes] = []

    def create() -> None:
        barrier.wait()
        keys.append(load_or_create_key(path))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(keys)) == 1 and len(keys[0]) == 32
    assert [p.name for p in tmp_path.iterdir()] == ["traces.db.key"]  # no temporary left


async def test_the_writer_process_is_given_the_key_path_never_the_key(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    store = SQLiteTraceStore(home_config(db, redact=True).trace)
    await store.start()
    try:
        assert store._process is not None
        # The argv handed to exec (what /proc/PID/cmdline shows once the child has
        # exec'd; read from /proc straight after the fork it can still be the parent's).
        argv = " ".join(map(str, store._process.proc.args))
        key = key_path(db).read_text().strip()
        assert key not in argv and str(key_path(db)) in argv
    finally:
        await store.aclose()


async def test_an_older_store_has_its_unkeyed_digests_keyed_on_opening(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    (trace_id,) = await record(db, [PHRASES[0] + " and latest news"])
    # Make it what a schema-2 store with `redact` wrote: plain SHA-256 digests, no key.
    conn = sqlite3.connect(db, isolation_level=None)
    query, chain = conn.execute("SELECT query, chain FROM traces").fetchone()
    old_chain = redact({"chain": json.loads(chain)}, legacy_digest)["chain"]  # type: ignore[arg-type]
    conn.execute(
        "UPDATE traces SET query = ?, chain = ?, session_id = ?, redacted = 1",
        (legacy_digest(query), json.dumps(old_chain), legacy_digest(SESSION)),
    )
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    key_path(db).unlink()
    assert LEGACY.search(file_bytes(db))

    store = SQLiteTraceStore(home_config(db, redact=True).trace)
    store.open_sync()
    try:
        data = file_bytes(db)
        assert LEGACY.search(data) is None, "an unkeyed digest survived the upgrade"
        assert hashlib.sha256(query.encode()).hexdigest().encode() not in data
        assert store.list_traces(parse_filters({"q": query}))["total"] == 1
        assert store.list_traces(parse_filters({"session": SESSION}))["total"] == 1
        stored = store.get_trace(trace_id)
        assert stored is not None
        parts = next(e for e in stored["chain"] if e["step"] == "decomposed")["parts"]
        assert all(p.startswith("hmac-sha256:") for p in parts)
    finally:
        store.close_sync()
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
