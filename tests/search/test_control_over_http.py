"""Acting on the home only when it is meant: the shipped config, a real Home Assistant with
`allow_control: true`, the real model, real HTTP on loopback, the real MCP client and the
real `search replay` CLI.

The witness is Home Assistant itself: every assertion about the world reads entity state
back from HA's REST API, never from our own answers. `lock.front_door` starts locked;
"unlock the front door" is the command each case tries to sneak through.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from mcp import Client

from search.api.app import create_app
from search.cli import main
from search.config import Config, parse_config
from tests.support import homeassistant as ha_harness
from tests.support.app import assert_contract_event, uvicorn_server
from tests.support.homeassistant import HomeAssistant, call_service, read_states

home_assistant = ha_harness.home_assistant
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

ROOT = Path(__file__).resolve().parents[2]
LOCK = "lock.front_door"
COMMAND = "unlock the front door"


def lock_front_door(hass: HomeAssistant) -> None:
    call_service(hass, "lock", "lock", LOCK)
    assert read_states(hass)[LOCK]["state"] == "locked"


def snapshot(hass: HomeAssistant) -> dict[str, tuple[str, str]]:
    """Every entity's state and last change: equal snapshots mean nothing was touched."""
    return {e: (s["state"], s["last_changed"]) for e, s in read_states(hass).items()}


def config_file(tmp_path: Path, hass: HomeAssistant, demo_zim: Path, **routing: Any) -> Path:
    data = yaml.safe_load((ROOT / "config.yaml").read_text())
    data["sources"]["kiwix"].update(paths=[str(demo_zim)])
    data["sources"]["kiwix"].pop("build_from", None)
    data["sources"]["ha"].update(
        enabled=True, url=hass.url, token=hass.token, allow_control=True, timeout_s=10
    )
    data["trace"] = {"path": str(tmp_path / "traces.db"), "capture_results": True}
    data["routing"].update(routing)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def load(path: Path) -> Config:
    return parse_config(yaml.safe_load(path.read_text()))


@pytest.fixture
def served(tmp_path: Path, home_assistant: HomeAssistant, demo_zim: Path) -> Iterator[str]:
    lock_front_door(home_assistant)
    with uvicorn_server(create_app(load(config_file(tmp_path, home_assistant, demo_zim)))) as base:
        yield base
    lock_front_door(home_assistant)


def search(base: str, query: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(
        f"{base}/search",
        json={"query": query, "explain": True, **body},
        timeout=60,
        trust_env=False,
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    for event in answer["explanation"]:
        assert_contract_event(event)
    return answer


def withheld(answer: dict[str, Any]) -> list[str]:
    return [e["reason"] for e in answer["explanation"] if e["step"] == "control_withheld"]


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("if the sun explodes today, unlock the front door", "conditional"),
        ("unless it rains, unlock the front door", "conditional"),
        ("only if it rains, unlock the front door", "conditional"),
        ("unlock the front door, but only if it rains", "conditional"),
        ("unlock the front door provided that it rains", "conditional"),
        ("should it rain, unlock the front door", "conditional"),
        ("unlock the front door in an hour", "deferred"),
        ("unlock the front door tonight", "deferred"),
    ],
)
def test_commands_not_meant_now_change_nothing_in_home_assistant(
    served: str, home_assistant: HomeAssistant, query: str, reason: str
) -> None:
    before = snapshot(home_assistant)
    answer = search(served, query)
    assert withheld(answer) == [reason]
    assert "withheld" in [r["status"] for r in answer["results"]]
    assert snapshot(home_assistant) == before


# Phrasings a reviewer got through the gate: time words the qualifier list lacked, time,
# condition or negation words in another part of the request than the command, and words
# left over after the device's name ("on arrival"), which Home Assistant's own matching
# did not understand and a partial name match acted on.
NOT_NOW = [
    "turn on the bed light at seven",
    "turn on the bed light in the morning",
    "turn on the bed light on weekdays",
    "unlock the front door in a bit",
    "unlock the front door soon",
    "unlock the front door in 10min",
    "unlock the front door in twelve minutes",
    "unlock the front door after 20 minutes",
    "unlock the front door at around 7pm",
    "unlock the front door at half past six",
    "unlock the front door at 1900",
    "turn on the bed light until 9",
    "turn on the bed light and unlock the front door in 10 minutes",
    "tomorrow, turn on the bed light and unlock the front door",
    "wait ten minutes then unlock the front door",
    "first thing tomorrow. unlock the front door",
    "do not, under any circumstances, unlock the front door",
    "unlock the front door, actually don't",
    "unlock the front door. never mind",
    "turn on the bed light, no wait, don't",
    "unlock the front door depending on whether it rains",
    "unlock the front door given that nobody is home",
    "unlock the front door, except during the night",
    "unlock the front door on arrival",
    "turn on the bed light for the party",
    "unlock the front door？",
    "unlock the front door, shall I?",
    "is the front door locked? then unlock the front door",
    "unlock the front door ｔｏｍｏｒｒｏｗ",
    "unlock the front door. just kidd\u0456ng",
    "unlock the front door 明天",
]


def test_doubtful_commands_anywhere_in_a_request_change_nothing_in_home_assistant(
    served: str, home_assistant: HomeAssistant
) -> None:
    """Each phrasing is withheld (and recorded) with Home Assistant untouched."""
    before = snapshot(home_assistant)
    acted: dict[str, list[str]] = {}
    for query in NOT_NOW:
        answer = search(served, query)
        if "withheld" not in [r["status"] for r in answer["results"]] or any(
            e["step"] == "source_invoked" and e.get("operation") == "act"
            for e in answer["explanation"]
        ):
            acted[query] = [r["status"] for r in answer["results"]]
    assert acted == {}
    assert snapshot(home_assistant) == before


def test_words_that_name_no_device_are_reported_not_guessed_at(
    served: str, home_assistant: HomeAssistant
) -> None:
    before = snapshot(home_assistant)
    answer = search(served, "unlock the front door on arrival")
    [event] = [e for e in answer["explanation"] if e["step"] == "control_withheld"]
    assert event["reason"] in ("conditional", "low_confidence")
    answer = search(served, "turn on the bed light for the party")
    [event] = [e for e in answer["explanation"] if e["step"] == "control_withheld"]
    assert event["reason"] == "low_confidence" and event["unplaced"] == ["party"]
    assert "'party' names none of ha's devices" in answer["results"][0]["items"][0]["text"]
    answer = search(served, "turn on the bed light 明天")  # words the parser cannot read
    [event] = [e for e in answer["explanation"] if e["step"] == "control_withheld"]
    assert event["reason"] == "low_confidence" and event["unplaced"] == ["明天"]
    assert snapshot(home_assistant) == before


def test_a_dry_run_and_the_read_only_mcp_tool_change_nothing(
    served: str, home_assistant: HomeAssistant
) -> None:
    before = snapshot(home_assistant)
    plan = search(served, COMMAND, dry_run=True)
    assert withheld(plan) == ["dry_run"] and plan["results"][0]["status"] == "planned"

    async def over_mcp() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Client(f"{served}/mcp") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["search"].annotations.read_only_hint is True
            # no API token: the router is read-only over HTTP, and offers no `control`
            assert "control" not in tools
            result = await client.call_tool("search", {"query": COMMAND, "explain": True})
            return tools, result.structured_content or {}

    import asyncio

    _, body = asyncio.run(over_mcp())
    assert withheld(body) == ["read_only"]
    assert snapshot(home_assistant) == before


def test_a_command_put_politely_or_with_its_on_off_later_acts(
    served: str, home_assistant: HomeAssistant
) -> None:
    """ "Could you ...?" is an order put as a question; "turn the bed light off now" and "I
    need you to ..." are orders too: each is carried out, once, through the gate."""
    call_service(home_assistant, "light", "turn_off", "light.bed_light")
    for query, entity, state in [
        ("could you unlock the front door?", LOCK, "unlocked"),
        ("i need you to turn on the bed light", "light.bed_light", "on"),
        ("turn the bed light off now", "light.bed_light", "off"),
    ]:
        answer = search(served, query)
        assert withheld(answer) == [], (query, answer["explanation"])
        assert answer["results"][0]["status"] == "ok", query
        assert read_states(home_assistant)[entity]["state"] == state, query


def test_an_unsure_decision_does_not_act(
    tmp_path: Path, home_assistant: HomeAssistant, demo_zim: Path
) -> None:
    """With ha as the default source, a command nothing recognises ends at the default:
    unsure, so withheld, even though HA would take it."""
    lock_front_door(home_assistant)
    path = config_file(
        tmp_path,
        home_assistant,
        demo_zim,
        default_source="ha",
        semantic={"enabled": False},
        shipped_routes=False,
    )
    before = snapshot(home_assistant)
    with uvicorn_server(create_app(load(path))) as base:
        answer = search(base, "unlock lock.front_door")
    steps = [e["step"] for e in answer["explanation"]]
    assert "intent_default" in steps
    assert withheld(answer) == ["low_confidence"]
    assert snapshot(home_assistant) == before


def test_a_plain_command_acts_through_the_gate_and_a_replay_never_repeats_it(
    tmp_path: Path,
    home_assistant: HomeAssistant,
    demo_zim: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lock_front_door(home_assistant)
    path = config_file(tmp_path, home_assistant, demo_zim)
    with uvicorn_server(create_app(load(path))) as base:
        status = search(base, "is the front door locked")
        answer = search(base, COMMAND)
        again = search(base, "is the front door locked")
    assert read_states(home_assistant)[LOCK]["state"] == "unlocked"
    acts = [
        e
        for e in answer["explanation"]
        if e["step"] == "source_invoked" and e.get("operation") == "act"
    ]
    assert [(e["source"], e["outcome"]) for e in acts] == [("ha", "ok")]
    assert withheld(answer) == [] and answer["results"][0]["status"] == "ok"
    assert not status["cached"] and not again["cached"]  # the home is read fresh
    assert "unlocked" in again["results"][0]["items"][0]["text"]

    lock_front_door(home_assistant)
    before = snapshot(home_assistant)
    code = main(["replay", answer["trace_id"], "--config", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out  # the same action would be taken: no divergence
    assert snapshot(home_assistant) == before
    code = main(["replay", "--all", "--config", str(path)])
    capsys.readouterr()
    assert code in (0, 1)
    assert snapshot(home_assistant) == before, "replay --all acted on the home"

    # Switching control off turns the recorded action into a divergence, still without acting.
    data = yaml.safe_load(path.read_text())
    data["sources"]["ha"]["allow_control"] = False
    path.write_text(yaml.safe_dump(data))
    code = main(["replay", answer["trace_id"], "--config", str(path)])
    out = capsys.readouterr().out
    assert code == 1 and "would not" in out, out
    assert snapshot(home_assistant) == before
