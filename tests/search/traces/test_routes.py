"""`GET /traces` and `GET /traces/{id}` on the real app, reading the real SQLite store.

The app runs in-process over ASGI with its lifespan (so the store is started and flushed
exactly as under uvicorn); sources are the scripted kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from search.api.app import create_app
from search.config import Config
from search.service import Service
from search.traces.store import MAX_TEXT_FILTER, SQLiteTraceStore, TraceFilter, parse_filters
from tests.search.traces.test_store import home_config
from tests.support.app import asgi_client

QUERIES = ["lights status", "history of rome", "gizmo", "latest news and also lights status"]


async def run_queries(client: httpx.AsyncClient, queries: list[str]) -> list[str]:
    ids = []
    for query in queries:
        response = await client.post("/search", json={"query": query})
        ids.append(response.json()["trace_id"])
    return ids


def app_for(config: Config) -> Any:
    return create_app(config, Service(config))


async def test_a_trace_id_from_search_is_readable_at_once_with_its_narrative(
    tmp_path: Path,
) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        response = await client.post("/search", json={"query": "lights status"})
        trace_id = response.json()["trace_id"]
        shown = await client.get(f"/traces/{trace_id}")
    assert shown.status_code == 200
    trace = shown.json()
    assert trace["trace_id"] == trace_id and trace["query"] == "lights status"
    assert [e["step"] for e in trace["chain"]] == [
        "intent_keyword",
        "source_invoked",
        "fallback",
        "source_invoked",
    ]
    (line,) = trace["narrative"]
    assert line.startswith("part 0 'lights status' went to ha by keyword; ha refused")


async def test_unknown_trace_is_404_with_the_contract_error_body(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        response = await client.get("/traces/" + "0" * 32)
    assert response.status_code == 404
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["type"] == "not_found" and "no such trace" in body["error"]["message"]


@pytest.mark.parametrize("text", ["not-an-id", "0" * 31, "0" * 33, "A" * 32, "%1b%5b31m"])
async def test_text_that_is_no_trace_id_is_422_naming_trace_id(tmp_path: Path, text: str) -> None:
    """Not an id this router makes: bad input said as such, not a "no such trace" that
    sends the user looking for a lost one; the label route answers the same."""
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        shown = await client.get(f"/traces/{text}")
        labelled = await client.post(f"/traces/{text}/labels", json={"part": "0", "route": "web"})
    for response in (shown, labelled):
        assert response.status_code == 422, response.text
        assert response.json()["error"] == {
            "type": "invalid_request",
            "message": "trace_id: not a trace id (32 lowercase hex digits)",
            "field": "trace_id",
        }


async def test_filters_select_the_right_traces(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        ids = await run_queries(client, QUERIES)

        async def listed(**params: Any) -> list[str]:
            response = await client.get("/traces", params=params)
            assert response.status_code == 200, response.text
            return [t["trace_id"] for t in response.json()["traces"]]

        assert await listed() == ids[::-1]
        assert await listed(step="fallback") == [ids[3], ids[0]]
        assert await listed(fallback="true") == [ids[3], ids[0]]
        assert await listed(failed="true") == [ids[2]]
        assert await listed(source="broken") == [ids[2]]
        assert await listed(source="web", outcome="ok") == [ids[3], ids[0]]
        assert await listed(outcome="error") == [ids[3], ids[2], ids[0]]
        assert await listed(q="Rome") == [ids[1]]
        assert await listed(q="lights status") == [ids[3], ids[0]]
        assert await listed(since="1h", until="2099-01-01T00:00:00+00:00") == ids[::-1]
        assert await listed(until="1h") == []
        summary = (await client.get("/traces", params={"failed": "true"})).json()["traces"][0]
        assert summary["status_code"] == 502 and summary["sources"] == ["broken"]


async def test_paging_by_offset_and_by_cursor_covers_everything_once(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        ids = await run_queries(client, [f"history {n}" for n in range(23)])
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 5}
            if cursor:
                params["cursor"] = cursor
            page = (await client.get("/traces", params=params)).json()
            assert page["total"] == 23
            seen.extend(t["trace_id"] for t in page["traces"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == ids[::-1]
        page = (await client.get("/traces", params={"limit": 10, "offset": 20})).json()
        assert [t["trace_id"] for t in page["traces"]] == ids[2::-1]
        assert page["next_cursor"] is None


async def test_a_cursor_with_an_offset_is_refused_not_combined(tmp_path: Path) -> None:
    """Applied together, the offset would count from the cursor: the page after
    `offset=5` would silently skip 5 more rows. The 422 names both parameters."""
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        ids = await run_queries(client, [f"history {n}" for n in range(12)])
        first = (await client.get("/traces", params={"limit": 4, "offset": 5})).json()
        assert [t["trace_id"] for t in first["traces"]] == ids[::-1][5:9]
        cursor = first["next_cursor"]
        for offset in ("5", "0"):
            both = await client.get("/traces", params={"offset": offset, "cursor": cursor})
            assert both.status_code == 422
            error = both.json()["error"]
            assert error["field"] == "cursor"
            assert "cursor" in error["message"] and "offset" in error["message"]
        rest = (await client.get("/traces", params={"limit": 4, "cursor": cursor})).json()
        assert [t["trace_id"] for t in rest["traces"]] == ids[::-1][9:]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("outcome=great", "outcome"),
        ("limit=0", "limit"),
        ("limit=5000", "limit"),
        ("offset=-3", "offset"),
        ("since=yesterday-ish", "since"),
        ("failed=perhaps", "failed"),
        ("cursor=abc", "cursor"),
        ("colour=red", "colour"),
        ("step=fallback&step=fusion", "step"),
    ],
)
async def test_bad_filter_values_are_422_naming_the_field(
    tmp_path: Path, query: str, field: str
) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        response = await client.get(f"/traces?{query}")
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == field and error["message"].startswith(field)


async def test_a_text_filter_is_bounded_below_what_sqlite_refuses(tmp_path: Path) -> None:
    """SQLite refuses a LIKE pattern over 50,000 bytes: a longer `q` made every listing
    of a store with traces answer 500, blaming `trace.path`. At the bound, the text is
    searched, however its characters escape or encode; past it, a 422 names `q`."""
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        await run_queries(client, ["history of rome"])
        found = await client.get("/traces", params={"q": "_" * MAX_TEXT_FILTER})
        assert found.status_code == 200 and found.json()["total"] == 0, found.text[:200]
        refused = await client.get("/traces", params={"q": "a" * (MAX_TEXT_FILTER + 1)})
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["field"] == "q" and "10,000 characters" in error["message"]
    # longer URLs than an HTTP client builds: the store itself, escaped (2 bytes) and
    # four-byte characters at the bound
    store = SQLiteTraceStore(config.trace)
    try:
        for character in ("%", "\\", "\N{GRINNING FACE}"):
            filters = parse_filters({"q": character * MAX_TEXT_FILTER})
            assert store.list_traces(filters)["total"] == 0
        assert store.list_traces(parse_filters({"q": "rome"}))["total"] == 1
    finally:
        store.close_sync()


async def test_with_the_store_switched_off_traces_are_404(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db", enabled=False)
    async with asgi_client(app_for(config)) as client:
        await client.post("/search", json={"query": "lights status"})
        listing = await client.get("/traces")
    assert listing.status_code == 404 and "switched off" in listing.json()["error"]["message"]
    assert not (tmp_path / "traces.db").exists()


async def test_shutdown_flushes_every_trace(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        ids = await run_queries(client, [f"history {n}" for n in range(50)])
    store = SQLiteTraceStore(config.trace)
    page = store.list_traces(TraceFilter(limit=100))
    assert {t["trace_id"] for t in page["traces"]} == set(ids)
    store.close_sync()


async def test_openapi_describes_the_trace_routes(tmp_path: Path) -> None:
    config = home_config(tmp_path / "traces.db")
    async with asgi_client(app_for(config)) as client:
        document = (await client.get("/openapi.json")).json()
    listing = document["paths"]["/traces"]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {
        "step",
        "source",
        "outcome",
        "failed",
        "fallback",
        "since",
        "until",
        "q",
        "limit",
        "cursor",
    }
    assert "404" in document["paths"]["/traces/{trace_id}"]["get"]["responses"]
    assert {"TracePage", "TraceDetail", "TraceSummary"} <= set(document["components"]["schemas"])


async def test_a_truncated_chain_is_still_found_by_what_its_dropped_events_did(
    tmp_path: Path,
) -> None:
    """Past `routing.max_events` the events are dropped, not what they did: the stored
    trace still fell back and still called web, as the response says."""
    config = home_config(tmp_path / "traces.db")
    config = config.model_copy(
        update={"routing": config.routing.model_copy(update={"max_events": 4})}
    )
    query = "; ".join(["history of rome"] * 5 + ["lights status"])
    async with asgi_client(app_for(config)) as client:
        body = (await client.post("/search", json={"query": query, "explain": True})).json()
        shown = (await client.get(f"/traces/{body['trace_id']}")).json()
        by_flag = (await client.get("/traces", params={"fallback": "true"})).json()["traces"]
        by_source = (await client.get("/traces", params={"source": "web"})).json()["traces"]
        metrics = (await client.get("/metrics")).text
    assert body["dropped_events"] > 0 and body["fallback_occurred"] is True
    assert "fallback" not in [e["step"] for e in body["explanation"]]  # it was dropped
    assert shown["fallback"] is True and "web" in shown["sources"]
    assert [t["trace_id"] for t in by_flag] == [body["trace_id"]]
    assert [t["trace_id"] for t in by_source] == [body["trace_id"]]
    assert 'search_fallbacks_total{from_source="ha",to_source="web"} 1.0' in metrics
