"""Secrets never leave: not in a response, an explanation, a stored trace, a log or /metrics.

Recognisable values are set (through `${ENV}` in the config, the way users set them) for
the Home Assistant token, a second HA token the server rejects, the LLM API key, the
Open-Meteo API key and the service's own bearer token. Requests then succeed and fail
on each of them, and everything the service emitted is searched for the values.

Home Assistant, the LLM server and Open-Meteo run here as loopback servers speaking their
wire formats (tests/support/faulty.py, chat_server.py, wire_servers.py); the HA and LLM
ones quote a rejected credential in their 401 body, as a hostile upstream could, so an
upstream error that travelled into our messages would be caught. The service runs once
in-process under uvicorn with every logger at DEBUG (caplog), and once as a
`python -m search serve` subprocess whose stderr is searched.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from search.config import parse_config
from tests.support.app import build_app, uvicorn_server
from tests.support.chat_server import ChatServer
from tests.support.faulty import HomeAssistantApi, ServerProcess
from tests.support.wire_servers import Fault, OpenMeteoServer

SECRETS = {
    "HA_TOKEN": "ha-5ecret-TOKEN-8d1f0c2a",
    "HA_STALE_TOKEN": "ha-5ecret-STALE-2b7e9941",
    "LLM_API_KEY": "sk-5ecret-LLMKEY-41a9c3d7",
    "OM_API_KEY": "om-5ecret-APIKEY-c0ffee12",
    "SEARCH_API_TOKEN": "api-5ecret-BEARER-77e0d2ab",
}
AUTH = {"Authorization": f"Bearer {SECRETS['SEARCH_API_TOKEN']}"}


def leaks(text: str | bytes) -> list[str]:
    """Which secrets (or their distinctive tails) occur in `text`."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    found = []
    for name, value in SECRETS.items():
        if value.encode() in data or value[-14:].encode() in data:
            found.append(name)
    return found


@dataclass
class Upstreams:
    ha: HomeAssistantApi
    llm: ChatServer
    forecast: OpenMeteoServer


@contextmanager
def upstreams() -> Iterator[Upstreams]:
    with ExitStack() as stack:
        ha = stack.enter_context(HomeAssistantApi(SECRETS["HA_TOKEN"]))
        llm = stack.enter_context(ChatServer('{"source": "kiwix"}', api_key=SECRETS["LLM_API_KEY"]))
        forecast = stack.enter_context(OpenMeteoServer())
        yield Upstreams(ha, llm, forecast)


def raw_config(up: Upstreams, zim: Path, trace_path: Path) -> dict[str, Any]:
    return {
        "server": {"api_token": "${SEARCH_API_TOKEN}"},
        "routing": {
            "default_source": "kiwix",
            "semantic": {"enabled": False},
            "shipped_routes": False,
            "keywords": {"ha": ["lights"], "ha_stale": ["garage"], "forecast": ["weather"]},
            "llm": {
                "base_url": f"{up.llm.url}/v1",
                "model": "tiny-router",
                "api_key": "${LLM_API_KEY}",
                "timeout_s": 5,
            },
        },
        "trace": {
            "enabled": True,
            "path": str(trace_path),
            "capture_results": True,
            "capture_prompts": True,
        },
        "sources": {
            "kiwix": {"type": "zim", "paths": [str(zim)], "description": "an encyclopedia"},
            "ha": {
                "type": "homeassistant",
                "url": up.ha.url,
                "token": "${HA_TOKEN}",
                "fallback": ["kiwix"],
                "description": "the house's devices",
            },
            "ha_stale": {
                "type": "homeassistant",
                "url": up.ha.url,
                "token": "${HA_STALE_TOKEN}",
                "fallback": ["kiwix"],
                "circuit_failures": 0,
            },
            "forecast": {
                "type": "open_meteo",
                "url": up.forecast.url,
                "latitude": 52.52,
                "longitude": 13.41,
                "api_key": "${OM_API_KEY}",
                "fallback": ["kiwix"],
            },
        },
    }


def exercise(base: str, up: Upstreams) -> tuple[list[str], list[dict[str, Any]]]:
    """Requests that succeed and fail on every credential; every text the service sent."""
    texts: list[str] = []
    bodies: list[dict[str, Any]] = []

    def keep(response: httpx.Response) -> httpx.Response:
        texts.append(response.text)
        texts.append(json.dumps(dict(response.headers)))
        return response

    with httpx.Client(base_url=base, headers=AUTH, timeout=30) as client:

        def search(query: str, **flags: Any) -> dict[str, Any]:
            response = keep(client.post("/search", json={"query": query, **flags}))
            assert response.status_code in (200, 502), response.text
            bodies.append(response.json())
            return bodies[-1]

        lights = search("are the kitchen lights on", explain=True)
        assert lights["results"][0]["source"] == "ha"
        assert "Kitchen Lights" in json.dumps(lights["results"])
        garage = search("is the garage door open", explain=True)  # HA rejects this token
        reasons = [e["reason"] for e in garage["explanation"] if e["step"] == "fallback"]
        assert reasons == ["unauthorized"], garage["explanation"]
        decided = search("who was marie curie", explain=True)
        assert any(e["step"] == "intent_llm" for e in decided["explanation"])
        # The LLM server now rejects the key and quotes it back, as OpenAI's error does.
        up.llm.set_fault(
            Fault.custom(
                401,
                {
                    "error": {
                        "message": f"Incorrect API key provided: {SECRETS['LLM_API_KEY']}.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                },
            )
        )
        echoed = httpx.post(
            f"{up.llm.url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            headers={"Authorization": f"Bearer {SECRETS['LLM_API_KEY']}"},
        )
        assert leaks(echoed.text) == ["LLM_API_KEY"]  # the grep would see it
        failed = search("who was alan turing", explain=True)
        assert any(e["step"] == "llm_error" for e in failed["explanation"]), failed
        up.llm.clear_faults()
        search("will it rain tomorrow, what does the weather say", explain=True)
        up.forecast.set_fault(Fault.status(401))
        refused = search("what is the weather tomorrow", explain=True)
        assert any(e.get("reason") == "unauthorized" for e in refused["explanation"])
        up.forecast.clear_faults()
        search("are the kitchen lights on and is the garage door open")
        search("who was isaac newton", dry_run=True, explain=True)

        for body in bodies:
            keep(client.get(f"/traces/{body['trace_id']}"))
        keep(client.get("/traces", params={"limit": 100}))
        metrics = keep(client.get("/metrics"))
        assert metrics.status_code == 200 and "search_source_calls" in metrics.text
        keep(client.get("/healthz"))
        keep(client.get("/openapi.json"))
        mcp = keep(
            client.post(
                "/mcp",
                headers={"Accept": "application/json, text/event-stream"},
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {
                        "name": "search",
                        "arguments": {"query": "is the garage door open", "explain": True},
                    },
                },
            )
        )
        assert mcp.status_code == 200 and "unauthorized" in mcp.text, mcp.text
        # The service's own token: wrong, missing, or sent where it does not belong.
        for headers in (
            {"Authorization": "Bearer wrong-token"},
            {"Authorization": ""},
            {"Authorization": SECRETS["SEARCH_API_TOKEN"]},
        ):
            response = keep(client.post("/search", json={"query": "x"}, headers=headers))
            assert response.status_code == 401
        keep(httpx.post(f"{base}/search", json={"query": "x"}, timeout=10))
    return texts, bodies


def stored_bytes(trace_path: Path) -> bytes:
    files = [p for p in trace_path.parent.glob(trace_path.name + "*") if p.is_file()]
    assert files, "the trace store wrote nothing"
    return b"".join(p.read_bytes() for p in files)


def stored_traces(trace_path: Path) -> int:
    with sqlite3.connect(f"file:{trace_path}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM traces").fetchone()[0])


def test_no_secret_in_responses_traces_logs_or_metrics_in_process(
    demo_zim: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    trace_path = tmp_path / "traces.db"
    with upstreams() as up:
        config = parse_config(raw_config(up, demo_zim, trace_path))
        assert config.routing.llm.api_key is not None
        assert config.routing.llm.api_key.get_secret_value() == SECRETS["LLM_API_KEY"]
        with uvicorn_server(build_app(config)) as base:
            texts, bodies = exercise(base, up)
        # Positive control: the credentials were really sent.
        assert up.ha.requests and up.llm.requests
    assert stored_traces(trace_path) >= len(bodies)
    assert b"kitchen lights" in stored_bytes(trace_path)  # the store holds real content
    logged = "\n".join(
        f"{r.name} {r.levelname} {r.getMessage()} {r.exc_text or ''} {r.args!r}"
        for r in caplog.records
    )
    assert "HTTP Request" in logged  # httpx's own DEBUG/INFO lines were captured
    report = {
        "responses": leaks("\n".join(texts)),
        "trace store": leaks(stored_bytes(trace_path)),
        "logs": leaks(logged),
        "config repr": leaks(repr(config) + str(config.model_dump())),
    }
    assert report == {k: [] for k in report}, report


def test_no_secret_in_a_server_process_stderr(demo_zim: Path, tmp_path: Path) -> None:
    trace_path = tmp_path / "traces.db"
    with upstreams() as up:
        server = ServerProcess(raw_config(up, demo_zim, trace_path), tmp_path, env=SECRETS)
        server.start(ready_url=f"{server.url}/healthz")
        try:
            texts, _ = exercise(server.url, up)
        finally:
            server.stop()
    stderr = server.stderr()
    assert "Application startup complete" in stderr  # the log really is this server's
    assert stored_traces(trace_path) > 0
    report = {
        "responses": leaks("\n".join(texts)),
        "stderr": leaks(stderr),
        "trace store": leaks(stored_bytes(trace_path)),
        "config file": leaks(server.config_path.read_text()),
    }
    assert report == {k: [] for k in report}, report
