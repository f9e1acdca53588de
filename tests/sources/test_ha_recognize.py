"""HA's sentence matching without execution (`conversation/agent/homeassistant/debug`),
against the real Home Assistant 2024.3.3 the suite runs; and how its answer decides the
devices of a command (pure).
"""

from __future__ import annotations

import httpx
import pytest

from sources.base import Command, SourceUnauthorized, SourceUnavailable
from sources.ha_recognize import parse_result, recognize
from sources.homeassistant import recognized_targets
from tests.support import homeassistant as ha_harness
from tests.support.homeassistant import HomeAssistant
from tests.support.wire_servers import closed_port_url

home_assistant = ha_harness.home_assistant


def state_of(hass: HomeAssistant, entity_id: str) -> dict[str, object]:
    response = httpx.get(
        f"{hass.url}/api/states/{entity_id}",
        headers={"Authorization": f"Bearer {hass.token}"},
        timeout=10,
        trust_env=False,
    )
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]


@pytest.mark.slow
async def test_ha_names_the_intent_and_its_targets_and_changes_nothing(
    home_assistant: HomeAssistant,
) -> None:
    before = state_of(home_assistant, "light.bed_light")
    on, close, unknown = await recognize(
        home_assistant.url,
        home_assistant.token,
        ["turn on the bed light", "close the garage door", "turn on the flux capacitor"],
        timeout_s=30,
    )
    assert (on.intent, on.matched, on.targets) == ("HassTurnOn", True, ("light.bed_light",))
    assert on.slots["name"] == "bed light"
    assert close.intent == "HassTurnOff" and close.targets == ("cover.garage_door",)
    assert not unknown.matched and unknown.targets == ()  # no such device in the registry
    after = state_of(home_assistant, "light.bed_light")
    assert (after["state"], after["last_changed"]) == (before["state"], before["last_changed"])


@pytest.mark.slow
async def test_a_wrong_token_or_no_ha_is_a_typed_error(home_assistant: HomeAssistant) -> None:
    with pytest.raises(SourceUnauthorized):
        await recognize(home_assistant.url, "not-a-token", ["turn on the bed light"], timeout_s=10)
    with pytest.raises(SourceUnavailable):
        await recognize(closed_port_url(), "t", ["turn on the bed light"], timeout_s=5)


def command(action: str, recognized: dict[str, object] | None) -> Command:
    return Command(action, "x", "q", recognized=recognized)


def test_ha_targets_are_used_only_for_a_full_match_of_the_same_polarity() -> None:
    found = {"intent": "HassTurnOn", "matched": True, "targets": ["light.a"]}
    assert recognized_targets(command("on", found)) == ("light.a",)
    assert recognized_targets(command("unlock", {**found, "intent": "HassTurnOff"})) == ("light.a",)
    assert recognized_targets(command("off", found)) == ()  # HA read the opposite
    assert recognized_targets(command("on", {**found, "matched": False})) == ()
    assert recognized_targets(command("on", {**found, "intent": "HassLightSet"})) == ()
    assert recognized_targets(command("on", None)) == ()


def test_a_debug_result_is_read_with_only_the_matched_targets() -> None:
    found = parse_result(
        {
            "intent": {"name": "HassGetState"},
            "slots": {"domain": "light", "state": "on"},
            "targets": {"light.a": {"matched": True}, "light.b": {"matched": False}},
            "match": True,
        }
    )
    assert found.targets == ("light.a",) and found.intent == "HassGetState"
    assert parse_result(None).intent is None
