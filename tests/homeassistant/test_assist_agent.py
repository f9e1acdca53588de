"""The Assist conversation agent (homeassistant/custom_components/search_router) inside a
real Home Assistant 2024.3.3, asking a real `search serve` process.

Everything is real and on loopback: HA loads the integration from the copy of the repo's
folder in its `custom_components/` (tests/support/homeassistant.py), the config entry is
made through HA's own config-flow REST API, and each sentence goes in through HA's
websocket `conversation/process` with the entry's agent id, as Assist's pipeline sends it.
The router runs the shipped config (the sentence model, the demo encyclopedia ZIM, and an
`ha` source with control allowed pointing back at the same HA) with an API token set.
Device effects are read back from HA's REST API, never from the answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support import homeassistant as ha_harness
from tests.support.homeassistant import HomeAssistant, ws_commands
from tests.support.ports import free_port
from tests.support.router_process import ROOT, RouterProcess, serve

home_assistant = ha_harness.home_assistant
pytestmark = pytest.mark.slow

API_TOKEN = "assist-test-token-5b1f"
BED_LIGHT = "light.bed_light"


# --- Home Assistant, seen from outside ---------------------------------------------------


def ha_get(hass: HomeAssistant, path: str) -> Any:
    response = httpx.get(
        f"{hass.url}{path}",
        headers={"Authorization": f"Bearer {hass.token}"},
        timeout=10,
        trust_env=False,
    )
    response.raise_for_status()
    return response.json()


def ha_post(hass: HomeAssistant, path: str, body: dict[str, Any]) -> Any:
    response = httpx.post(
        f"{hass.url}{path}",
        json=body,
        headers={"Authorization": f"Bearer {hass.token}"},
        timeout=30,
        trust_env=False,
    )
    response.raise_for_status()
    return response.json()


def entity_state(hass: HomeAssistant, entity_id: str) -> str:
    return str(ha_get(hass, f"/api/states/{entity_id}")["state"])


def set_light(hass: HomeAssistant, entity_id: str, on: bool) -> None:
    service = "turn_on" if on else "turn_off"
    ha_post(hass, f"/api/services/light/{service}", {"entity_id": entity_id})
    assert entity_state(hass, entity_id) == ("on" if on else "off")


def add_agent(hass: HomeAssistant, url: str, token: str, timeout: float = 10.0) -> dict[str, Any]:
    """Run the integration's config flow through HA's REST API; the flow's last result."""
    flow = ha_post(hass, "/api/config/config_entries/flow", {"handler": "search_router"})
    assert flow["type"] == "form" and flow["step_id"] == "user", flow
    return ha_post(  # type: ignore[no-any-return]
        hass,
        f"/api/config/config_entries/flow/{flow['flow_id']}",
        {"url": url, "api_token": token, "timeout": timeout},
    )


def remove_agent(hass: HomeAssistant, entry_id: str) -> None:
    httpx.delete(
        f"{hass.url}/api/config/config_entries/entry/{entry_id}",
        headers={"Authorization": f"Bearer {hass.token}"},
        timeout=30,
        trust_env=False,
    ).raise_for_status()


def converse(
    hass: HomeAssistant, agent_id: str, text: str, conversation_id: str | None = None
) -> dict[str, Any]:
    """`conversation/process` over HA's websocket, as an Assist pipeline calls the agent."""
    command: dict[str, Any] = {"type": "conversation/process", "text": text, "agent_id": agent_id}
    if conversation_id is not None:
        command["conversation_id"] = conversation_id
    (result,) = asyncio.run(ws_commands(hass.url, hass.token, [command]))
    # The exchange as Assist saw it (`pytest -s` shows it; the README's example is one).
    print("conversation/process", json.dumps(command), "->", json.dumps(result, indent=2))
    return result


def router_facts(result: dict[str, Any]) -> dict[str, Any]:
    facts = result["response"]["data"]["search_router"]
    assert isinstance(facts, dict)
    return facts


# --- the router ----------------------------------------------------------------------------


def shipped_config(tmp_path: Path, hass: HomeAssistant, demo_zim: Path, port: int) -> Path:
    data = yaml.safe_load((ROOT / "config.yaml").read_text())
    data["server"].update(port=port, api_token=API_TOKEN)
    data["sources"]["kiwix"].update(paths=[str(demo_zim)])
    data["sources"]["kiwix"].pop("build_from", None)
    data["sources"]["ha"].update(
        enabled=True, url=hass.url, token=hass.token, allow_control=True, timeout_s=10
    )
    data["trace"] = {"path": str(tmp_path / "traces.db")}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def small_config(tmp_path: Path, demo_zim: Path, port: int) -> Path:
    """Kiwix only, no sentence model: a router that starts in a second."""
    data = {
        "server": {"port": port},
        "routing": {"default_source": "kiwix", "semantic": {"enabled": False}},
        "trace": {"enabled": False},
        "sources": {"kiwix": {"type": "zim", "paths": [str(demo_zim)]}},
    }
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def router(
    tmp_path_factory: pytest.TempPathFactory, home_assistant: HomeAssistant, demo_zim: Path
) -> Iterator[RouterProcess]:
    tmp = tmp_path_factory.mktemp("router")
    port = free_port()
    with serve(shipped_config(tmp, home_assistant, demo_zim, port), port, tmp / "serve.log") as r:
        yield r


@pytest.fixture(scope="module")
def agent_id(home_assistant: HomeAssistant, router: RouterProcess) -> Iterator[str]:
    created = add_agent(home_assistant, router.url, API_TOKEN)
    assert created["type"] == "create_entry", created
    entry_id = str(created["result"]["entry_id"])
    yield entry_id
    remove_agent(home_assistant, entry_id)


# --- the tests -----------------------------------------------------------------------------


def test_the_agent_is_listed_by_assist_under_its_entry_id(
    home_assistant: HomeAssistant, agent_id: str
) -> None:
    (listed,) = asyncio.run(
        ws_commands(home_assistant.url, home_assistant.token, [{"type": "conversation/agent/list"}])
    )
    ours = [a for a in listed["agents"] if a["id"] == agent_id]
    assert ours and ours[0]["supported_languages"] == ["en"]


def test_a_wrong_token_or_no_router_is_refused_by_the_config_flow(
    home_assistant: HomeAssistant, router: RouterProcess
) -> None:
    wrong = add_agent(home_assistant, router.url, "not-the-token")
    assert wrong["type"] == "form" and wrong["errors"] == {"base": "invalid_auth"}
    closed = add_agent(home_assistant, f"http://127.0.0.1:{free_port()}", API_TOKEN)
    assert closed["type"] == "form" and closed["errors"] == {"base": "cannot_connect"}


def test_an_encyclopedia_question_is_answered_from_kiwix_with_its_trace(
    home_assistant: HomeAssistant, router: RouterProcess, agent_id: str
) -> None:
    result = converse(home_assistant, agent_id, "who wrote romeo and juliet")
    response = result["response"]
    assert response["response_type"] == "query_answer"
    speech = response["speech"]["plain"]["speech"]
    assert "Romeo and Juliet is a tragedy written by William Shakespeare" in speech
    facts = router_facts(result)
    (part,) = facts["parts"]
    assert part["route"] == "kiwix" and part["status"] == "ok"
    assert part["stage"].startswith("intent_")
    assert 0.0 < part["confidence"] <= 1.0
    assert facts["trace_url"] == f"{router.url}/ui#/trace/{facts['trace_id']}"
    assert response["card"]["simple"]["content"] == facts["trace_url"]
    # The trace it links to is the router's record of this very request.
    trace = httpx.get(
        f"{router.url}/traces/{facts['trace_id']}",
        headers={"Authorization": f"Bearer {API_TOKEN}"},
        timeout=10,
        trust_env=False,
    )
    assert trace.status_code == 200
    assert trace.json()["query"] == "who wrote romeo and juliet"
    # Assist's conversation id comes back, so the next turn continues this session.
    assert result["conversation_id"]


def test_a_follow_up_in_the_same_conversation_is_asked_as_what_it_stands_for(
    home_assistant: HomeAssistant, agent_id: str
) -> None:
    first = converse(home_assistant, agent_id, "tell me about the eiffel tower")
    conversation_id = first["conversation_id"]
    second = converse(home_assistant, agent_id, "how tall is it?", conversation_id)
    assert second["conversation_id"] == conversation_id
    (part,) = router_facts(second)["parts"]
    assert "eiffel tower" in part.get("rewritten", "").lower(), part


def test_a_light_command_acts_through_the_gate_and_ha_shows_it(
    home_assistant: HomeAssistant, agent_id: str
) -> None:
    set_light(home_assistant, BED_LIGHT, on=False)
    try:
        result = converse(home_assistant, agent_id, "turn on the bed light")
        assert entity_state(home_assistant, BED_LIGHT) == "on"  # HA's own record
        speech = result["response"]["speech"]["plain"]["speech"]
        assert speech == "Called light.turn_on on Bed Light: now on."
        (part,) = router_facts(result)["parts"]
        assert part["route"] == "ha" and part["status"] == "ok" and part["source"] == "ha"
        assert result["response"]["response_type"] == "action_done"
        assert router_facts(result)["acted"] is True
    finally:
        set_light(home_assistant, BED_LIGHT, on=False)


def test_a_conditional_command_is_withheld_and_said_so(
    home_assistant: HomeAssistant, agent_id: str
) -> None:
    set_light(home_assistant, BED_LIGHT, on=False)
    before = ha_get(home_assistant, f"/api/states/{BED_LIGHT}")
    result = converse(home_assistant, agent_id, "if the sun explodes today, turn on the bed light")
    after = ha_get(home_assistant, f"/api/states/{BED_LIGHT}")
    assert (after["state"], after["last_changed"]) == (before["state"], before["last_changed"])
    speech = result["response"]["speech"]["plain"]["speech"]
    assert speech.endswith(
        "I did not do “turn on the bed light”: it depends on a condition the router does not evaluate."
    )
    withheld = [p for p in router_facts(result)["parts"] if p["status"] == "withheld"]
    assert len(withheld) == 1 and "conditional" in withheld[0]["withheld"]
    assert withheld[0]["condition"]["query"] == "the sun explodes today"


def test_a_hung_then_stopped_router_is_a_spoken_error_within_the_timeout(
    tmp_path: Path, home_assistant: HomeAssistant, demo_zim: Path
) -> None:
    port = free_port()
    with serve(small_config(tmp_path, demo_zim, port), port, tmp_path / "serve.log") as small:
        created = add_agent(home_assistant, small.url, "", timeout=2.0)
        assert created["type"] == "create_entry", created
        entry_id = str(created["result"]["entry_id"])
        try:
            assert "Shakespeare" in speech_of(
                converse(home_assistant, entry_id, "romeo and juliet")
            )
            # Hung: the kernel still accepts the connection, nobody answers.
            os.kill(small.process.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                hung = converse(home_assistant, entry_id, "who wrote romeo and juliet")
                waited = time.monotonic() - started
            finally:
                os.kill(small.process.pid, signal.SIGCONT)
            assert 1.9 < waited < 4.0
            assert hung["response"]["response_type"] == "error"
            assert speech_of(hung) == "The search router did not answer within 2 seconds."
            small.stop()
            gone = converse(home_assistant, entry_id, "who wrote romeo and juliet")
            assert gone["response"]["response_type"] == "error"
            assert speech_of(gone) == "I can't reach the search router."
            assert gone["response"]["data"]["search_router"] == {"error": "unreachable"}
        finally:
            remove_agent(home_assistant, entry_id)


def speech_of(result: dict[str, Any]) -> str:
    return str(result["response"]["speech"]["plain"]["speech"])


def router_trace(router: RouterProcess, trace_id: str) -> dict[str, Any]:
    response = httpx.get(
        f"{router.url}/traces/{trace_id}",
        headers={"Authorization": f"Bearer {API_TOKEN}"},
        timeout=10,
        trust_env=False,
    )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def set_aliases(hass: HomeAssistant, entity_id: str, aliases: list[str]) -> None:
    asyncio.run(
        ws_commands(
            hass.url,
            hass.token,
            [{"type": "config/entity_registry/update", "entity_id": entity_id, "aliases": aliases}],
        )
    )


def test_a_device_known_only_by_its_registry_alias_is_found_by_ha_recognition(
    home_assistant: HomeAssistant, router: RouterProcess, agent_id: str
) -> None:
    # "Reading lamp" is in no entity's name: only HA's registry knows it is the bed light.
    set_light(home_assistant, BED_LIGHT, on=False)
    set_aliases(home_assistant, BED_LIGHT, ["Reading Lamp"])
    try:
        result = converse(home_assistant, agent_id, "turn on the reading lamp")
        assert entity_state(home_assistant, BED_LIGHT) == "on"
        trace = router_trace(router, router_facts(result)["trace_id"])
        events = trace["chain"]
        steps = [e["step"] for e in events]
        # Recognized after the gate let the command through, before it was carried out.
        assert steps.index("command_recognized") < steps.index("source_invoked")
        (recognized,) = [e for e in events if e["step"] == "command_recognized"]
        assert recognized["recognizer"] == "homeassistant"
        assert recognized["intent"] == "HassTurnOn" and recognized["matched"] is True
        assert recognized["targets"] == [BED_LIGHT]
        assert recognized["slots"]["name"].lower() == "reading lamp"
        # ... and Assist's debug view shows it too.
        assert router_facts(result)["recognized"] == [
            {"part": "0", "intent": "HassTurnOn", "matched": True, "targets": [BED_LIGHT]}
        ]
    finally:
        set_aliases(home_assistant, BED_LIGHT, [])
        set_light(home_assistant, BED_LIGHT, on=False)


def test_a_withheld_command_is_never_sent_to_ha_for_recognition(
    home_assistant: HomeAssistant, router: RouterProcess, agent_id: str
) -> None:
    result = converse(home_assistant, agent_id, "turn on the bed light in an hour")
    trace = router_trace(router, router_facts(result)["trace_id"])
    events = trace["chain"]
    steps = [e["step"] for e in events]
    assert "control_withheld" in steps and "command_recognized" not in steps
    assert entity_state(home_assistant, BED_LIGHT) == "off"


def test_one_assist_turn_is_one_router_request_never_a_loop(
    home_assistant: HomeAssistant, router: RouterProcess, agent_id: str
) -> None:
    """A command from Assist is recognized by HA (its debug matching runs no agent), so the
    sentence never comes back to the router: one turn, one trace."""

    def traces() -> int:
        response = httpx.get(
            f"{router.url}/traces",
            params={"limit": 500},
            headers={"Authorization": f"Bearer {API_TOKEN}"},
            timeout=10,
            trust_env=False,
        )
        assert response.status_code == 200, response.text
        return len(response.json()["traces"])

    set_light(home_assistant, BED_LIGHT, on=True)
    try:
        before = traces()
        result = converse(home_assistant, agent_id, "turn off the bed light")
        assert entity_state(home_assistant, BED_LIGHT) == "off"
        assert router_facts(result)["recognized"][0]["intent"] == "HassTurnOff"
        assert traces() == before + 1
    finally:
        set_light(home_assistant, BED_LIGHT, on=False)
