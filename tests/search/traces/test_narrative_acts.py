"""What the chain and its narrative say of a command, against a real Home Assistant (the
demo, tests/support/homeassistant.py) through the shipped config and the real pipeline:
a command that changed nothing is recorded and told as such, never as carried out. The
witness of the world is HA's own state, read back over its REST API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from search.config import parse_config
from search.service import Service
from search.traces.narrative import narrative
from tests.support import homeassistant as ha_harness
from tests.support.homeassistant import HomeAssistant, device_states

home_assistant = ha_harness.home_assistant
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def bed_light_off(hass: HomeAssistant) -> None:
    httpx.post(
        f"{hass.url}/api/services/light/turn_off",
        json={"entity_id": "light.bed_light"},
        timeout=10,
        trust_env=False,
        headers={"Authorization": f"Bearer {hass.token}"},
    ).raise_for_status()


@pytest.fixture
async def service(home_assistant: HomeAssistant, demo_zim: Path) -> AsyncIterator[Service]:
    data = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    data["sources"]["kiwix"] = {"type": "zim", "paths": [str(demo_zim)]}
    data["sources"]["ha"].update(
        enabled=True,
        url=home_assistant.url,
        token=home_assistant.token,
        allow_control=True,
        timeout_s=10,
    )
    data["trace"] = {"enabled": False}
    svc = Service(parse_config(data))
    await svc.start()
    yield svc
    await svc.aclose()


def acts(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in chain if e["step"] == "source_invoked" and e.get("operation") == "act"]


@pytest.mark.parametrize(
    "query",
    [
        "turn on the lights",  # which of the six? none is guessed
        "open the kitchen lights",  # no light can be opened
    ],
)
async def test_a_command_that_changed_nothing_is_not_told_as_carried_out(
    service: Service, home_assistant: HomeAssistant, query: str
) -> None:
    before = device_states(home_assistant)
    outcome = await service.search(query, explain=True, authorized=True)
    assert device_states(home_assistant) == before
    (part,) = outcome.body["results"]
    assert (part["source"], part["status"]) == ("ha", "empty")
    (event,) = acts(outcome.chain)
    assert event["outcome"] == "empty"
    (line,) = [line for line in narrative(outcome.chain) if line.startswith("part 0")]
    assert f"ha changed nothing for '{query}'" in line
    assert "carried out" not in line


async def test_a_command_that_ran_is_told_as_the_command_it_was(
    service: Service, home_assistant: HomeAssistant
) -> None:
    bed_light_off(home_assistant)
    try:
        outcome = await service.search("turn on the bed light", explain=True, authorized=True)
        (event,) = acts(outcome.chain)
        assert event["outcome"] == "ok"
        (line,) = [line for line in narrative(outcome.chain) if line.startswith("part 0")]
        assert "ha carried out 'turn on the bed light'" in line
    finally:
        bed_light_off(home_assistant)


async def test_an_ambiguous_command_says_which_devices_and_why_nothing_changed(
    service: Service,
) -> None:
    outcome = await service.search("turn on the lights", explain=True, authorized=True)
    (part,) = outcome.body["results"]
    assert [i["title"] for i in part["items"]] == ["Which device?"]
    (event,) = acts(outcome.chain)
    assert (event["outcome"], event["reason"]) == ("empty", "ambiguous")
    (line,) = [line for line in narrative(outcome.chain) if line.startswith("part 0")]
    assert "ha changed nothing for 'turn on the lights' (it could mean several devices)" in line


async def test_a_device_already_as_asked_is_reported_unchanged(
    service: Service, home_assistant: HomeAssistant
) -> None:
    bed_light_off(home_assistant)
    outcome = await service.search("turn off the bed light", explain=True, authorized=True)
    (event,) = acts(outcome.chain)
    assert (event["outcome"], event["reason"]) == ("empty", "no_change")
    (line,) = [line for line in narrative(outcome.chain) if line.startswith("part 0")]
    assert "ha was asked to 'turn off the bed light' and reported no change" in line
