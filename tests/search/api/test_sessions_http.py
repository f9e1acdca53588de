"""A conversation over HTTP is the client's own: the session store is keyed by the peer
address the server sees, so a client that learns or guesses another's `session_id` meets
an empty conversation of its own.

Real clients on real addresses: the real uvicorn server, clients bound to two loopback
addresses (one client: this machine), and a device on another host (a network namespace
joined by a veth pair, tests/support/netns.py). Scripted sources, keyword rules only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from search.api.app import create_app
from search.config import Config, parse_config
from tests.support.app import uvicorn_server
from tests.support.netns import OtherHost, other_host

SID = "01JAB7K3V9Q2R4T6Y8W0Z1X3C6"


def config(tmp_path: Path, host: str = "127.0.0.1", **trace: Any) -> Config:
    return parse_config(
        {
            "server": {"host": host},
            "routing": {
                "default_source": "kiwix",
                "shipped_routes": False,
                "keywords": {"kiwix": ["tell me about"]},
                "semantic": {"enabled": False},
            },
            "sources": {"kiwix": {"type": "scripted"}},
            "trace": {"path": str(tmp_path / "traces.db"), **trace},
        }
    )


def ask(http: httpx.Client, query: str, **body: Any) -> dict[str, Any]:
    answer = http.post("/search", json={"query": query, "session_id": SID, **body})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def client(base: str, address: str) -> httpx.Client:
    """A client whose connections come from `address`."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=base, transport=transport, timeout=60, trust_env=False)


def test_this_machine_is_one_client_whatever_loopback_address_it_comes_from(
    tmp_path: Path,
) -> None:
    """Connections from 127.0.0.1 and from 127.0.0.2 (as from ::1, or from
    ::ffff:127.0.0.1 through a dual-stack socket: `client_identity`) are this machine's,
    the one client that may also act: its conversation goes on either way."""
    with (
        uvicorn_server(create_app(config(tmp_path))) as base,
        client(base, "127.0.0.1") as first,
        client(base, "127.0.0.2") as second,
    ):
        ask(first, "tell me about the eiffel tower")
        follow = ask(second, "how tall is it", explain=True)
        listed = first.get("/traces", params={"session": SID}).json()
    assert follow["results"][0]["rewritten"] == "how tall is the eiffel tower"
    # the trace store lists the session by the id the client sent: both turns
    assert listed["total"] == 2
    assert {t["session_id"] for t in listed["traces"]} == {SID}


@pytest.fixture(scope="module")
def lan() -> Iterator[OtherHost]:
    with other_host() as host:
        yield host


def test_a_device_on_the_network_cannot_read_a_household_conversation(
    tmp_path: Path, lan: OtherHost
) -> None:
    """The review's case: a loopback client (say the Assist agent) talks, with
    `trace.redact` on; a device elsewhere on the network sends its session_id."""
    app = create_app(config(tmp_path, host="0.0.0.0", redact=True))
    with uvicorn_server(app, host="0.0.0.0") as base:
        port = base.rsplit(":", 1)[1]
        home_url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=home_url, timeout=60, trust_env=False) as victim:
            ask(victim, "tell me about the side effects of fluoxetine")
            code = f"""
import json, httpx
c = httpx.Client(base_url="http://{lan.server_ip}:{port}", timeout=30, trust_env=False)
body = {{"session_id": {SID!r}, "explain": True}}
peek = c.post("/search", json={{"query": "and its price", "dry_run": True, **body}})
plant = c.post("/search", json={{"query": "tell me about the statue of liberty", **body}})
print(json.dumps([peek.json(), plant.status_code]))
"""
            done = lan.python(code)
            assert done.returncode == 0, done.stderr
            peek, planted = json.loads(done.stdout)
            follow = ask(victim, "how tall is it", explain=True)
    assert planted == 200
    assert "fluoxetine" not in json.dumps(peek)
    assert [e for e in peek["explanation"] if e["step"] in ("rewritten", "intent_session")] == []
    [rewritten] = [e for e in follow["explanation"] if e["step"] == "rewritten"]
    assert rewritten["previous_query"] == "tell me about the side effects of fluoxetine"
    assert "liberty" not in json.dumps(follow)
