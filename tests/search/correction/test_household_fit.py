"""A household fit as a household uses it: labels over HTTP, `search fit`, then every command
and the running server route with the result, and say so.

The CLI commands run in-process (`search.cli.main`), over the scripted source kind the
suite registers, the real SQLite store and the real pipeline; the server is real uvicorn on
loopback.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from search.api.app import create_app
from search.cli import main
from search.correction import household
from search.traces.store import SQLiteTraceStore
from tests.search.traces.test_store import KEYWORDS, home_config, record_queries
from tests.support.app import uvicorn_server

QUERIES = [
    "lights status",
    "latest news",
    "history of rome",
    "latest news and also lights status",
    "gizmo report",
    "lights status in the kitchen",
    "who built the pyramids",
    "news about the lights",
]


def write_config(tmp_path: Path) -> Path:
    """The home config as a file, as the CLI reads it."""
    path = tmp_path / "config.yaml"
    data = {
        "routing": {
            "default_source": "kiwix",
            "keywords": KEYWORDS,
            "semantic": {"enabled": False},
        },
        "sources": {
            "kiwix": {"type": "scripted"},
            "ha": {"type": "scripted", "fail": "unavailable", "fallback": ["web"]},
            "web": {"type": "scripted", "items": 3},
            "broken": {"type": "scripted", "fail": "error"},
        },
        "trace": {"path": str(tmp_path / "traces.db")},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_what_fit_predicts_is_what_replay_all_then_finds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    """Random label sets (repeated, contradictory, `none`, on compound parts): the changes
    `search fit` lists are exactly those `search replay --all` finds afterwards, and
    `search check` passes on the exported labels."""
    config_path = write_config(tmp_path)
    config = home_config(tmp_path / "traces.db")
    outcomes = asyncio.run(record_queries(config, QUERIES))
    store = SQLiteTraceStore(config.trace)
    rng = random.Random(seed)
    try:
        for _ in range(rng.randint(1, 8)):
            outcome = rng.choice(outcomes)
            part = str(rng.randrange(len(outcome.results)))
            route = rng.choice(["kiwix", "ha", "web", "none", "broken"])
            store.add_label(outcome.trace_id, part, route, ["kiwix", "ha", "web", "broken"])
    finally:
        store.close_sync()

    code, out = cli(capsys, "fit", "--json", "--config", str(config_path))
    assert code == 0
    fitted = json.loads(out)
    assert fitted["after"] == 1.0, fitted["not_holding"]
    code, out = cli(capsys, "replay", "--all", "--json", "--config", str(config_path))
    assert code == (1 if fitted["changes"] else 0)
    replayed = json.loads(out)
    assert replayed["changes"] == fitted["changes"]
    assert replayed["routing_changed"] == fitted["routing_changed"]

    exported = tmp_path / "labels.yaml"
    assert cli(capsys, "label", "--export", str(exported), "--config", str(config_path))[0] == 0
    code, out = cli(capsys, "check", str(exported), "--config", str(config_path))
    assert code == 0, out


def test_fit_says_at_the_start_when_there_are_no_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path = write_config(tmp_path)
    code, out = cli(capsys, "fit", "--dry-run", "--config", str(config_path))
    assert code == 0
    assert (
        out.splitlines()[0]
        == f"labels: none stored in {tmp_path} (nothing to correct; the weights are still checked)"
    )
    assert not (tmp_path / household.ARTEFACT_NAME).exists()  # a dry run writes nothing


def test_with_no_fit_data_fit_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from routing.fitting import fit

    monkeypatch.setattr(fit, "FIT_DATA", tmp_path / "nowhere")
    monkeypatch.setattr(fit.shipped_rows, "__defaults__", (tmp_path / "nowhere",))
    config_path = write_config(tmp_path)
    for args in (["fit"], ["fit", "--shipped", "--output", str(tmp_path / "w.json")]):
        code = main([*args, "--config", str(config_path)])
        err = capsys.readouterr().err
        assert code == 2
        assert "no fit data in" in err and "nothing was written" in err
    assert not (tmp_path / household.ARTEFACT_NAME).exists()
    assert not (tmp_path / "w.json").exists()


def _route_of(base: str, query: str) -> tuple[str | None, dict[str, Any]]:
    response = httpx.post(
        f"{base}/search", json={"query": query, "dry_run": True, "explain": True}, timeout=30
    )
    assert response.status_code == 200, response.text
    body = response.json()
    intent = [e for e in body["explanation"] if e["step"].startswith("intent_")][-1]
    return body["results"][0]["route"], intent


def test_a_running_server_routes_with_a_new_fit_without_a_restart(tmp_path: Path) -> None:
    from search.correction.household import AppliedLabel

    config = home_config(tmp_path / "traces.db")
    with uvicorn_server(create_app(config)) as base:
        route, intent = _route_of(base, "lights status")
        assert (route, intent["fit"]) == ("ha", "shipped")
        data = household.encode([AppliedLabel("lights status", "kiwix", 1, "t", "0")], None)
        household.write(household.artefact_path(config), data)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            route, intent = _route_of(base, "lights status")
            if route == "kiwix":
                break
            time.sleep(0.2)
        assert route == "kiwix", "the server never picked up the new artefact"
        assert (intent["step"], intent["fit"]) == ("intent_label", household.name_of(data))
        household.artefact_path(config).write_text("not json")  # a damaged file: kept routing
        time.sleep(2.5)
        assert _route_of(base, "lights status")[0] == "kiwix"


async def test_a_new_fit_keeps_the_conversations_in_progress(tmp_path: Path) -> None:
    """A fit changes how words are routed, not what was said: a follow-up after the server
    picked up a new artefact is still read against the turn before it."""
    from search.correction.household import AppliedLabel
    from search.service import Service

    config = home_config(
        tmp_path / "traces.db",
        keywords={"ha": ["turn on", "turn off", "lights"], "web": ["news"]},
        sources={"kiwix": {}, "ha": {}, "web": {}},
    )
    service = Service(config)
    await service.start()
    try:
        first = await service.search("turn on the kitchen lights", session_id="s1")
        assert first.body["results"][0]["route"] == "ha"
        data = household.encode([AppliedLabel("penguin facts", "web", 1, "t", "0")], None)
        household.write(household.artefact_path(config), data)
        assert await service.reload_household()
        follow_up = await service.search("turn them off", session_id="s1")
        cached = await service.search("turn on the kitchen lights", explain=True)
    finally:
        await service.aclose()
    [result] = follow_up.body["results"]
    assert result.get("rewritten") == "turn the kitchen lights off"
    # decisions the old routing cached are not reused by the new one
    assert "intent_cached" not in [e["step"] for e in cached.body["explanation"]]


def test_fit_replaces_a_damaged_artefact_as_its_message_advises(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command refuses a damaged artefact and says to run `search fit`: so that one
    fits anew, saying so, instead of refusing too."""
    config_path = write_config(tmp_path)
    config = home_config(tmp_path / "traces.db")
    outcomes = asyncio.run(record_queries(config, QUERIES[:2]))
    store = SQLiteTraceStore(config.trace)
    try:
        store.add_label(outcomes[0].trace_id, "0", "web", ["kiwix", "ha", "web", "broken"])
    finally:
        store.close_sync()
    household.artefact_path(config).write_text('{"version": 2, "labels": ' + "[" * 5000)
    code = main(["route", "lights status", "--local", "--config", str(config_path)])
    assert code == 2 and "search fit" in capsys.readouterr().err
    code = main(["fit", "--config", str(config_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "fitting anew" in captured.err
    assert household.load(config) is not None
