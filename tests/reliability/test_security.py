"""Binding and the bearer token, checked on real sockets.

- `search serve` without `--host` listens on 127.0.0.1 only: the listening socket in
  /proc/net/tcp is 127.0.0.1:<port>, nothing in /proc/net/tcp6, and the port refuses
  connections on the machine's other local addresses (when it has one; a plain socket
  bound to 0.0.0.0 on the same address is the positive control).
- With `server.api_token` set, every route the app has (the MCP endpoint included)
  answers 401 without the exact bearer token; `/healthz` and the trace viewer's static
  files (no data in them) answer without it. Only the exact token passes: every prefix,
  extension and one-character change of it is refused; the scheme is case-insensitive
  (RFC 7235: `bearer` is `Bearer`).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from search.config import ServerConfig, parse_config
from tests.support.app import build_app, uvicorn_server
from tests.support.faulty import REPO_ROOT, ServerProcess

TOKEN = "tok-Zq81-loopback-only"
# The trace viewer's static shell (HTML/JS/CSS) is served without the token, by design of
# search/api/middleware.py: it holds no data, and every fetch it makes needs the token. This
# is narrower than "every route except /healthz"; the test pins it to exactly these files.
STATIC_OPEN = frozenset({"/ui", "/ui/", "/ui/app.js", "/ui/style.css"})


def listening_sockets(path: str, port: int) -> list[str]:
    """Local addresses (hex, as the kernel writes them) listening on `port`."""
    found = []
    for line in Path(path).read_text().splitlines()[1:]:
        fields = line.split()
        address, state = fields[1], fields[3]
        if state == "0A" and int(address.rsplit(":", 1)[1], 16) == port:
            found.append(address.rsplit(":", 1)[0])
    return found


def other_local_ipv4() -> list[str]:
    """This machine's non-loopback IPv4 addresses, from the kernel's routing trie."""
    lines = Path("/proc/net/fib_trie").read_text().splitlines()
    found = {
        prev.split()[-1]
        for prev, line in zip(lines, lines[1:], strict=False)
        if "/32 host LOCAL" in line
    }
    return sorted(a for a in found if not a.startswith("127."))


def refuses(address: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((address, port)) != 0


def test_the_default_host_is_loopback() -> None:
    assert ServerConfig().host == "127.0.0.1"
    assert (
        parse_config(
            {
                "server": {"port": 9000},
                "routing": {"default_source": "kiwix"},
                "sources": {"kiwix": {"type": "zim", "paths": ["x.zim"]}},
            },
        ).server.host
        == "127.0.0.1"
    )
    shipped = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())
    assert shipped.get("server", {}).get("host", "127.0.0.1") == "127.0.0.1"


def test_serve_without_host_listens_on_loopback_only(demo_zim: Path, tmp_path: Path) -> None:
    config = {
        "routing": {"default_source": "kiwix", "semantic": {"enabled": False}},
        "trace": {"enabled": False},
        "sources": {"kiwix": {"type": "zim", "paths": [str(demo_zim)]}},
    }
    with ServerProcess(config, tmp_path) as server:
        assert "--host" not in server.args
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
        assert listening_sockets("/proc/net/tcp", server.port) == ["0100007F"]  # 127.0.0.1
        assert listening_sockets("/proc/net/tcp6", server.port) == []
        for address in other_local_ipv4():
            assert refuses(address, server.port), f"reachable on {address}:{server.port}"
            with socket.socket() as wildcard:  # control: that address reaches local sockets
                wildcard.bind(("0.0.0.0", 0))
                wildcard.listen()
                assert not refuses(address, wildcard.getsockname()[1])


# --- the bearer token -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(demo_zim: Path) -> Any:
    config = parse_config(
        {
            "server": {"api_token": TOKEN},
            "routing": {"default_source": "kiwix", "semantic": {"enabled": False}},
            "trace": {"enabled": False},
            "sources": {"kiwix": {"type": "zim", "paths": [str(demo_zim)]}},
        }
    )
    app = build_app(config)
    with uvicorn_server(app) as base:
        yield app, base


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def every_route(app: Any) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, path parameters filled in."""
    pairs = []
    for route in app.routes:
        path = route.path.replace("{trace_id}", "0" * 32)
        methods = sorted(getattr(route, "methods", None) or {"POST"})
        pairs.extend((m, path) for m in methods if m != "HEAD")
    return pairs


def test_every_route_but_healthz_needs_the_token(guarded: Any) -> None:
    app, base = guarded
    routes = every_route(app)
    paths = {p for _, p in routes}
    assert {"/search", "/healthz", "/openapi.json", "/metrics", "/traces", "/mcp"} <= paths
    wrong = [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
        {"X-Api-Token": TOKEN},
    ]
    with httpx.Client(base_url=base, timeout=30) as client:
        for method, path in routes:
            for headers in wrong:
                response = client.request(method, path, headers=headers, json={"query": "x"})
                if path == "/healthz":
                    assert response.status_code == 200, (method, path, headers)
                    continue
                if path in STATIC_OPEN:
                    with_token = client.request(method, path, headers=AUTH)
                    assert response.status_code == with_token.status_code < 400, path
                    assert response.content == with_token.content
                    continue
                assert response.status_code == 401, (method, path, headers, response.text)
                assert response.json()["error"]["type"] == "unauthorized"
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert TOKEN not in response.text
            allowed = client.request(
                method,
                path,
                json={"query": "who was marie curie"},
                headers={
                    "Authorization": f"Bearer {TOKEN}",
                    "Accept": "application/json, text/event-stream",
                },
            )
            assert allowed.status_code != 401, (method, path)
        # Not a way around it: the token in the URL, or a path that merely looks open.
        assert client.post(f"/search?access_token={TOKEN}", json={"query": "x"}).status_code == 401
        for path in ("/healthz/", "/healthz/../search", "/HEALTHZ", "/no-such-route"):
            assert client.get(path).status_code == 401, path


def wrong_tokens() -> list[str]:
    """Near misses of every length: each prefix, the token with one more character, each
    single-character change, other case, and padding the server must not strip."""
    near = [TOKEN[:n] for n in range(len(TOKEN))]
    near += [TOKEN + "x", TOKEN + TOKEN, " " + TOKEN, TOKEN + " x", TOKEN.upper()]
    near += [
        TOKEN[:i] + ("A" if TOKEN[i] != "A" else "B") + TOKEN[i + 1 :] for i in range(len(TOKEN))
    ]
    return near


def test_only_the_exact_token_is_accepted(guarded: Any) -> None:
    _, base = guarded
    with httpx.Client(base_url=base, timeout=10) as client:
        for wrong in wrong_tokens():
            for header in (f"Bearer {wrong}", f"bearer {wrong}", wrong or "x", f"Basic {TOKEN}"):
                if header != header.strip():
                    continue  # an HTTP client cannot send that (no header value ends so)
                response = client.get("/metrics", headers={"Authorization": header})
                assert response.status_code == 401, header
                assert TOKEN not in response.text
        assert client.get("/metrics").status_code == 401  # no header at all
        # The scheme is case-insensitive (RFC 7235), the token is not.
        for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
            response = client.get("/metrics", headers={"Authorization": f"{scheme} {TOKEN}"})
            assert response.status_code == 200, scheme
        for scheme in ("Bearer:", "Bearers", "Basic", "Bear"):
            response = client.get("/metrics", headers={"Authorization": f"{scheme} {TOKEN}"})
            assert response.status_code == 401, scheme
