"""`search doctor` and `/healthz` against real services: a real Home Assistant, the
encyclopedia ZIM, a real kiwix-serve, a chat-completions server speaking OpenAI's wire
format, and a source whose address nothing listens on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from search.cli import main
from search.config import parse_config
from search.doctor import diagnose
from search.observability.health import HealthCache
from sources.base import Item, Source
from tests.support import homeassistant as ha_harness
from tests.support.app import asgi_client, build_app
from tests.support.chat_server import ChatServer
from tests.support.homeassistant import HA_VERSION, HomeAssistant
from tests.support.kiwix_serve import KiwixServe, available
from tests.support.require import require_service
from tests.support.wire_servers import closed_port_url
from tests.support.zim import CORPUS, ensure_zim

home_assistant = ha_harness.home_assistant


def config_data(demo_zim: Path, **sources: dict[str, Any]) -> dict[str, Any]:
    return {
        "routing": {
            "default_source": "kiwix",
            "shipped_routes": False,
            "semantic": {"enabled": False},
        },
        "trace": {"enabled": False},
        "sources": {"kiwix": {"type": "zim", "paths": [str(demo_zim)]}, **sources},
    }


DOWN_WEB = {"type": "searxng", "url": closed_port_url(), "timeout_s": 2}
OFF_HA = {"type": "homeassistant", "enabled": False, "url": "http://127.0.0.1:9", "token": "x"}


def doctor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], *extra: str
) -> tuple[int, str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["doctor", "--config", str(path), *extra])
    return code, capsys.readouterr().out


def by_name(findings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in findings}


def test_a_down_source_fails_the_doctor_and_a_disabled_one_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], demo_zim: Path
) -> None:
    code, out = doctor(tmp_path, capsys, config_data(demo_zim, web=DOWN_WEB, ha=OFF_HA), "--json")
    assert code == 1
    found = by_name(json.loads(out))
    assert found["kiwix"]["status"] == "ok" and found["kiwix"]["reachable"] is True
    assert found["kiwix"]["sample"].startswith("ok, ")
    assert found["web"]["status"] == "down" and found["web"]["reachable"] is False
    assert found["web"]["sample"] == "connection_refused"
    assert found["ha"]["status"] == "disabled"
    assert found["llm"]["status"] == "not configured"

    code, out = doctor(tmp_path, capsys, config_data(demo_zim, ha=OFF_HA))
    assert code == 0  # only a disabled source is "missing": not a failure
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["source", "type", "status", "reachable"]
    assert any(row.split()[:3] == ["kiwix", "zim", "ok"] for row in rows)


def test_the_doctor_says_who_answers_a_down_sources_questions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], demo_zim: Path
) -> None:
    """A fallback stands in for its own source only: `archive -> web` with web down gets
    no answer even though web falls back to kiwix, and the doctor says so, per source."""
    data = config_data(
        demo_zim,
        web={**DOWN_WEB, "fallback": ["kiwix"]},
        archive={**DOWN_WEB, "fallback": ["web"]},
        news={**DOWN_WEB},
    )
    code, out = doctor(tmp_path, capsys, data, "--json")
    assert code == 1
    found = by_name(json.loads(out))
    assert found["web"]["covered_by"] == "kiwix"
    assert found["archive"]["covered_by"] is None and found["news"]["covered_by"] is None
    assert found["kiwix"]["covered_by"] is None  # up: nothing to stand in for

    code, out = doctor(tmp_path, capsys, data)
    lines = out.splitlines()
    assert (
        "web is down: kiwix answers its questions meanwhile "
        "(an offline snapshot: its answers may be out of date)"
    ) in lines
    assert (
        "archive is down, and none of the sources it falls back to (web) is up: "
        "its questions get no answer"
    ) in lines
    assert "news is down and has no fallback: its questions get no answer" in lines


def test_a_real_home_assistant_reports_its_version_and_accepts_the_token(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    demo_zim: Path,
    home_assistant: HomeAssistant,
) -> None:
    ha = {
        "type": "homeassistant",
        "url": home_assistant.url,
        "token": home_assistant.token,
        "timeout_s": 10,
    }
    code, out = doctor(tmp_path, capsys, config_data(demo_zim, ha=ha), "--json")
    assert code == 0, out
    found = by_name(json.loads(out))["ha"]
    assert found["status"] == "ok" and found["reachable"] is True
    assert found["version"] == HA_VERSION and found["auth"] == "ok"
    assert found["sample"].startswith("ok, ") and found["sample_ms"] > 0


def test_a_wrong_token_is_reported_refused_without_showing_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    demo_zim: Path,
    home_assistant: HomeAssistant,
) -> None:
    wrong = "not-the-token-" + "z" * 20
    ha = {"type": "homeassistant", "url": home_assistant.url, "token": wrong, "timeout_s": 10}
    code, out = doctor(tmp_path, capsys, config_data(demo_zim, ha=ha))
    assert code == 1
    (row,) = [line for line in out.splitlines() if line.split()[:2] == ["ha", "homeassistant"]]
    assert row.split()[2:4] == ["down", "yes"]  # reachable, but refused
    assert "refused" in row.split()
    assert wrong not in out


def test_a_real_kiwix_serve_is_reachable_and_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], demo_zim: Path
) -> None:
    require_service("kiwix-serve", available(), "kiwix-tools is not installed")
    zim = ensure_zim(CORPUS, tmp_path / "corpus.zim")
    with KiwixServe([zim]) as server:
        entry = {"type": "kiwix_serve", "url": server.url, "books": [zim.stem]}
        code, out = doctor(tmp_path, capsys, config_data(demo_zim, library=entry), "--json")
    assert code == 0, out
    found = by_name(json.loads(out))["library"]
    assert found["status"] == "ok" and found["reachable"] is True
    assert found["sample"].startswith("ok, ")


def test_the_llm_is_asked_one_routing_question(demo_zim: Path) -> None:
    with ChatServer(reply='{"source": "kiwix"}', api_key="sk-right") as chat:
        good = {"base_url": chat.base_url, "model": "test", "api_key": "sk-right"}
        bad = {**good, "api_key": "sk-wrong"}
        findings = {}
        for label, llm in (("good", good), ("bad", bad)):
            data = config_data(demo_zim)
            data["routing"]["llm"] = llm
            findings[label] = by_name(
                [f.to_dict() for f in asyncio.run(diagnose(parse_config(data)))]
            )["llm"]
    assert findings["good"]["status"] == "ok"
    assert findings["good"]["sample"] == "ok, routed to kiwix"
    assert findings["good"]["auth"] == "ok" and findings["good"]["version"] == "test"
    assert findings["bad"]["status"] == "down" and findings["bad"]["auth"] == "refused"


def test_a_configured_llm_that_does_not_answer_fails_the_doctor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], demo_zim: Path
) -> None:
    """Exit 1 and the row says why: every unsure part would pass over it to the default."""
    data = config_data(demo_zim)
    data["routing"]["llm"] = {"base_url": closed_port_url(), "model": "m", "timeout_s": 2}
    code, out = doctor(tmp_path, capsys, data, "--json")
    found = by_name(json.loads(out))
    assert code == 1, out
    assert found["llm"]["status"] == "down" and found["llm"]["reachable"] is False
    assert found["kiwix"]["status"] == "ok"


async def test_healthz_lists_each_source_with_its_reachability(demo_zim: Path) -> None:
    config = parse_config(config_data(demo_zim, web=DOWN_WEB, ha=OFF_HA))
    async with asgi_client(build_app(config)) as client:
        response = await client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["sources"]["kiwix"] == {
        "type": "zim",
        "enabled": True,
        "reachable": True,
        "version": None,
    }
    assert body["sources"]["web"]["reachable"] is False
    assert body["sources"]["web"]["error"] == "connection_refused"
    assert body["sources"]["ha"] == {"type": "homeassistant", "enabled": False}
    assert "127.0.0.1" not in response.text  # no address of any source


class Probed(Source):
    """A source whose `info()` counts its calls and may hang."""

    kind = "probed"

    def __init__(self, hang: bool = False) -> None:
        super().__init__("probed", timeout_s=5)
        self.calls = 0
        self.hang = hang

    async def search(self, query: str) -> list[Item]:
        return []

    async def info(self) -> dict[str, Any]:
        self.calls += 1
        if self.hang:
            await asyncio.sleep(3600)
        return {"type": self.kind, "version": "1.2"}


class Entry:
    type = "probed"
    enabled = True


async def test_health_is_cached_and_a_hanging_source_does_not_hang_the_probe() -> None:
    source = Probed()
    cache = HealthCache({"probed": source}, {"probed": Entry()}, ttl_s=60, wait_s=1)
    first = await cache.snapshot()
    second = await cache.snapshot()
    assert (
        first
        == second
        == {"probed": {"type": "probed", "enabled": True, "reachable": True, "version": "1.2"}}
    )
    assert source.calls == 1

    hanging = HealthCache({"probed": Probed(hang=True)}, {"probed": Entry()}, wait_s=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    snapshot = await hanging.snapshot()
    assert loop.time() - started < 2
    assert snapshot["probed"]["reachable"] is None  # not known yet: said so, not guessed
    await hanging.aclose()


class Silent:
    """A TCP server on loopback that accepts every connection and never answers: a
    source behind it is reachable, yet no call it makes ever gets a reply."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._held: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._held.append(writer)  # kept open, never written to

    async def __aenter__(self) -> Silent:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._held:
            writer.close()
        await self._server.wait_closed()


@pytest.mark.parametrize("kind", ["homeassistant", "ha_weather"])
async def test_a_source_that_never_answers_has_no_auth_verdict(demo_zim: Path, kind: str) -> None:
    """A token nobody answered was not accepted: auth is unknown (`-`), never `ok`."""
    async with Silent() as silent:
        entry: dict[str, Any] = {
            "type": kind,
            "url": silent.url,
            "token": "tok-Y7",
            "timeout_s": 0.3,
        }
        if kind == "ha_weather":
            entry["entity_id"] = "weather.home"
        config = parse_config(config_data(demo_zim, forecast=entry))
        found = by_name([f.to_dict() for f in await diagnose(config)])["forecast"]
    assert found["status"] == "down"
    assert found["sample"] == "timeout", found
    assert found["auth"] == "-", found
