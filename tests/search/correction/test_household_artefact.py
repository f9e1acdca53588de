"""A damaged `routing-household.json` is refused as damaged, never half-loaded: nesting
deep enough to exhaust the JSON decoder's recursion, and numbers that would load yet
change routing (a NaN threshold, an infinite weight), are a ConfigError naming the file,
which every command prints as one line before exiting 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from search.config import ConfigError
from search.correction import household
from tests.search.test_cli import run, write_config

WHERE = "data/routing-household.json"


def _artefact(**weights: Any) -> bytes:
    """A version-2 artefact with one label and `weights` over the shipped ones' shape."""
    body = {
        "version": household.VERSION,
        "labels": [{"query": "how is the shed", "route": "ha"}],
        "weights": {"keyword": {"keyword": 1.0}, "full": {"keyword": 1.0}, "min_confidence": 0.5}
        | weights,
    }
    return json.dumps(body).encode()


def _refused(data: bytes) -> str:
    with pytest.raises(ConfigError) as refused:
        household.decode(data, WHERE)
    message = str(refused.value)
    assert message.startswith(f"{WHERE}: not a household routing artefact")
    assert "\n" not in message and len(message) < 300
    return message


def test_nesting_past_the_decoder_is_damage_not_a_recursion_error() -> None:
    deep = b'{"version": 2, "labels": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert "nested too deep" in _refused(deep)
    weights = b'{"version": 2, "labels": [], "weights": ' + b'{"a":' * 100_000 + b"1"
    _refused(weights + b"}" * 100_001)


@pytest.mark.parametrize(
    ("weights", "said"),
    [
        ({"min_confidence": "nan"}, "weights.min_confidence is not a number"),
        ({"min_confidence": float("nan")}, "weights.min_confidence is nan"),
        ({"min_confidence": 1.5}, "not within 0..1"),
        ({"min_confidence": -0.1}, "not within 0..1"),
        ({"min_confidence": True}, "not a number"),
        ({"keyword": {"keyword": float("inf")}}, "weights.keyword.keyword is inf"),
        ({"full": {"similarity": "1"}}, "weights.full.similarity is not a number"),
        ({"full": [1, 2]}, "weights.full is not a mapping"),
    ],
)
def test_a_number_routing_cannot_use_is_refused(weights: dict[str, Any], said: str) -> None:
    assert said in _refused(_artefact(**weights))


def test_labels_must_be_strings_and_a_sound_artefact_still_loads() -> None:
    body = json.loads(_artefact())
    body["labels"] = [{"query": ["how is the shed"], "route": "ha"}]
    assert "labels[0]" in _refused(json.dumps(body).encode())
    routing = household.decode(_artefact(min_confidence=0), WHERE)
    assert routing.model is not None and routing.model.min_confidence == 0.0
    assert routing.route_for("How is the shed?") == "ha"


@pytest.mark.parametrize(
    "damage",
    [
        b'{"version":2,"labels":' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        b'{"version":2,"labels":[],"weights":{"keyword":{},"full":{},"min_confidence":"nan"}}',
    ],
)
def test_commands_exit_2_with_one_line_naming_the_damaged_file(
    tmp_path: Path, demo_zim: Path, damage: bytes
) -> None:
    config = write_config(tmp_path, demo_zim)
    data = yaml.safe_load(config.read_text())
    data["trace"] = {"enabled": False, "path": str(tmp_path / "data" / "traces.db")}
    config.write_text(yaml.safe_dump(data))
    artefact = tmp_path / "data" / household.ARTEFACT_NAME
    artefact.parent.mkdir()
    artefact.write_bytes(damage)
    expectations = tmp_path / "household.yaml"
    expectations.write_text("lights in the hall: ha\n")
    for command in (["route", "lights in the hall"], ["check", str(expectations)]):
        done = run(*command, "--config", str(config))
        assert done.returncode == 2, (command, done.stdout, done.stderr[-2000:])
        assert done.stderr.startswith(f"search: {artefact}: not a household routing artefact")
        assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr


def test_an_artefact_that_cannot_be_written_is_an_error_naming_it(tmp_path: Path) -> None:
    """A directory in the file's place (so the rename fails): a `ConfigError` naming the
    file, which `search fit` prints as one line and exit 2, and nothing else left there."""
    path = tmp_path / household.ARTEFACT_NAME
    path.mkdir()
    with pytest.raises(ConfigError, match=rf"^{path}: cannot write \("):
        household.write(path, b"{}")
    assert [p.name for p in tmp_path.iterdir()] == [household.ARTEFACT_NAME]  # no temp left
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(ConfigError, match="cannot write"):  # its directory cannot be made
        household.write(blocked / household.ARTEFACT_NAME, b"{}")
