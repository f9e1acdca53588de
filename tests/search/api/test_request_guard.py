"""Host, Origin and Content-Type checks on every route, over real HTTP on loopback.

A cross-site page can POST `text/plain` (an HTML form) or `no-cors` fetch to the router,
and a DNS-rebinding page reaches it under its own name; both are refused before any route
runs. The scripted `ha` source counts its calls, so "refused" also means "nothing ran".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from search.api.app import create_app
from search.config import parse_config
from tests.support.app import uvicorn_server

CONTROL = b'{"query": "turn on the kitchen lights"}'


def guard_config(tmp: Path, **server: Any):
    return parse_config(
        {
            "server": server,
            "routing": {
                "default_source": "kiwix",
                "keywords": {"ha": ["lights"]},
                "semantic": {"enabled": False},
            },
            "cache": {"result_ttl_s": 0},  # every accepted request reaches the source
            "trace": {"path": str(tmp / "traces.db")},
            "sources": {"kiwix": {"type": "scripted"}, "ha": {"type": "scripted"}},
        }
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    tmp = tmp_path_factory.mktemp("guard")
    config = guard_config(
        tmp,
        allowed_hosts=["search.home.arpa", "proxy.lan:8443"],
        allowed_origins=["https://search.home.arpa"],
    )
    app = create_app(config)
    with uvicorn_server(app) as base:
        yield app, base


def ha_calls(app: Any) -> int:
    return int(app.state.service.sources["ha"].calls)


def test_a_text_plain_body_is_refused_before_the_route_reads_it(served: tuple[Any, str]) -> None:
    app, base = served
    before = ha_calls(app)
    with httpx.Client(base_url=base, timeout=30) as http:
        for content_type in (
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            None,
        ):
            headers = {"Content-Type": content_type} if content_type else {}
            response = http.post("/search", content=CONTROL, headers=headers)
            assert response.status_code == 415, (content_type, response.text)
            error = response.json()["error"]
            assert error["field"] == "Content-Type" and "application/json" in error["message"]
        # The same body as JSON is answered, with a charset parameter or without.
        ok = http.post(
            "/search", content=CONTROL, headers={"Content-Type": "Application/JSON; charset=utf-8"}
        )
        assert ok.status_code == 200
    assert ha_calls(app) == before + 1


def test_a_foreign_origin_is_refused_on_every_route(served: tuple[Any, str]) -> None:
    app, base = served
    port = base.rsplit(":", 1)[1]
    before = ha_calls(app)
    foreign = [
        "http://evil.example",
        "null",
        f"http://localhost.evil.example:{port}",
        f"https://127.0.0.1:{port}",
        f"http://127.0.0.1:{int(port) + 1}",
        "http://search.home.arpa",
    ]  # listed with https only
    with httpx.Client(base_url=base, timeout=30) as http:
        for origin in foreign:
            for method, path in (
                ("POST", "/search"),
                ("GET", "/traces"),
                ("GET", "/healthz"),
                ("GET", "/metrics"),
                ("GET", "/ui"),
                ("POST", "/mcp"),
            ):
                response = http.request(
                    method,
                    path,
                    content=CONTROL,
                    headers={"Origin": origin, "Content-Type": "application/json"},
                )
                assert response.status_code == 403, (origin, path)
                assert response.json()["error"]["field"] == "Origin"
        # Its own origin (what the /ui page sends), and a listed one, are let through.
        for origin in (base, f"http://localhost:{port}", "https://search.home.arpa"):
            host = {"Host": "localhost:" + port} if "localhost" in origin else {}
            response = http.post(
                "/search",
                content=CONTROL,
                headers={"Origin": origin, "Content-Type": "application/json", **host},
            )
            assert response.status_code == 200, (origin, response.text)
    assert ha_calls(app) == before + 3


def test_a_rebound_host_cannot_read_the_traces(served: tuple[Any, str]) -> None:
    _, base = served
    port = base.rsplit(":", 1)[1]
    with httpx.Client(base_url=base, timeout=30) as http:
        assert http.post("/search", json={"query": "tell me about tides"}).status_code == 200
        for host in (
            "evil.example",
            f"evil.example:{port}",
            f"127.0.0.1.evil.example:{port}",
            f"localhost:{int(port) + 1}",
            "proxy.lan",
            "proxy.lan:8444",
            "a b",
            "",
        ):
            for path in (
                "/traces",
                "/traces/" + "0" * 32,
                "/healthz",
                "/ui/app.js",
                "/openapi.json",
                "/metrics",
                "/no-such-route",
            ):
                response = http.get(path, headers={"Host": host})
                assert response.status_code == 403, (host, path, response.status_code)
                body = response.json()
                assert body["error"]["field"] == "Host" and "traces" not in body
        for host in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            "localhost",
            f"[::1]:{port}",
            "search.home.arpa",
            f"SEARCH.home.arpa:{port}",
            "proxy.lan:8443",
        ):
            response = http.get("/traces", headers={"Host": host})
            assert response.status_code == 200, (host, response.text)
            assert response.json()["total"] >= 1


def test_the_token_is_asked_for_only_after_host_and_origin(tmp_path: Path) -> None:
    config = guard_config(tmp_path, api_token="guard-tok-8812")
    with uvicorn_server(create_app(config)) as base, httpx.Client(base_url=base) as http:
        assert http.get("/traces", headers={"Host": "evil.example"}).status_code == 403
        assert http.get("/traces").status_code == 401
        authed = {"Authorization": "Bearer guard-tok-8812"}
        assert http.get("/traces", headers=authed).status_code == 200
        refused = http.post(
            "/search", content=CONTROL, headers={**authed, "Content-Type": "text/plain"}
        )
        assert refused.status_code == 415


def test_allowed_hosts_and_origins_are_validated_at_start_up(tmp_path: Path) -> None:
    from search.config import ConfigError

    with pytest.raises(ConfigError, match="server.allowed_hosts"):
        guard_config(tmp_path, allowed_hosts=["http://x.example"])
    with pytest.raises(ConfigError, match="server.allowed_origins"):
        guard_config(tmp_path, allowed_origins=["https://x.example/path"])
