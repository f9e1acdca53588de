"""The correction loop end to end: query -> label over real HTTP -> fit -> route, replay, check.

Everything is real: uvicorn on loopback, the `search` CLI as a subprocess, the shipped routes,
the bundled sentence-transformers model, the demo ZIM, the SQLite trace store on disk.
`search fit` writes the household's labels beside the trace store, where every later
command (route, replay, check) picks them up.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import yaml

from search.api.app import create_app
from search.config import load_config
from tests.search.test_cli import run
from tests.support.app import uvicorn_server

ROOT = Path(__file__).resolve().parents[3]
QUERY = "how are things at the cottage"  # the shipped routes send it to ha
PARAPHRASE = "how are things at our cottage"


def household_config(tmp_path: Path, demo_zim: Path) -> dict[str, Any]:
    return {
        "routing": {"default_source": "kiwix", "semantic": {"enabled": True}},
        "trace": {"path": str(tmp_path / "traces.db")},
        "sources": {
            "kiwix": {"type": "zim", "paths": [str(demo_zim)]},
            # not reachable here: they fall back to the encyclopedia, so requests answer
            "forecast": {
                "type": "open_meteo",
                "enabled": False,
                "latitude": 1,
                "longitude": 2,
                "fallback": ["kiwix"],
            },
            "ha": {
                "type": "homeassistant",
                "enabled": False,
                "url": "http://127.0.0.1:9",
                "token": "x",
                "fallback": ["kiwix"],
            },
            "web": {"type": "searxng", "enabled": False, "url": "http://127.0.0.1:9"},
        },
    }


async def explained(config: Path, query: str) -> list[dict[str, Any]]:
    """The chain of a dry run of `query`, in-process, under `config` and its fitted labels."""
    from search.service import Service

    service = Service(load_config(config))
    await service.start(sources=False)
    try:
        return (await service.search(query, dry_run=True, explain=True)).chain
    finally:
        await service.aclose()


def routed(config: Path, query: str) -> tuple[str, str]:
    """Where `query` goes under `config` (a dry run that stores no trace of its own)."""
    data = yaml.safe_load(config.read_text())
    data["trace"]["enabled"] = False  # the same data directory, so the fitted labels apply
    quiet = config.with_name("route-" + config.name)
    quiet.write_text(yaml.safe_dump(data))
    done = run("route", query, "--json", "--config", str(quiet))
    assert done.returncode == 0, done.stderr
    (part,) = json.loads(done.stdout)["parts"]
    return part["source"], part["stage"]


def test_label_fit_replay_check(tmp_path: Path, demo_zim: Path) -> None:
    data = household_config(tmp_path, demo_zim)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(data))
    config = load_config(str(config_path))

    # 1. the query goes to ha; 2. it is labelled forecast over HTTP
    with (
        uvicorn_server(create_app(config)) as base,
        httpx.Client(base_url=base, timeout=60) as http,
    ):
        first = http.post("/search", json={"query": QUERY})
        assert first.status_code == 200, first.text
        trace_id = first.json()["trace_id"]
        other = http.post("/search", json={"query": "who wrote romeo and juliet"})
        assert other.status_code == 200
        assert first.json()["results"][0]["route"] == "ha"
        label = http.post(f"/traces/{trace_id}/labels", json={"part": "0", "route": "forecast"})
        assert label.status_code == 201, label.text
    assert routed(config_path, QUERY)[0] == "ha"

    # 3. fit: the artefact goes to the data directory, never into the package or checkout
    shipped = (ROOT / "routing" / "fitted" / "confidence.json").read_bytes()
    done = run("fit", "--config", str(config_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"labels: 1 stored in {tmp_path / 'traces.db'}")
    assert "weights: the shipped ones" in done.stdout
    assert "labelled set: 1 queries; routed as labelled before 0.0%, after 100.0%" in done.stdout
    changed_row = next(line for line in done.stdout.splitlines() if line.startswith(trace_id))
    assert changed_row.endswith(f"part 0 {QUERY!r}: decision changed: ha -> forecast")
    assert (tmp_path / "routing-household.json").exists()
    assert (ROOT / "routing" / "fitted" / "confidence.json").read_bytes() == shipped

    # 4. the labelled query now goes to forecast, by its label; a label holds for its own
    # words only, so a paraphrase and an unrelated query route as before
    assert routed(config_path, QUERY) == ("forecast", "intent_label")
    [label_event] = [
        e
        for e in asyncio.run(explained(config_path.with_name("route-" + config_path.name), QUERY))
        if e["step"] == "intent_label"
    ]
    assert label_event["fit"].startswith("household:")
    assert (label_event["decision"], label_event["confidence"]) == ("forecast", 1.0)
    assert routed(config_path, PARAPHRASE)[0] == "ha"
    assert routed(config_path, "who wrote romeo and juliet")[0] == "kiwix"

    # 5. replay --all lists exactly the changed trace the fit predicted, and exits 1
    done = run("replay", "--all", "--config", str(config_path))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1:] == [
        "routing changed in 1 trace(s):",
        f"  {trace_id} part 0 {QUERY!r}: decision changed: ha -> forecast",
    ]

    # 6. check passes for the exported labels, fails for a wrong expectation
    exported = tmp_path / "household.yaml"
    assert run("label", "--export", str(exported), "--config", str(config_path)).returncode == 0
    passed = run("check", str(exported), "--config", str(config_path))
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "intent_label" in passed.stdout
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({QUERY: "forecast", PARAPHRASE: "kiwix"}))
    failed = run("check", str(wrong), "--config", str(config_path))
    assert failed.returncode == 1
    assert f"{PARAPHRASE!r}: expected kiwix, got ha" in failed.stdout
