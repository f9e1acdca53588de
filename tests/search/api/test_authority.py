"""Only the household acts or teaches: commands and labels from another host need the token.

The other host is real: a network namespace on this machine joined by a veth pair
(tests/support/netns.py), whose client speaks HTTP to the real uvicorn server bound to
this machine's end. The acting source is the scripted kind, whose `acted` list is the
witness that nothing was carried out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from search.api.app import create_app
from search.api.authority import client_identity, is_loopback, open_to_network_warning
from search.config import Config, parse_config
from search.service import Service
from tests.support.app import uvicorn_server
from tests.support.netns import OtherHost, other_host

COMMAND = "turn on the lights in the hall"
TOKEN = "s3cret-household-token"


@pytest.fixture(scope="module")
def lan() -> Iterator[OtherHost]:
    with other_host() as host:
        yield host


def config(tmp_path: Path, host: str, token: str | None = None) -> Config:
    return parse_config(
        {
            "server": {"host": host, **({"api_token": token} if token else {})},
            "routing": {
                "default_source": "kiwix",
                "keywords": {"ha": ["lights"]},
                "semantic": {"enabled": False},
            },
            "sources": {
                "kiwix": {"type": "scripted"},
                "ha": {"type": "scripted", "control_prefix": "turn on", "allow_control": True},
            },
            "trace": {"path": str(tmp_path / "traces.db")},
        }
    )


def from_other_host(
    lan: OtherHost, base: str, token: str | None = None, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    """A command, a read and a label POST from the namespace; their statuses and bodies."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers.update(extra or {})
    code = f"""
import json, httpx
c = httpx.Client(base_url={base!r}, timeout=30, headers={headers!r}, trust_env=False)
command = c.post("/search", json={{"query": {COMMAND!r}}})
read = c.post("/search", json={{"query": "history of rome"}})
label = c.post("/traces/" + read.json().get("trace_id", "x") + "/labels",
               json={{"part": "0", "route": "ha"}}) if read.status_code == 200 else read
print(json.dumps({{"command": [command.status_code, command.json()],
                  "read": [read.status_code, read.json()],
                  "label": [label.status_code, label.json()]}}))
"""
    done = lan.python(code)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def acted(service: Service) -> list[Any]:
    return list(service.sources["ha"].acted)  # type: ignore[attr-defined]


def test_without_a_token_another_host_reads_but_never_acts_or_labels(
    tmp_path: Path, lan: OtherHost
) -> None:
    cfg = config(tmp_path, lan.server_ip)
    service = Service(cfg)
    with uvicorn_server(create_app(cfg, service), host=lan.server_ip) as base:
        seen = from_other_host(lan, base)
    status, body = seen["command"]
    assert status == 200
    (result,) = body["results"]
    assert (result["status"], result["withheld"]["reason"]) == ("withheld", "not_authorized")
    assert acted(service) == []
    assert seen["read"][0] == 200 and seen["read"][1]["results"][0]["status"] == "ok"
    assert seen["label"][0] == 403
    assert seen["label"][1]["error"]["type"] == "not_authorized"


def test_with_the_token_another_host_acts_and_labels(tmp_path: Path, lan: OtherHost) -> None:
    cfg = config(tmp_path, lan.server_ip, TOKEN)
    service = Service(cfg)
    with uvicorn_server(create_app(cfg, service), host=lan.server_ip) as base:
        seen = from_other_host(lan, base, TOKEN)
        refused = from_other_host(lan, base)
    assert seen["command"][1]["results"][0]["status"] == "ok"
    assert [c.target for c in acted(service)] == ["the lights in the hall"]
    assert seen["label"][0] == 201
    assert refused["command"][0] == 401 and refused["label"][0] == 401


async def test_a_loopback_client_without_a_token_may_act(tmp_path: Path) -> None:
    cfg = config(tmp_path, "127.0.0.1")
    service = Service(cfg)
    with uvicorn_server(create_app(cfg, service)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            response = await client.post("/search", json={"query": COMMAND})
    assert response.json()["results"][0]["status"] == "ok"
    assert len(acted(service)) == 1


# What a reverse proxy on this machine adds to a request it relays: Caddy and Traefik send
# X-Forwarded-For/-Proto/-Host, Apache X-Forwarded-For/-Host/-Server, HAProxy `Forwarded`
# (option forwarded), nginx set-ups often X-Real-IP, Squid and Varnish `Via`.
RELAYED = [
    {"X-Forwarded-For": "192.0.2.7"},
    {"X-Forwarded-Proto": "https"},
    {"X-Forwarded-Host": "search.home.arpa"},
    {"Forwarded": "for=192.0.2.7;proto=https"},
    {"X-Real-IP": "192.0.2.7"},
    {"Via": "1.1 caddy"},
]


@pytest.mark.parametrize("headers", RELAYED, ids=lambda h: next(iter(h)))
async def test_a_request_a_proxy_on_this_machine_relayed_never_acts_or_labels(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    """Behind a reverse proxy on this machine every client's connection comes from
    127.0.0.1; the proxy's headers say someone else asked, so without the token it reads
    only (uvicorn as `search serve` runs it: it trusts X-Forwarded-For from 127.0.0.1)."""
    cfg = config(tmp_path, "127.0.0.1")
    service = Service(cfg)
    with uvicorn_server(create_app(cfg, service)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30, headers=headers) as client:
            command = await client.post("/search", json={"query": COMMAND, "explain": True})
            read = await client.post("/search", json={"query": "history of rome"})
            label = await client.post(
                f"/traces/{read.json()['trace_id']}/labels", json={"part": "0", "route": "ha"}
            )
    (result,) = command.json()["results"]
    assert (result["status"], result["withheld"]["reason"]) == ("withheld", "not_authorized")
    withheld = [e for e in command.json()["explanation"] if e["step"] == "control_withheld"]
    assert [e["reason"] for e in withheld] == ["not_authorized"]
    assert acted(service) == []
    assert read.json()["results"][0]["status"] == "ok"
    assert (label.status_code, label.json()["error"]["type"]) == (403, "not_authorized")


def test_a_remote_client_posing_as_a_proxy_for_this_machine_never_acts(
    tmp_path: Path, lan: OtherHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With uvicorn told to trust every proxy (FORWARDED_ALLOW_IPS=*, a common container
    set-up), another host that claims to relay 127.0.0.1 is taken for 127.0.0.1 by
    uvicorn, and still may not act: the claim itself says a proxy relayed it."""
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")
    cfg = config(tmp_path, lan.server_ip)
    service = Service(cfg)
    with uvicorn_server(create_app(cfg, service), host=lan.server_ip) as base:
        seen = from_other_host(lan, base, extra={"X-Forwarded-For": "127.0.0.1"})
    status, body = seen["command"]
    assert status == 200
    (result,) = body["results"]
    assert (result["status"], result["withheld"]["reason"]) == ("withheld", "not_authorized")
    assert acted(service) == []
    assert seen["label"][0] == 403


def test_serving_beyond_loopback_without_a_token_says_so(tmp_path: Path) -> None:
    assert open_to_network_warning(config(tmp_path, "127.0.0.1")) is None
    assert open_to_network_warning(config(tmp_path, "0.0.0.0", TOKEN)) is None
    warning = open_to_network_warning(config(tmp_path, "0.0.0.0"))
    assert warning is not None and "without server.api_token" in warning


@pytest.mark.parametrize(
    ("host", "loopback", "identity"),
    [
        ("127.0.0.1", True, "localhost"),
        ("127.5.6.7", True, "localhost"),
        ("::1", True, "localhost"),
        ("::ffff:127.0.0.1", True, "localhost"),  # IPv4 loopback through a "::" socket
        ("192.0.2.10", False, "192.0.2.10"),
        ("::ffff:192.0.2.10", False, "192.0.2.10"),  # the same client, either way
        ("2001:DB8:0:0::1", False, "2001:db8::1"),  # one spelling of one address
        ("fe80::1%eth0", False, "fe80::1"),
        ("not an address", False, "not an address"),
        (None, False, None),
    ],
)
def test_a_client_is_one_identity_however_its_address_is_spelled(
    host: str | None, loopback: bool, identity: str | None
) -> None:
    """Acting is this machine's (fail closed on anything unreadable), and a conversation
    is one client's whether it came over 127.0.0.1 or ::1, IPv4 or IPv4-in-IPv6."""
    assert is_loopback(host) is loopback
    assert client_identity(host) == identity
