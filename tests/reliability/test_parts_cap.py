"""`routing.max_parts`: a query that splits into more parts is refused before any part is
resolved or sent to a source: 422 naming `query` over HTTP, an error result naming it
over MCP, exit 2 from the CLI.

HTTP and MCP run against the real app under uvicorn on loopback with the real ZIM source;
the CLI runs as a subprocess, as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from mcp import Client

from search.api.app import create_app
from search.config import ConfigError, parse_config
from search.service import Service
from tests.support.app import build_app, uvicorn_server

ROOT = Path(__file__).resolve().parents[2]
MAX_PARTS = 3
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def parts_query(count: int) -> str:
    return "; ".join(f"who wrote book number {i}" for i in range(count))


def zim_config(demo_zim: Path, **routing: Any) -> dict[str, Any]:
    return {
        "routing": {"default_source": "kiwix", "semantic": {"enabled": False}, **routing},
        "trace": {"enabled": False},
        "sources": {"kiwix": {"type": "zim", "paths": [str(demo_zim)]}},
    }


@pytest.fixture(scope="module")
def base(demo_zim: Path) -> Iterator[str]:
    config = parse_config(zim_config(demo_zim, max_parts=MAX_PARTS))
    with uvicorn_server(build_app(config)) as url:
        yield url


def test_the_default_cap_is_8_and_it_must_be_at_least_1(demo_zim: Path) -> None:
    assert parse_config(zim_config(demo_zim)).routing.max_parts == 8
    with pytest.raises(ConfigError, match="routing.max_parts"):
        parse_config(zim_config(demo_zim, max_parts=0))


def test_over_the_cap_is_422_naming_query(base: str) -> None:
    response = httpx.post(f"{base}/search", json={"query": parts_query(MAX_PARTS + 1)}, timeout=30)
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert error["field"] == "query" and error["type"] == "too_many_parts"
    assert error["message"].startswith("query:")
    assert f"{MAX_PARTS + 1} parts" in error["message"]
    assert f"maximum of {MAX_PARTS}" in error["message"]


def test_at_the_cap_every_part_is_answered(base: str) -> None:
    response = httpx.post(f"{base}/search", json={"query": parts_query(MAX_PARTS)}, timeout=30)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["query"] for r in results] == [f"who wrote book number {i}" for i in range(MAX_PARTS)]
    assert all(r["source"] == "kiwix" for r in results)


def test_a_1000_character_query_of_hundreds_of_parts_is_refused(base: str) -> None:
    query = ";".join(f"q{i}" for i in range(400))[:1000]
    response = httpx.post(f"{base}/search", json={"query": query}, timeout=30)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "query"


def test_over_http_the_part_count_is_checked_once_per_request(demo_zim: Path) -> None:
    """The handler checks (a 422 before any trace or source); the router does not again."""
    config = parse_config(zim_config(demo_zim, max_parts=MAX_PARTS))
    service = Service(config)
    checked: list[str] = []
    original = service.router.check_parts

    def counted(query: str) -> int:
        checked.append(query)
        return original(query)

    service.router.check_parts = counted  # type: ignore[method-assign]
    within, over = parts_query(MAX_PARTS), parts_query(MAX_PARTS + 1)
    with uvicorn_server(create_app(config, service)) as url:
        assert httpx.post(f"{url}/search", json={"query": within}, timeout=30).status_code == 200
        assert httpx.post(f"{url}/search", json={"query": over}, timeout=30).status_code == 422
    assert checked == [within, over]


async def test_mcp_search_over_the_cap_is_an_error_naming_query(base: str) -> None:
    async with Client(f"{base}/mcp") as client:
        refused = await client.call_tool("search", {"query": parts_query(MAX_PARTS + 1)})
        answered = await client.call_tool("search", {"query": parts_query(MAX_PARTS)})
    assert refused.is_error
    error = refused.structured_content["error"]
    assert error["field"] == "query" and error["type"] == "too_many_parts"
    assert not answered.is_error and len(answered.structured_content["results"]) == MAX_PARTS


async def test_the_service_refuses_before_any_source_is_called() -> None:
    """A caller that skips the surfaces' check (a replay, an embedder) still gets a 422
    outcome, and no part was resolved or sent to a source."""
    config = parse_config(
        {
            "routing": {"default_source": "kiwix", "semantic": {"enabled": False}, "max_parts": 2},
            "trace": {"enabled": False},
            "sources": {"kiwix": {"type": "scripted"}},
        }
    )
    service = Service(config)
    await service.start()
    try:
        outcome = await service.search("what is a; what is b; what is c", explain=True)
        source: Any = service.sources["kiwix"]
        assert source.calls == 0
        assert outcome.status_code == 422
        assert outcome.body["error"]["field"] == "query"
        assert [e["step"] for e in outcome.chain] == ["error"]
        within = await service.search("what is a; what is b")
        assert within.status_code == 200 and source.calls == 2
    finally:
        await service.aclose()


def write_config(tmp_path: Path, demo_zim: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(zim_config(demo_zim, max_parts=MAX_PARTS)))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "search", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("command", ["query", "route"])
def test_the_cli_exits_2_naming_query(tmp_path: Path, demo_zim: Path, command: str) -> None:
    config = write_config(tmp_path, demo_zim)
    done = run_cli(command, parts_query(MAX_PARTS + 1), "--local", "--config", str(config))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"query: {MAX_PARTS + 1} parts" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    within = run_cli(command, parts_query(MAX_PARTS), "--json", "--local", "--config", str(config))
    assert within.returncode == 0, within.stderr


def test_route_input_names_the_query_over_the_cap(tmp_path: Path, demo_zim: Path) -> None:
    config = write_config(tmp_path, demo_zim)
    queries = tmp_path / "queries.jsonl"
    queries.write_text("who wrote hamlet\n" + json.dumps({"text": parts_query(9)}) + "\n")
    done = run_cli("route", "--input", str(queries), "--config", str(config))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--input: line 2: query: 9 parts" in done.stderr
    assert done.stdout == ""  # refused before any line was answered
