"""Labels beside traces: `POST /traces/{id}/labels` on the real app and the real SQLite store.

Requests go through the real `Service` over scripted sources (tests/support/scripted.py), so
the labelled chains are the ones the router really recorded; the app runs in-process over
ASGI with its lifespan, as under uvicorn.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx

from search.api.app import create_app
from search.config import Config, TraceConfig
from search.correction.labels import effective_labels
from search.service import Service
from search.traces.rows import LABEL_KEEP_DAYS, prune
from search.traces.store import SQLiteTraceStore
from tests.search.traces.test_store import home_config
from tests.support.app import asgi_client


def app_for(config: Config) -> Any:
    return create_app(config, Service(config))


async def _search(client: httpx.AsyncClient, query: str) -> str:
    response = await client.post("/search", json={"query": query})
    assert response.status_code == 200, response.text
    return str(response.json()["trace_id"])


async def test_a_label_is_stored_beside_its_trace_and_shown_with_it(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        trace_id = await _search(client, "latest news and also lights status")
        response = await client.post(
            f"/traces/{trace_id}/labels", json={"part": "1", "route": "kiwix"}
        )
        assert response.status_code == 201, response.text
        stored = response.json()
        shown = (await client.get(f"/traces/{trace_id}")).json()
    assert stored["part"] == "1" and stored["route"] == "kiwix"
    assert stored["query"] == "lights status" and stored["decision"] == "ha"
    assert [(lab["part"], lab["route"]) for lab in shown["labels"]] == [("1", "kiwix")]


async def test_none_is_a_route_a_label_may_name(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        trace_id = await _search(client, "lights status")
        response = await client.post(
            f"/traces/{trace_id}/labels", json={"part": "0", "route": "none"}
        )
    assert response.status_code == 201
    assert response.json()["route"] == "none"


async def test_an_unknown_trace_is_404_an_unknown_part_or_route_422(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        trace_id = await _search(client, "lights status")
        unknown = await client.post(
            "/traces/" + "0" * 32 + "/labels", json={"part": "0", "route": "web"}
        )
        bad_part = await client.post(
            f"/traces/{trace_id}/labels", json={"part": "3", "route": "web"}
        )
        bad_route = await client.post(
            f"/traces/{trace_id}/labels", json={"part": "0", "route": "weather"}
        )
        missing = await client.post(f"/traces/{trace_id}/labels", json={"part": "0"})
        extra = await client.post(
            f"/traces/{trace_id}/labels", json={"part": "0", "route": "web", "weight": 3}
        )
        number = await client.post(f"/traces/{trace_id}/labels", json={"part": 0, "route": "web"})
        not_json = await client.post(
            f"/traces/{trace_id}/labels", content=b"{", headers={"content-type": "application/json"}
        )
        form = await client.post(f"/traces/{trace_id}/labels", data={"part": "0", "route": "web"})
        twice = await client.post(
            f"/traces/{trace_id}/labels",
            content=b'{"part": "0", "route": "web", "route": "ha"}',
            headers={"content-type": "application/json"},
        )
        shown = (await client.get(f"/traces/{trace_id}")).json()
    assert unknown.status_code == 404 and "no such trace" in unknown.json()["error"]["message"]
    assert bad_part.status_code == 422 and bad_part.json()["error"]["field"] == "part"
    assert "'0'" in bad_part.json()["error"]["message"]  # it lists the parts there are
    assert bad_route.status_code == 422 and bad_route.json()["error"]["field"] == "route"
    assert "none" in bad_route.json()["error"]["message"]  # and the routes there are
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "route"
    assert extra.status_code == 422 and extra.json()["error"]["field"] == "weight"
    assert number.status_code == 422 and number.json()["error"]["field"] == "part"
    assert not_json.status_code == 400
    assert form.status_code == 415  # the request guard: a cross-site form cannot label
    assert twice.status_code == 422 and twice.json()["error"]["field"] == "route"
    assert shown["labels"] == []


async def test_a_foreign_origin_cannot_label(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        trace_id = await _search(client, "lights status")
        response = await client.post(
            f"/traces/{trace_id}/labels",
            json={"part": "0", "route": "web"},
            headers={"origin": "http://evil.example"},
        )
        shown = (await client.get(f"/traces/{trace_id}")).json()
    assert response.status_code == 403
    assert shown["labels"] == []


async def test_the_openapi_document_lists_the_labels_route(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/traces/{trace_id}/labels"]["post"]
    assert {"201", "404", "422"} <= set(operation["responses"])
    assert "LabelRequest" in document["components"]["schemas"]


async def test_twenty_conflicting_labels_leave_the_latest(tmp_path: Path) -> None:
    """The documented rule: for one query, the label stored last wins (not the majority)."""
    config = home_config(tmp_path / "traces.db")
    routes = ["web", "kiwix", "ha", "none"]
    async with asgi_client(app_for(config)) as client:
        ids = [
            await _search(client, "Lights status" if n % 2 else "lights  status") for n in range(4)
        ]
        given = []
        for n in range(20):
            route = "web" if n < 15 else routes[n % 4]  # a majority for web, then others
            response = await client.post(
                f"/traces/{ids[n % 4]}/labels", json={"part": "0", "route": route}
            )
            assert response.status_code == 201
            given.append(route)
    store = SQLiteTraceStore(config.trace)
    try:
        labels = store.labels()
        (winner,) = effective_labels(labels)
    finally:
        store.close_sync()
    # one row per labelled part (4 traces), each counting the labels it replaced
    assert len(labels) == 4
    assert sum(label.replaced for label in labels) == 16
    assert winner.route == given[-1] == "none"
    assert winner.id == max(label.id for label in labels)


async def test_three_thousand_labels_of_one_part_keep_one_row(tmp_path: Path) -> None:
    """A client relabelling one part in a loop: the trace stays the size it was."""
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        trace_id = await _search(client, "lights status")
        for n in range(3000):
            response = await client.post(
                f"/traces/{trace_id}/labels",
                json={"part": "0", "route": ("web", "kiwix", "none")[n % 3]},
            )
            assert response.status_code == 201
        shown = (await client.get(f"/traces/{trace_id}")).json()
    assert [(label["route"], label["replaced"]) for label in shown["labels"]] == [("none", 2999)]


async def test_the_store_keeps_at_most_max_labels_the_oldest_go(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db", max_labels=3)
    async with asgi_client(app_for(config)) as client:
        ids = [await _search(client, f"history of rome {n}") for n in range(5)]
        for trace_id in ids:
            response = await client.post(
                f"/traces/{trace_id}/labels", json={"part": "0", "route": "web"}
            )
            assert response.status_code == 201
    store = SQLiteTraceStore(config.trace)
    try:
        kept = [label.trace_id for label in store.labels()]
    finally:
        store.close_sync()
    assert kept == ids[2:]


async def test_a_labelled_trace_outlives_retention(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    config = home_config(db, max_traces=3)
    async with asgi_client(app_for(config)) as client:
        first = await _search(client, "lights status")
        second = await _search(client, "latest news")
        assert (
            await client.post(f"/traces/{first}/labels", json={"part": "0", "route": "kiwix"})
        ).status_code == 201
        for n in range(6):
            await _search(client, f"history of rome {n}")
        assert (await client.get("/traces")).status_code == 200  # flushes: pruned by now
        kept_first = (await client.get(f"/traces/{first}")).status_code
        kept_second = (await client.get(f"/traces/{second}")).status_code
    assert kept_first == 200, "a labelled trace was pruned by max_traces"
    assert kept_second == 404, "retention stopped working for unlabelled traces"
    # and by age: 300 days later only the labelled trace is left; past the label's own
    # limit (LABEL_KEEP_DAYS) it goes too
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        prune(conn, time.time() + 300 * 86400, max_age_days=30, max_traces=3)
        left = [row[0] for row in conn.execute("SELECT trace_id FROM traces")]
        prune(conn, time.time() + (LABEL_KEEP_DAYS + 1) * 86400, max_age_days=30, max_traces=3)
        later = [row[0] for row in conn.execute("SELECT trace_id FROM traces")]
    finally:
        conn.close()
    assert left == [first]
    assert later == []


async def test_an_exported_label_lets_its_trace_leave_by_retention(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    config = home_config(db, max_traces=2)
    async with asgi_client(app_for(config)) as client:
        first = await _search(client, "lights status")
        assert (
            await client.post(f"/traces/{first}/labels", json={"part": "0", "route": "kiwix"})
        ).status_code == 201
    store = SQLiteTraceStore(config.trace)
    try:
        store.mark_exported(label.id for label in store.labels())
    finally:
        store.close_sync()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        prune(conn, time.time() + 31 * 86400, max_age_days=30, max_traces=2)
        left = [row[0] for row in conn.execute("SELECT trace_id FROM traces")]
        labels = conn.execute("SELECT COUNT(*) FROM labels").fetchone()[0]
    finally:
        conn.close()
    assert left == []
    assert labels == 1  # the correction itself stays (it still routes)


async def test_labels_on_a_redacted_store_keep_the_pseudonym_never_the_text(
    tmp_path: Path,
) -> None:
    db = tmp_path / "traces.db"
    config = home_config(db, redact=True)
    async with asgi_client(app_for(config)) as client:
        trace_id = await _search(client, "lights status in the cottage")
        response = await client.post(
            f"/traces/{trace_id}/labels", json={"part": "0", "route": "web"}
        )
    assert response.status_code == 201
    assert response.json()["query"].startswith("hmac-sha256:")
    assert response.json()["redacted"] is True
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("traces.db"))
    assert b"cottage" not in data


def test_an_older_store_gets_its_labels_table_on_open(tmp_path: Path) -> None:
    from search.traces.rows import SCHEMA

    db = tmp_path / "traces.db"
    conn = sqlite3.connect(db)
    conn.executescript(SCHEMA.split("CREATE TABLE IF NOT EXISTS labels")[0])
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    store = SQLiteTraceStore(TraceConfig(path=str(db)))
    store.open_sync()
    try:
        assert store.labels() == []
    finally:
        store.close_sync()


async def test_the_narrative_and_trace_show_say_a_part_was_labelled(tmp_path: Path) -> None:
    import asyncio
    import subprocess
    import sys

    db = tmp_path / "traces.db"
    config = home_config(db)
    async with asgi_client(app_for(config)) as client:
        trace_id = await _search(client, "latest news and also lights status")
        for route in ("kiwix", "none"):
            await client.post(f"/traces/{trace_id}/labels", json={"part": "1", "route": route})
        shown = (await client.get(f"/traces/{trace_id}")).json()
    part_1 = next(line for line in shown["narrative"] if line.startswith("part 1"))
    assert part_1.endswith("the user labelled it: no source serves this (latest of 2 labels)")
    assert not any("labelled" in line for line in shown["narrative"] if line.startswith("part 0"))
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "search", "trace", "show", trace_id, "--store", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("label "))
    assert lines[header].split() == ["label", "time", "part", "decision", "labelled", "replaced"]
    # one row per part: the latest label, counting the one it replaced
    assert [line.split()[2:] for line in lines[header + 1 :]] == [["1", "ha", "none", "1"]]


def test_a_decision_shaped_by_a_user_label_says_so() -> None:
    from search.traces.narrative import sentence

    event = {
        "step": "intent_semantic",
        "seq": 1,
        "t_ms": 1.0,
        "part": "0",
        "query": "how are things at the cottage",
        "decision": "ha",
        "similarity": 0.93,
        "matched_query": "how is the cottage",
        "origin": "user_label",
        "matched": True,
    }
    assert (
        sentence(event) == "went to ha by similarity 0.93 to the user's label 'how is the cottage'"
    )
    assert (
        sentence(event, with_text=False)
        == "went to ha by similarity 0.93 to a query the user labelled"
    )


def test_the_household_artefact_lives_in_the_data_directory(tmp_path: Path) -> None:
    import stat

    from routing.stages.labels import HouseholdRouting
    from search.correction import household
    from search.correction.label_fit import applied_labels
    from search.correction.labels import Label

    config = home_config(tmp_path / "data" / "traces.db")
    path = household.artefact_path(config)
    assert path == tmp_path / "data" / "routing-household.json"
    assert household.load(config) is None  # never fitted

    labels = [
        Label(1, "t", "0", "web", "how is the shed", "kiwix", 1.0, False),
        Label(2, "t", "0", "ha", "How is the  shed?", "kiwix", 2.0, False),  # relabelled
        Label(3, "u", "0", "web", "hmac-sha256:" + "0" * 64, "ha", 3.0, True),
        Label(4, "v", "0", "recipes", "how long to boil an egg", "kiwix", 4.0, False),
    ]
    applied, skipped = applied_labels(labels, config)
    assert [(a.query, a.route) for a in applied] == [("How is the  shed?", "ha")]
    assert [s.why for s in skipped] == [
        "stored redacted: the store kept no words to match",
        "route 'recipes' is not configured",
    ]
    data = household.encode(applied, None)
    household.write(path, data)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = household.load(config)
    assert isinstance(loaded, HouseholdRouting)
    assert loaded.name == household.name_of(data) and loaded.name.startswith("household:")
    assert loaded.route_for("how is the shed") == "ha"  # case, spacing, punctuation aside
    assert loaded.route_for("how is the garden shed") is None  # only its own words
    assert loaded.model is None  # the shipped weights


def test_a_damaged_artefact_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    import pytest

    from search.config import ConfigError
    from search.correction import household

    config = home_config(tmp_path / "traces.db")
    household.artefact_path(config).write_text('{"version": 1, "rows": []}')
    with pytest.raises(ConfigError, match="routing-household.json: not a household routing"):
        household.load(config)


async def test_the_fit_report_routes_the_labels_and_replays_the_store(tmp_path: Path) -> None:
    from search.correction import household
    from search.correction.label_fit import applied_labels, labels_report

    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        wrong = await _search(client, "lights status")  # keyword rule: ha
        await _search(client, "latest news")  # unrelated: stays with web
        response = await client.post(
            f"/traces/{wrong}/labels", json={"part": "0", "route": "kiwix"}
        )
        assert response.status_code == 201
    store = SQLiteTraceStore(config.trace)
    try:
        labels = store.labels()
        applied, _ = applied_labels(labels, config)
        new = household.decode(household.encode(applied, None))
        report = await labels_report(config, store, labels, None, new)
    finally:
        store.close_sync()
    lines = report.lines()
    assert lines[0] == "labelled set: 1 queries; routed as labelled before 0.0%, after 100.0%"
    assert report.changed_traces == [wrong]
    assert report.changes == [(wrong, "part 0 'lights status': decision changed: ha -> kiwix")]
    assert report.replayed == 2


def test_a_schema_4_store_gets_the_label_count_and_export_columns(tmp_path: Path) -> None:
    """A store written before one label per part: its labels keep, and gain `replaced`
    and `exported_at`."""
    from search.correction.labels import LABELS_SCHEMA as LABELS_SCHEMA_4

    db = tmp_path / "traces.db"
    store = SQLiteTraceStore(TraceConfig(path=str(db)))
    store.open_sync()
    store.close_sync()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DROP TABLE labels")
    conn.executescript(LABELS_SCHEMA_4)
    conn.execute(
        "INSERT INTO labels (trace_id, part, route, query, decision, created_at, redacted)"
        " VALUES ('t', '0', 'ha', 'how is the shed', 'kiwix', 1.0, 0)"
    )
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    store = SQLiteTraceStore(TraceConfig(path=str(db)))
    store.open_sync()
    try:
        (label,) = store.labels()
    finally:
        store.close_sync()
    assert (label.query, label.route, label.replaced, label.exported_at) == (
        "how is the shed",
        "ha",
        0,
        None,
    )
