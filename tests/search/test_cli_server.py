"""`search query` and `search route` ask the server running at the configured address.

A real `search serve` subprocess on a loopback port, and the CLI run as a user runs it.
What proves the server answered: the CLI process never imported the in-process service.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.search.test_cli import ROOT, run
from tests.support.ports import free_port

# Runs `search.cli.main`, then reports which heavy modules the command imported.
PROBE = """
import json, sys
from search.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
heavy = [m for m in ("search.service", "routing.pipeline", "torch", "sentence_transformers",
                    "starlette", "numpy", "pydantic", "search.config")
         if m in sys.modules]
print(json.dumps({"exit": code, "heavy": heavy}), file=sys.stderr)
"""


def probe(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, list[str], str]:
    """(exit status, stdout, heavy modules imported, stderr) of one CLI command."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        timeout=120,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["exit"], done.stdout, report["heavy"], done.stderr


def server_config(tmp_path: Path, demo_zim: Path, **server: Any) -> Path:
    config = {
        "server": {"port": free_port(), **server},
        "routing": {
            "default_source": "kiwix",
            "shipped_routes": False,
            "keywords": {"forecast": ["weather"]},
            "semantic": {"enabled": False},
        },
        "trace": {"enabled": False},
        "sources": {
            "kiwix": {"type": "zim", "paths": [str(demo_zim)]},
            "forecast": {
                "type": "open_meteo",
                "enabled": False,
                "latitude": 1,
                "longitude": 2,
                "fallback": ["kiwix"],
            },
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def served(tmp_path: Path, demo_zim: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A running `search serve` over the config (server settings from the test's marker)."""
    marker = request.node.get_closest_marker("server")
    settings = dict(marker.kwargs) if marker else {}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **settings.pop("env", {})}
    path = server_config(tmp_path, demo_zim, **settings)
    port = yaml.safe_load(path.read_text())["server"]["port"]
    process = subprocess.Popen(
        [sys.executable, "-m", "search", "serve", "--config", str(path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "search serve did not start"
            time.sleep(0.1)
        yield path
    finally:
        process.terminate()
        process.wait(timeout=30)


def without_ids(body: dict[str, Any]) -> dict[str, Any]:
    body = dict(body)
    body.pop("trace_id", None)
    return body


def test_query_is_answered_by_the_running_server(served: Path) -> None:
    code, out, heavy, err = probe(
        "query", "who wrote romeo and juliet", "--json", "--config", str(served)
    )
    assert code == 0, err
    # no service, no pipeline, no model, no web framework, no config models in the client
    assert heavy == []
    remote = json.loads(out)
    assert remote["results"][0]["items"][0]["title"] == "Romeo and Juliet"

    code, out, heavy, err = probe(
        "query", "who wrote romeo and juliet", "--json", "--local", "--config", str(served)
    )
    assert code == 0, err
    assert "search.service" in heavy  # --local: in-process
    assert without_ids(json.loads(out)) == without_ids(remote)


def test_query_prints_the_same_table_from_the_server(served: Path) -> None:
    args = ("query", "what is the weather today", "--explain", "--config", str(served))
    code, remote, heavy, err = probe(*args)
    assert code == 0 and heavy == [], err
    code, local, _, err = probe(*args, "--local")
    assert code == 0, err
    assert "forecast -> kiwix" in remote
    strip = [line for line in remote.splitlines() if not line.startswith("trace ")]
    assert len(strip) == len([ln for ln in local.splitlines() if not ln.startswith("trace ")])


def test_route_asks_the_server_for_a_dry_run(served: Path) -> None:
    args = (
        "route",
        "what is the weather and who wrote romeo and juliet",
        "--json",
        "--config",
        str(served),
    )
    code, remote, heavy, err = probe(*args)
    assert code == 0 and heavy == [], err
    code, local, _, err = probe(*args, "--local")
    assert code == 0, err
    assert json.loads(remote) == json.loads(local)
    assert [p["stage"] for p in json.loads(remote)["parts"]] == ["intent_keyword", "intent_default"]


def test_bad_input_refused_by_the_server_exits_2(served: Path) -> None:
    words = " and ".join(f"who wrote book {n}" for n in range(40))
    code, _, heavy, err = probe("query", words, "--config", str(served))
    assert code == 2 and heavy == []
    assert "routing.max_parts" in err


@pytest.mark.server(api_token="${SEARCH_TEST_TOKEN}", env={"SEARCH_TEST_TOKEN": "right-token"})
def test_the_configured_token_is_sent_and_a_wrong_one_exits_2(served: Path) -> None:
    code, out, heavy, err = probe(
        "query",
        "who wrote romeo and juliet",
        "--json",
        "--config",
        str(served),
        env={"SEARCH_TEST_TOKEN": "right-token"},
    )
    assert code == 0 and heavy == [], err
    assert json.loads(out)["results"][0]["source"] == "kiwix"

    code, out, heavy, err = probe(
        "query",
        "who wrote romeo and juliet",
        "--config",
        str(served),
        env={"SEARCH_TEST_TOKEN": "wrong-token"},
    )
    assert code == 2 and heavy == []
    assert "server.api_token" in err and "wrong-token" not in err + out


def test_without_a_server_the_cli_runs_in_process(tmp_path: Path, demo_zim: Path) -> None:
    config = server_config(tmp_path, demo_zim)  # nothing listens on its port
    code, out, heavy, err = probe(
        "query", "who wrote romeo and juliet", "--json", "--config", str(config)
    )
    assert code == 0, err
    assert "search.service" in heavy
    assert json.loads(out)["results"][0]["items"][0]["title"] == "Romeo and Juliet"
    assert "Loading weights" not in err  # stderr is a pipe here: no progress bars


def test_trace_commands_never_load_the_model(tmp_path: Path, demo_zim: Path) -> None:
    config = server_config(tmp_path, demo_zim)
    code, _, heavy, err = probe("trace", "list", "--store", str(tmp_path / "traces.db"))
    assert code == 2, err  # no store there yet: a usage error, answered without the model
    assert "torch" not in heavy and "sentence_transformers" not in heavy
    code, _, heavy, err = probe("trace", "list", "--config", str(config))
    assert "torch" not in heavy and "sentence_transformers" not in heavy, err


def test_a_batch_dry_run_keeps_no_traces_unless_asked(tmp_path: Path, demo_zim: Path) -> None:
    config = server_config(tmp_path, demo_zim)
    data = yaml.safe_load(config.read_text())
    store = tmp_path / "traces.db"
    data["trace"] = {"enabled": True, "path": str(store)}
    config.write_text(yaml.safe_dump(data))
    queries = tmp_path / "queries.txt"
    queries.write_text("what is the weather\nwho wrote romeo and juliet\n")

    def stored() -> int:
        done = run("trace", "list", "--json", "--config", str(config))
        return len(json.loads(done.stdout)["traces"]) if done.returncode == 0 else 0

    done = run("route", "--input", str(queries), "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2
    assert stored() == 0
    done = run("route", "--input", str(queries), "--store", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert stored() == 2
