"""The MCP tools through the official SDK's own client, over both transports.

Streamable HTTP: the real app under uvicorn on loopback, at `/mcp`, with the modern
protocol and with the legacy initialize handshake (what Home Assistant's MCP client, on
SDK 1.x, speaks). stdio: `python -m search mcp --config ...` as a real subprocess over a
real ZIM built from the shipped corpus, with a source kind that writes to file
descriptor 1 while starting and while answering, as libzim's ZIM Creator does: the
protocol must stay clean and the noise must land on stderr.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from search.api.app import create_app
from search.config import Config, parse_config
from tests.support.app import assert_contract_event, uvicorn_server

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "sources" / "corpus" / "articles.jsonl"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def home_config(tmp_path: Path, **server: Any) -> Config:
    """ha is down and falls back to web; the result cache is off so chains repeat."""
    return parse_config(
        {
            "server": server,
            "routing": {
                "default_source": "kiwix",
                "keywords": {"ha": ["lights"], "web": ["news"]},
                "semantic": {"enabled": False},
            },
            "cache": {"result_ttl_s": 0},
            "trace": {"path": str(tmp_path / "traces.db")},
            "sources": {
                "kiwix": {"type": "scripted", "description": "Offline encyclopedia."},
                "ha": {
                    "type": "scripted",
                    "fail": "unavailable",
                    "fallback": ["web"],
                    "circuit_failures": 0,
                },  # always called, never skipped
                "web": {"type": "scripted", "items": 3, "description": "Web search."},
                "down": {"type": "scripted", "fail": "error"},
            },
        }
    )


def without_timing(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("t_ms", "elapsed_ms")} for e in chain]


@pytest.fixture()
def served(tmp_path: Path):
    with uvicorn_server(create_app(home_config(tmp_path))) as base:
        yield base


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_tools_answer_like_search_and_traces(served: str, mode: str) -> None:
    query = "are the lights on"
    async with Client(f"{served}/mcp", mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"search", "get_trace"}
        schema = tools["search"].input_schema
        assert schema["required"] == ["query"]
        assert set(schema["properties"]) == {"query", "explain"}
        assert "Offline encyclopedia." in (tools["search"].description or "")

        result = await client.call_tool("search", {"query": query, "explain": True})
        assert not result.is_error
        body = result.structured_content
        assert json.loads(result.content[0].text) == body  # text for clients that read only text

        trace = await client.call_tool("get_trace", {"trace_id": body["trace_id"]})
        plain = await client.call_tool("search", {"query": query})

    async with httpx.AsyncClient(base_url=served, timeout=30) as http:
        direct = (await http.post("/search", json={"query": query, "explain": True})).json()
        stored = (await http.get(f"/traces/{body['trace_id']}")).json()

    assert set(body) == set(direct)
    assert body["results"] == direct["results"]
    assert body["fallback_occurred"] is direct["fallback_occurred"] is True
    assert without_timing(body["explanation"]) == without_timing(direct["explanation"])
    for event in body["explanation"]:
        assert_contract_event(event)
    fallback = next(e for e in body["explanation"] if e["step"] == "fallback")
    assert (fallback["from_source"], fallback["to_source"]) == ("ha", "web")

    assert not trace.is_error
    assert trace.structured_content["chain"] == body["explanation"] == stored["chain"]
    assert trace.structured_content["narrative"] == stored["narrative"]
    assert plain.structured_content["explanation"] is None
    assert plain.structured_content["results"] == body["results"]


async def test_http_tool_errors_are_results_the_model_can_read(served: str) -> None:
    async with Client(f"{served}/mcp") as client:
        empty = await client.call_tool("search", {"query": "   "})
        long = await client.call_tool("search", {"query": "x" * 1001})
        wrong = await client.call_tool("search", {"query": 3})
        missing = await client.call_tool("get_trace", {"trace_id": "0" * 32})
        unknown = await client.call_tool("get_trace", {"trace_id": "x", "extra": 1})
        not_id = await client.call_tool("get_trace", {"trace_id": "../traces.db"})
    assert empty.is_error and empty.structured_content["error"]["field"] == "query"
    assert "must not be empty" in empty.structured_content["error"]["message"]
    assert long.is_error and "maximum of 1000" in long.structured_content["error"]["message"]
    assert wrong.is_error and "query" in wrong.content[0].text
    assert missing.is_error and missing.structured_content["error"]["type"] == "not_found"
    assert not_id.is_error and not_id.structured_content["error"] == {
        "type": "invalid_arguments",
        "message": "trace_id: not a trace id (32 lowercase hex digits)",
        "field": "trace_id",
    }
    assert unknown.is_error and unknown.structured_content["error"]["message"] == (
        "extra: unknown argument"
    )


async def test_http_failed_search_is_an_error_result_with_its_chain(tmp_path: Path) -> None:
    config = home_config(tmp_path)
    config.routing.default_source = "down"
    with uvicorn_server(create_app(config)) as base:
        async with Client(f"{base}/mcp") as client:
            result = await client.call_tool("search", {"query": "tides", "explain": True})
    assert result.is_error
    body = result.structured_content
    assert body["error"]["type"] == "all_parts_failed"
    assert [e["step"] for e in body["explanation"]][-2:] == ["error", "error"]
    assert len(body["trace_id"]) == 32


async def test_http_mcp_refuses_a_rebinding_host_and_needs_the_token(tmp_path: Path) -> None:
    config = home_config(tmp_path, api_token="s3cret-token")
    config.mcp.allowed_hosts = ["search.home.arpa"]  # a reverse proxy on this machine
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": "Bearer s3cret-token",
    }
    with uvicorn_server(create_app(config)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            ok = await http.post("/mcp", json=init, headers=headers)
            rebound = await http.post(
                "/mcp", json=init, headers={**headers, "Host": "evil.example:8080"}
            )
            cross = await http.post(
                "/mcp", json=init, headers={**headers, "Origin": "http://evil.example"}
            )
            anonymous = await http.post("/mcp", json=init, headers={"Accept": headers["Accept"]})
            proxied = await http.post(
                "/mcp", json=init, headers={**headers, "Host": "search.home.arpa"}
            )
        with pytest.raises(Exception):  # noqa: B017 - whatever the SDK raises on a 403
            async with Client(f"{base}/mcp") as client:
                await client.list_tools()
        authed = create_mcp_http_client(headers={"Authorization": "Bearer s3cret-token"})
        transport = streamable_http_client(f"{base}/mcp", http_client=authed)
        async with authed, Client(transport) as client:
            names = {t.name for t in (await client.list_tools()).tools}
    assert ok.status_code == 200 and ok.json()["result"]["serverInfo"]["name"] == "search-router"
    assert rebound.status_code == 403 and cross.status_code == 403
    assert proxied.status_code == 200
    assert anonymous.status_code == 401 and "s3cret" not in anonymous.text
    assert names == {"search", "get_trace"}


async def test_http_mcp_refuses_a_key_named_twice_and_an_oversized_body(tmp_path: Path) -> None:
    """Parsers differ on which of two equal keys counts: a proxy that let `"name": "search"`
    through must not see the router run another tool. Refused as `/search` refuses it."""
    config = home_config(tmp_path)
    call = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", '
        b'"name": "get_trace", "arguments": {"query": "who wrote romeo and juliet"}}}'
    )
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    limit = config.server.max_body_bytes
    with uvicorn_server(create_app(config)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            twice = await http.post("/mcp", content=call, headers=headers)
            large = await http.post("/mcp", content=b" " * (limit + 1), headers=headers)
            async with Client(f"{base}/mcp") as client:  # an ordinary client is unaffected
                names = {t.name for t in (await client.list_tools()).tools}
    assert twice.status_code == 422
    assert twice.json()["error"]["field"] == "name"
    assert large.status_code == 413 and large.json()["error"]["type"] == "body_too_large"
    assert "search" in names


async def test_mcp_can_be_switched_off(tmp_path: Path) -> None:
    config = home_config(tmp_path)
    config.mcp.enabled = False
    with uvicorn_server(create_app(config)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            response = await http.post("/mcp", json={})
    assert response.status_code == 404


# --- stdio ---------------------------------------------------------------------------

NOISY_KIND = '''
"""A source that writes to fd 1 and to Python's stdout, like a chatty C library."""
import os
from typing import Literal

from sources.base import Item, Source
from sources.registry import SourceConfig


class Config(SourceConfig):
    type: Literal["noisy"]


class Noisy(Source):
    kind = "noisy"

    async def start(self) -> None:
        os.write(1, b"NOISE-FD1-AT-START\\n")
        print("NOISE-PRINT-AT-START")

    async def search(self, query: str) -> list[Item]:
        os.write(1, b"NOISE-FD1-IN-SEARCH\\n")
        return [Item("noisy", "noisy text about " + query)]


def build(name, config):
    return Noisy(name, config.timeout_s)
'''

SITECUSTOMIZE = """
from sources.registry import register_kind
register_kind("noisy", "noisy_kind")
"""


def stdio_config(tmp_path: Path) -> Path:
    config = {
        "routing": {
            "default_source": "kiwix",
            "keywords": {"noisy": ["noise"]},
            "semantic": {"enabled": False},
        },
        "trace": {"path": str(tmp_path / "traces.db")},
        "sources": {
            "kiwix": {
                "type": "zim",
                "paths": [str(tmp_path / "demo.zim")],
                "build_from": str(CORPUS),  # built at start, in a subprocess
            },
            "noisy": {"type": "noisy"},
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


async def test_stdio_speaks_only_protocol_on_stdout(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "noisy_kind.py").write_text(textwrap.dedent(NOISY_KIND))
    (hooks / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "search", "mcp", "--config", str(stdio_config(tmp_path))],
        cwd=str(ROOT),
        env={"PYTHONPATH": f"{hooks}:{ROOT}", "HF_HUB_OFFLINE": "1"},
    )
    errlog_path = tmp_path / "stderr.log"
    with errlog_path.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=120) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            hit = await client.call_tool("search", {"query": "photosynthesis", "explain": True})
            noisy = await client.call_tool("search", {"query": "make some noise"})
            trace_id = hit.structured_content["trace_id"]
            trace = await client.call_tool("get_trace", {"trace_id": trace_id})
    stderr = errlog_path.read_text()

    assert names == {"search", "get_trace"}
    assert not hit.is_error
    first = hit.structured_content["results"][0]
    assert first["source"] == "kiwix" and first["status"] == "ok"
    assert any("photosynthesis" in (i["title"] + i["text"]).lower() for i in first["items"])
    invoked = [e for e in hit.structured_content["explanation"] if e["step"] == "source_invoked"]
    assert [(e["source"], e["outcome"]) for e in invoked] == [("kiwix", "ok")]
    assert noisy.structured_content["results"][0]["items"][0]["title"] == "noisy"
    assert trace.structured_content["chain"] == hit.structured_content["explanation"]
    # Everything written to fd 1 or sys.stdout went to stderr, not into the protocol.
    for noise in ("NOISE-FD1-AT-START", "NOISE-PRINT-AT-START", "NOISE-FD1-IN-SEARCH"):
        assert noise in stderr
    assert (tmp_path / "demo.zim").exists()


def test_mcp_with_a_bad_config_exits_2_and_says_why(tmp_path: Path) -> None:
    import subprocess

    bad = tmp_path / "bad.yaml"
    bad.write_text("routing: {default_source: nowhere}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "search", "mcp", "--config", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "routing.default_source" in proc.stderr


def test_mcp_whose_source_cannot_start_exits_1_in_one_line(tmp_path: Path) -> None:
    """A ZIM that is not there (and no `build_from`): one line, as `search serve` says it,
    not a traceback; nothing on the protocol's stdout."""
    import subprocess

    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "routing": {"default_source": "kiwix", "semantic": {"enabled": False}},
                "trace": {"enabled": False},
                "sources": {"kiwix": {"type": "zim", "paths": [str(tmp_path / "absent.zim")]}},
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "search", "mcp", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.splitlines() == [
        f"search: mcp: start-up failed: ZimUnavailable: ZIM file not found: {tmp_path}/absent.zim"
    ]
