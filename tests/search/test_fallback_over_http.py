"""Fallback with real parts: SearXNG's wire format on loopback failing over to libzim.

SearXNG cannot run here, so `SearxngServer` replays its documented JSON API on
127.0.0.1 (tests/support/wire_servers.py) and injects each fault; kiwix is the real
libzim source over the real demo ZIM. Requests go through uvicorn over real HTTP.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from search.config import parse_config
from tests.support.app import build_app, uvicorn_server
from tests.support.wire_servers import Fault, SearxngServer, closed_port_url, searxng_result


def config_for(web_url: str, demo_zim: Path, **web: object):
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "keywords": {"web": ["news"]},
                "semantic": {"enabled": False},
            },
            "trace": {"enabled": False},
            "sources": {
                "kiwix": {"type": "zim", "paths": [str(demo_zim)]},
                "web": {
                    "type": "searxng",
                    "url": web_url,
                    "timeout_s": 0.5,
                    "fallback": ["kiwix"],
                    **web,
                },
            },
        }
    )


def ask(base: str, query: str) -> dict:
    response = httpx.post(f"{base}/search", json={"query": query, "explain": True}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize(
    ("fault", "outcome", "reason"),
    [
        (Fault.status(500), "error", "server_error"),
        (Fault.status(403), "error", "unauthorized"),
        (Fault.not_json(), "error", "malformed_response"),
        (Fault.delay(2.0), "timeout", "timeout"),
        (Fault.empty(), "empty", "empty"),
    ],
)
def test_web_faults_fall_back_to_the_encyclopedia(
    demo_zim: Path, fault: Fault, outcome: str, reason: str
) -> None:
    with SearxngServer() as web:
        web.set_fault(fault)
        with uvicorn_server(build_app(config_for(web.url, demo_zim))) as base:
            body = ask(base, "news about the statue of liberty")
    chain = body["explanation"]
    invoked = [(e["source"], e["outcome"]) for e in chain if e["step"] == "source_invoked"]
    assert invoked == [("web", outcome), ("kiwix", "ok")]
    (fallback,) = [e for e in chain if e["step"] == "fallback"]
    assert (fallback["from_source"], fallback["to_source"], fallback["reason"]) == (
        "web",
        "kiwix",
        reason,
    )
    assert body["fallback_occurred"] is True
    (part,) = body["results"]
    assert part["source"] == "kiwix"
    assert part["items"][0]["title"] == "Statue of Liberty"
    web_call = next(e for e in chain if e["step"] == "source_invoked" and e["source"] == "web")
    if outcome == "timeout":
        assert 400 <= web_call["elapsed_ms"] < 2000


def test_a_refused_connection_falls_back(demo_zim: Path) -> None:
    with uvicorn_server(build_app(config_for(closed_port_url(), demo_zim))) as base:
        body = ask(base, "latest news on mount everest")
    (fallback,) = [e for e in body["explanation"] if e["step"] == "fallback"]
    assert fallback["reason"] == "connection_refused"
    assert body["results"][0]["items"][0]["title"] == "Mount Everest"


def test_a_healthy_web_answers_without_fallback(demo_zim: Path) -> None:
    with SearxngServer() as web:
        web.results = [searxng_result("Tide tables", "https://example.org/tides", "High tide")]
        with uvicorn_server(build_app(config_for(web.url, demo_zim))) as base:
            body = ask(base, "news about tides")
    assert body["fallback_occurred"] is False
    assert body["results"][0]["source"] == "web"
    assert body["results"][0]["items"][0]["url"] == "https://example.org/tides"
