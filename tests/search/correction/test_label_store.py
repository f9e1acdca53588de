"""Labels in the real SQLite store under the writes that broke them: parallel writers of one
part, one part relabelled past the bound, and rows a damaged store holds.

Each writer opens its own connection, as `SQLiteTraceStore.add_label` does (autocommit,
`isolation_level=None`), and threads run the writes at once against one file.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from search.api.app import create_app
from search.correction.label_cli import export_entries
from search.correction.labels import (
    LABELS_SCHEMA,
    PartDecision,
    effective_labels,
    insert_label,
    read_labels,
    upgrade_labels_5,
)
from search.service import Service
from search.traces.store import SQLiteTraceStore
from tests.search.traces.test_store import home_config, record_queries
from tests.support.app import asgi_client

ROUTES = ["kiwix", "ha", "web", "broken"]


async def _traces(
    db: Path, queries: list[str], **trace: object
) -> tuple[SQLiteTraceStore, list[str]]:
    config = home_config(db, **trace)
    outcomes = await record_queries(config, queries)
    return SQLiteTraceStore(config.trace), [str(o.trace_id) for o in outcomes]


def _at_once(writers: int, write: object) -> list[BaseException]:
    """Run `write(n)` in `writers` threads released together; the exceptions they raised."""
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        barrier.wait()
        try:
            write(n)  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


async def test_parallel_labels_of_one_part_leave_one_row_counting_every_earlier_one(
    tmp_path: Path,
) -> None:
    """8 writers label one part at once, 30 rounds: each round one row stays (the write
    that came last), and its `replaced` counts every label of the part before it."""
    store, (trace_id,) = await _traces(tmp_path / "traces.db", ["lights status"])
    routes = ["kiwix", "ha", "web", "none"] * 2
    try:
        for round_ in range(30):
            errors = _at_once(
                len(routes), lambda n: store.add_label(trace_id, "0", routes[n], ROUTES)
            )
            assert errors == []
            labels = store.labels()
            assert len(labels) == 1, f"round {round_}: {len(labels)} rows for the part"
            assert labels[0].replaced == len(routes) * (round_ + 1) - 1
    finally:
        store.close_sync()


async def test_parallel_posts_of_labels_for_one_part_all_201_and_one_row_stays(
    tmp_path: Path,
) -> None:
    """The reviewer's case over HTTP: 8 POST /traces/{id}/labels at once for one part."""
    config = home_config(tmp_path / "traces.db")
    routes = ["kiwix", "ha", "web", "none"] * 2
    async with asgi_client(create_app(config, Service(config))) as client:
        response = await client.post("/search", json={"query": "lights status"})
        trace_id = response.json()["trace_id"]
        for round_ in range(10):
            answers = await asyncio.gather(
                *(
                    client.post(f"/traces/{trace_id}/labels", json={"part": "0", "route": r})
                    for r in routes
                )
            )
            assert [a.status_code for a in answers] == [201] * len(routes)
            shown = (await client.get(f"/traces/{trace_id}")).json()["labels"]
            assert len(shown) == 1, f"round {round_}: {len(shown)} rows for the part"
            assert shown[0]["replaced"] == len(routes) * (round_ + 1) - 1
            # the row kept is the write stored last: its answer counts all the others
            assert max(a.json()["replaced"] for a in answers) == shown[0]["replaced"]


def _bare_store(path: Path) -> sqlite3.Connection:
    """A labels table beside a traces table of ids: all `insert_label` reads."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=10.0, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE traces (trace_id TEXT PRIMARY KEY)")
    conn.executescript(LABELS_SCHEMA)
    upgrade_labels_5(conn)
    conn.executemany("INSERT INTO traces VALUES (?)", [("t",), ("u",)])
    return conn


def test_parallel_writers_of_one_part_over_their_own_connections(tmp_path: Path) -> None:
    """The same at the function the store calls, each writer on its own autocommit
    connection: the last write wins and nothing it replaced goes uncounted."""
    db = tmp_path / "labels.db"
    _bare_store(db).close()
    target = PartDecision("0", "lights status", "ha", "intent_keyword")

    def write(n: int) -> None:
        conn = sqlite3.connect(db, isolation_level=None, timeout=10.0)
        conn.execute("PRAGMA busy_timeout = 10000")
        try:
            insert_label(conn, "t", target, f"route{n}", False, max_labels=1000)
        finally:
            conn.close()

    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for round_ in range(10):
            assert _at_once(8, write) == []
            (label,) = read_labels(conn)
            assert label.replaced == 8 * (round_ + 1) - 1
    finally:
        conn.close()


def test_a_failed_write_leaves_nothing_and_the_connection_usable(tmp_path: Path) -> None:
    conn = _bare_store(tmp_path / "labels.db")
    try:
        insert_label(conn, "t", PartDecision("0", "q", "ha", "intent_keyword"), "web", False)
        with pytest.raises(KeyError):  # the trace is gone: nothing stored, nothing deleted
            insert_label(conn, "gone", PartDecision("0", "q", "ha", "intent_keyword"), "web", False)
        assert not conn.in_transaction
        assert [(lab.trace_id, lab.route) for lab in read_labels(conn)] == [("t", "web")]
        # inside a transaction the caller holds, the label joins it (and leaves with it)
        conn.execute("BEGIN")
        insert_label(conn, "u", PartDecision("0", "q", "ha", "intent_keyword"), "kiwix", False)
        conn.execute("ROLLBACK")
        assert [lab.trace_id for lab in read_labels(conn)] == ["t"]
    finally:
        conn.close()


async def test_relabelling_one_part_a_thousand_times_keeps_every_other_label(
    tmp_path: Path,
) -> None:
    """The bound counts rows: one part relabelled 1000 times is one row, so with
    max_labels 1000 the labels of the other traces all stay."""
    store, ids = await _traces(
        tmp_path / "traces.db", [f"history of rome {n}" for n in range(4)], max_labels=1000
    )
    try:
        for trace_id in ids:
            store.add_label(trace_id, "0", "web", ROUTES)
        for n in range(1000):
            store.add_label(ids[0], "0", ("kiwix", "ha")[n % 2], ROUTES)
        labels = store.labels()
    finally:
        store.close_sync()
    assert sorted(label.trace_id for label in labels) == sorted(ids)
    assert {label.trace_id: label.replaced for label in labels}[ids[0]] == 1000


async def test_max_labels_drops_the_oldest_part_and_a_relabel_makes_a_part_newest(
    tmp_path: Path,
) -> None:
    store, ids = await _traces(
        tmp_path / "traces.db", [f"history of rome {n}" for n in range(4)], max_labels=3
    )
    try:
        for trace_id in ids:
            store.add_label(trace_id, "0", "web", ROUTES)
        kept = [label.trace_id for label in store.labels()]
        for _ in range(50):  # relabel the oldest kept part: still three rows, none lost
            store.add_label(ids[1], "0", "kiwix", ROUTES)
        after = [label.trace_id for label in store.labels()]
    finally:
        store.close_sync()
    assert kept == ids[1:]  # four distinct parts, three kept: the oldest went
    assert after == [ids[2], ids[3], ids[1]]


async def test_a_label_row_of_the_wrong_type_is_left_out_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A tampered row (a BLOB query, a text id of a count) is skipped, counted in the log;
    the others still export and fit (`effective_labels`, `export_entries`)."""
    db = tmp_path / "traces.db"
    store, ids = await _traces(db, ["lights status", "latest news", "history of rome"])
    try:
        for trace_id in ids:
            store.add_label(trace_id, "0", "kiwix", ROUTES)
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            conn.execute("UPDATE labels SET query = X'fffe' WHERE trace_id = ?", (ids[0],))
            conn.execute("UPDATE labels SET replaced = 'many' WHERE trace_id = ?", (ids[1],))
        finally:
            conn.close()
        with caplog.at_level(logging.WARNING, logger="search.correction.labels"):
            labels = store.labels()
    finally:
        store.close_sync()
    assert [label.trace_id for label in labels] == [ids[2]]
    assert "left out 2 stored label(s)" in caplog.text
    assert [label.query for label in effective_labels(labels)] == ["history of rome"]
    assert export_entries(labels) == ([{"query": "history of rome", "route": "kiwix"}], 0)
