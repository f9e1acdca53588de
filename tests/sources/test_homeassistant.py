"""The `homeassistant` source against a real Home Assistant 2024.3.3 running its demo.

HA is started once per session by `tests/support/homeassistant.py` (the `home_assistant`
fixture); every expectation is checked against the states HA itself reports, read back
over its REST API independently of the source. Only what a real HA cannot be made to
send (5xx, 429, malformed or endless bodies, NaN) uses loopback servers: `HaRestStub`
speaks HA's `/api/states` wire format (a JSON list of state objects), `HomeAssistantApi`
(tests/support/faulty.py) HA's bearer-token REST API, and `BodyServer`
(tests/sources/hostile.py) plain HTTP with a body that never ends.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sources import homeassistant as ha
from sources.base import (
    Command,
    ControlNotAllowed,
    Item,
    SourceBadResponse,
    SourceRateLimited,
    SourceServerError,
    SourceTimeout,
    SourceUnauthorized,
    SourceUnavailable,
    Unchanged,
)
from sources.homeassistant import HomeAssistantSource, parse_control, parse_request
from tests.sources.hostile import BodyServer
from tests.support import homeassistant as ha_harness
from tests.support.faulty import HomeAssistantApi
from tests.support.homeassistant import (
    HA_VERSION,
    HomeAssistant,
    call_service,
    device_states,
    read_states,
)
from tests.support.wire_servers import Fault, WireServer, closed_port_url

# The session-wide real HA (one per test session, shared with the other HA test modules).
home_assistant = ha_harness.home_assistant

DEMO_LIGHTS = {
    "light.bed_light": "Bed Light",
    "light.ceiling_lights": "Ceiling Lights",
    "light.kitchen_lights": "Kitchen Lights",
    "light.office_rgbw_lights": "Office RGBW Lights",
    "light.living_room_rgbww_lights": "Living Room RGBWW Lights",
    "light.entrance_color_white_lights": "Entrance Color + White Lights",
}


def make_source(url: str, token: str, **extra: Any) -> HomeAssistantSource:
    config = ha.Config.model_validate(
        {"type": "homeassistant", "url": url, "token": token, **extra}
    )
    source = ha.build("ha", config)
    assert isinstance(source, HomeAssistantSource)
    return source


@pytest.fixture
async def source(home_assistant: HomeAssistant) -> AsyncIterator[HomeAssistantSource]:
    src = make_source(home_assistant.url, home_assistant.token, timeout_s=10)
    await src.start()
    yield src
    await src.aclose()


@pytest.fixture
async def controller(home_assistant: HomeAssistant) -> AsyncIterator[HomeAssistantSource]:
    src = make_source(home_assistant.url, home_assistant.token, timeout_s=10, allow_control=True)
    await src.start()
    yield src
    await src.aclose()


def command_of(source: HomeAssistantSource, query: str) -> Command:
    command = source.command(query)
    assert command is not None, query
    return command


def assert_no_secret(items: list[Item], token: str) -> None:
    for item in items:
        assert token not in f"{item.title} {item.text} {item.url}"


# --- reading the query (pure) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("turn on the kitchen light", ("on", "the kitchen light")),
        ("please switch the bed light off", ("off", "the bed light")),
        ("close the garage door", ("close", "the garage door")),
        ("shut the blinds", ("close", "the blinds")),
        ("unlock the front door", ("unlock", "the front door")),
        ("is the garage door open", None),
        ("which lights are on in the kitchen", None),
        ("lock status", None),
        ("turn on the light?", None),
        # the particle after the device, then where it is; words that only ask politely
        ("turn the lights off in the bedroom", ("off", "the lights in the bedroom")),
        ("switch every light on across the house", ("on", "every light across the house")),
        ("turn the fan off everywhere", ("off", "the fan everywhere")),
        ("turn the lights off now", ("off", "the lights")),
        ("i need you to turn on the fan", ("on", "the fan")),
        ("go ahead and unlock the front door", ("unlock", "the front door")),
        ("put apples on the list", None),  # "put ... on" places, it does not switch
        ("turn up the volume to 90 on the tv", None),
        ("which lights are on in the bedroom", None),
        ("turn the lights on in the bedroom?", None),
    ],
)
def test_parse_control_separates_commands_from_questions(
    query: str, expected: tuple[str, str] | None
) -> None:
    assert parse_control(query) == expected


def test_parse_request_sorts_words_into_kinds_names_and_states() -> None:
    req = parse_request("which lights are on in the kitchen")
    assert req.domains == {"light"} and req.state == "on" and req.names == ("kitchen",)
    req = parse_request("temperature in the living room")
    assert req.device_class == "temperature" and req.names == ("living", "room")
    # A yes/no question about one device does not filter by the state it asks about.
    assert parse_request("is the garage door open").state is None


# --- status questions against the real demo ---------------------------------------------


@pytest.mark.slow
async def test_lights_status_lists_every_demo_light_with_its_real_state(
    source: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    items = await source.search("lights status")
    states = read_states(home_assistant)
    assert {i.title for i in items} == set(DEMO_LIGHTS.values())
    for entity_id, name in DEMO_LIGHTS.items():
        item = next(i for i in items if i.title == name)
        assert item.text.startswith(f"{name} is {states[entity_id]['state']}")
        assert item.url == f"{home_assistant.url}/history?entity_id={entity_id}"
        brightness = states[entity_id]["attributes"].get("brightness")
        if states[entity_id]["state"] == "on" and brightness is not None:
            assert f"brightness {brightness}" in item.text
    assert_no_secret(items, home_assistant.token)


@pytest.mark.slow
async def test_garage_door_question_finds_only_the_garage_cover(
    source: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    items = await source.search("is the garage door open")
    real = read_states(home_assistant)["cover.garage_door"]["state"]
    assert [i.title for i in items] == ["Garage Door"]
    assert items[0].text == f"Garage Door is {real}"
    assert items[0].url is not None and items[0].url.endswith("entity_id=cover.garage_door")


@pytest.mark.slow
async def test_temperature_in_the_living_room_uses_the_area_from_the_registry(
    source: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    # The harness put sensor.outside_temperature in the "Living Room" area; its name
    # does not say "living room", so only the area can have matched it.
    items = await source.search("temperature in the living room")
    sensor = read_states(home_assistant)["sensor.outside_temperature"]
    unit = sensor["attributes"]["unit_of_measurement"]
    assert [i.title for i in items] == ["Outside Temperature"]
    assert items[0].text == f"Outside Temperature is {sensor['state']} {unit} (area Living Room)"


@pytest.mark.slow
async def test_which_lights_are_on_in_the_kitchen_filters_by_state_and_name(
    source: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    states = read_states(home_assistant)
    on = await source.search("which lights are on")
    assert {i.title for i in on} == {
        name for eid, name in DEMO_LIGHTS.items() if states[eid]["state"] == "on"
    }
    off = await source.search("which lights are off")
    assert {i.title for i in off} == {
        name for eid, name in DEMO_LIGHTS.items() if states[eid]["state"] == "off"
    }
    kitchen = await source.search("which lights are on in the kitchen")
    expected = ["Kitchen Lights"] if states["light.kitchen_lights"]["state"] == "on" else []
    assert [i.title for i in kitchen] == expected


@pytest.mark.slow
async def test_fuzzy_names_and_exact_entity_ids_match(source: HomeAssistantSource) -> None:
    assert [i.title for i in await source.search("kitchn lights")] == ["Kitchen Lights"]
    assert [i.title for i in await source.search("light.bed_light")] == ["Bed Light"]
    locks = await source.search("which doors are unlocked")
    assert {i.title for i in locks} == {"Kitchen Door", "Poorly Installed Door"}


@pytest.mark.slow
async def test_nothing_matched_is_an_empty_list(source: HomeAssistantSource) -> None:
    assert await source.search("temperature in the bathroom") == []
    assert await source.search("zebra crossing") == []


@pytest.mark.slow
async def test_max_results_caps_the_items(home_assistant: HomeAssistant) -> None:
    src = make_source(home_assistant.url, home_assistant.token, max_results=2)
    try:
        assert len(await src.search("lights status")) == 2
    finally:
        await src.aclose()


@pytest.mark.slow
async def test_info_reads_the_version_from_api_config(
    source: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    facts = await source.info()
    assert facts["version"] == HA_VERSION
    assert facts["type"] == "homeassistant" and facts["allow_control"] is False
    assert home_assistant.token not in repr(facts)


# --- control ----------------------------------------------------------------------------


@pytest.mark.slow
async def test_control_is_refused_by_default_and_changes_nothing(
    source: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    call_service(home_assistant, "light", "turn_on", "light.kitchen_lights")
    before = read_states(home_assistant)["light.kitchen_lights"]
    query = "turn off the kitchen light"
    command = source.command(query)
    assert command is not None and (command.action, command.target) == ("off", "the kitchen light")
    with pytest.raises(ControlNotAllowed):
        await source.act(command)
    after = read_states(home_assistant)["light.kitchen_lights"]
    assert after["state"] == "on"
    assert after["last_updated"] == before["last_updated"]  # no service touched it


@pytest.mark.slow
async def test_search_on_a_commands_words_only_reads_the_devices_it_names(
    controller: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    """`search` never acts, even with control allowed: it reports what the command names."""
    call_service(home_assistant, "light", "turn_off", "light.bed_light")
    before = read_states(home_assistant)["light.bed_light"]
    items = await controller.search("turn on the bed light")
    assert [(i.title, i.text) for i in items] == [("Bed Light", "Bed Light is off")]
    after = read_states(home_assistant)["light.bed_light"]
    assert after["state"] == "off" and after["last_updated"] == before["last_updated"]


@pytest.mark.slow
async def test_control_allowed_flips_a_demo_light_and_back(
    controller: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    call_service(home_assistant, "light", "turn_off", "light.bed_light")
    try:
        items = await controller.act(command_of(controller, "turn on the bed light"))
        assert [i.title for i in items] == ["Bed Light"]
        assert items[0].text == "Called light.turn_on on Bed Light: now on."
        assert read_states(home_assistant)["light.bed_light"]["state"] == "on"
        items = await controller.act(command_of(controller, "switch the bed light off"))
        assert items[0].text == "Called light.turn_off on Bed Light: now off."
        assert read_states(home_assistant)["light.bed_light"]["state"] == "off"
    finally:
        call_service(home_assistant, "light", "turn_off", "light.bed_light")


@pytest.mark.slow
async def test_control_closes_the_garage_door_cover(
    controller: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    call_service(home_assistant, "cover", "open_cover", "cover.garage_door")
    try:
        items = await controller.act(command_of(controller, "close the garage door"))
        assert [i.title for i in items] == ["Garage Door"]
        assert items[0].text.startswith("Called cover.close_cover on Garage Door")
        # The demo cover moves over a few seconds; it is closing or closed, never open.
        assert read_states(home_assistant)["cover.garage_door"]["state"] in ("closing", "closed")
    finally:
        call_service(home_assistant, "cover", "close_cover", "cover.garage_door")


@pytest.mark.slow
@pytest.mark.parametrize(
    "query",
    [
        "turn off the living room",  # a fan, a light and a media player tie
        "turn on the lights",  # every light: names none of them
        "open the kitchen lights",  # a light cannot be opened
    ],
)
async def test_a_command_that_names_no_one_device_calls_nothing_and_answers_nothing(
    controller: HomeAssistantSource, home_assistant: HomeAssistant, query: str
) -> None:
    """Only `Unchanged` items: the dispatcher records such an act as `empty`, a command
    that changed nothing; and no device a command can reach changed state. (Compared by
    `last_changed`, which moves only with the state: the demo's media players refresh
    their attributes, and so `last_updated`, on their own.)"""

    before = device_states(home_assistant)
    items = await controller.act(command_of(controller, query))
    assert all(isinstance(i, Unchanged) for i in items)
    assert device_states(home_assistant) == before


async def act_seen(
    hass: HomeAssistant, query: str, **config: Any
) -> tuple[list[Item], float, list[str]]:
    """One command through a controlling source configured with `config`: its items, how
    long `act` took, and what it asked HA in order: `call <entity>` for a service call,
    `read <entity>` for a device state read back on its own (`/api/states/<id>`)."""
    src = make_source(hass.url, hass.token, allow_control=True, **config)
    await src.start()
    asked: list[str] = []

    async def note(request: httpx.Request) -> None:
        if request.url.path.startswith("/api/states/"):
            asked.append("read " + request.url.path.removeprefix("/api/states/"))
        elif request.url.path.startswith("/api/services/"):
            asked.append("call " + json.loads(request.content)["entity_id"])

    src._http().event_hooks["request"].append(note)
    try:
        started = time.monotonic()
        items = await src.act(command_of(src, query))
        return items, time.monotonic() - started, asked
    finally:
        await src.aclose()


async def act_watched(
    hass: HomeAssistant, query: str, **config: Any
) -> tuple[Item, float, list[str]]:
    """`act_seen` of a command for one device: its item, the time, the entities read back."""
    (item,), waited, asked = await act_seen(hass, query, **config)
    reads = [a.removeprefix("read ") for a in asked if a.startswith("read ")]
    return item, waited, reads


@pytest.mark.slow
async def test_a_device_that_reports_after_the_call_returned_is_seen_changed(
    home_assistant: HomeAssistant,
) -> None:
    """The attic hatch locks half a second after its call returned: HA's answer to the
    call holds no change, so the source reads the lock back and reports what it became,
    as a change, with how long it took."""
    call_service(home_assistant, "lock", "unlock", "lock.attic_hatch")
    assert read_states(home_assistant)["lock.attic_hatch"]["state"] == "unlocked"
    item, _, reads = await act_watched(
        home_assistant, "lock the attic hatch", timeout_s=30, confirm_s=20
    )
    assert not isinstance(item, Unchanged)
    assert item.text.startswith("Called lock.lock on Attic Hatch: now locked (reported after ")
    after_s = float(item.text.split("reported after ")[1].split(" s")[0])
    assert 0.25 <= after_s < 20  # the first read back is a quarter second after the call
    assert reads and set(reads) == {"lock.attic_hatch"}
    assert read_states(home_assistant)["lock.attic_hatch"]["state"] == "locked"


@pytest.mark.slow
async def test_a_device_that_ignores_the_call_is_watched_then_reported_unchanged(
    home_assistant: HomeAssistant,
) -> None:
    """The cellar hatch never locks: after `confirm_s` of reading it back the item says
    no change within that time, the state it stayed in, and that its history tells a
    slow device from a deaf one; it is called once, never again."""
    before = read_states(home_assistant)["lock.cellar_hatch"]
    item, waited, reads = await act_watched(
        home_assistant, "lock the cellar hatch", timeout_s=10, confirm_s=1
    )
    assert isinstance(item, Unchanged) and item.reason == "no_change"
    assert item.text == (
        "Called lock.lock on Cellar Hatch: Home Assistant reported no change within 1 s "
        "(it was unlocked); the device may be slower than that, or may have ignored the "
        "call: its history shows which."
    )
    assert waited >= 1.0
    assert 1 <= len(reads) <= 5 and set(reads) == {"lock.cellar_hatch"}
    after = read_states(home_assistant)["lock.cellar_hatch"]
    assert (after["state"], after["last_changed"]) == ("unlocked", before["last_changed"])


@pytest.mark.slow
async def test_with_confirm_off_an_unreported_change_is_not_waited_for(
    home_assistant: HomeAssistant,
) -> None:
    item, _, reads = await act_watched(
        home_assistant, "lock the cellar hatch", timeout_s=10, confirm_s=0
    )
    assert isinstance(item, Unchanged) and item.reason == "no_change"
    assert item.text == (
        "Called lock.lock on Cellar Hatch: Home Assistant reported no change yet (it was unlocked)."
    )
    assert reads == []


@pytest.mark.slow
async def test_devices_are_all_called_before_any_is_watched_and_share_one_wait(
    home_assistant: HomeAssistant,
) -> None:
    """ "lock all hatches": both hatches are called first, then read back together for one
    `confirm_s`; the attic hatch's late change is seen, the cellar hatch stays unchanged,
    and reading stops for a device once it changed."""
    call_service(home_assistant, "lock", "unlock", "lock.attic_hatch")
    items, _, asked = await act_seen(home_assistant, "lock all hatches", timeout_s=30, confirm_s=3)
    by_title = {item.title: item for item in items}
    assert set(by_title) == {"Attic Hatch", "Cellar Hatch"}
    assert not isinstance(by_title["Attic Hatch"], Unchanged)
    assert "now locked (reported after" in by_title["Attic Hatch"].text
    cellar = by_title["Cellar Hatch"]
    assert isinstance(cellar, Unchanged) and "no change within 3 s" in cellar.text
    calls = [a for a in asked if a.startswith("call ")]
    assert sorted(calls) == ["call lock.attic_hatch", "call lock.cellar_hatch"]
    first_read = next(i for i, a in enumerate(asked) if a.startswith("read "))
    assert all(a.startswith("read ") for a in asked[first_read:])
    attic_reads = [i for i, a in enumerate(asked) if a == "read lock.attic_hatch"]
    cellar_reads = [i for i, a in enumerate(asked) if a == "read lock.cellar_hatch"]
    assert attic_reads and cellar_reads[-1] > attic_reads[-1]
    assert read_states(home_assistant)["lock.attic_hatch"]["state"] == "locked"


class SlowLockStub(WireServer):
    """HA's REST wire format for one lock that never reports a change: `/api/states`, the
    service call (HA answers the states that changed during it: none), and
    `/api/states/<id>`, the only route faults are armed on (the read back)."""

    LOCK: ClassVar[dict[str, Any]] = {
        "entity_id": "lock.shed",
        "state": "unlocked",
        "attributes": {"friendly_name": "Shed Lock"},
    }

    def routes(self) -> list[Route]:
        return [
            Route("/api/states", lambda _r: JSONResponse([self.LOCK])),
            Route(
                "/api/template",
                lambda _r: Response("[]", media_type="text/plain"),
                methods=["POST"],
            ),
            Route("/api/services/lock/lock", lambda _r: JSONResponse([]), methods=["POST"]),
            Route("/api/states/{entity_id}", self._one),
        ]

    async def _one(self, request: Request) -> Response:
        return await self.serve(request, lambda _r, _s: JSONResponse(self.LOCK))


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (Fault.status(500), " Reading its state back failed: server_error."),
        (Fault.status(401), " Reading its state back failed: unauthorized."),
        (Fault.not_json(), " Reading its state back failed: malformed_response."),
        (
            Fault.custom(200, {"entity_id": "lock.shed"}),
            " Reading its state back failed: malformed_response.",
        ),
        (Fault.delay(30), ""),  # a read that hangs: the watch ends on time, nothing failed
    ],
    ids=["500", "401", "html", "no-state", "hang"],
)
async def test_a_read_back_that_fails_is_said_and_ends_the_watch_in_time(
    fault: Fault, said: str
) -> None:
    """The call went through; only reading the device back failed. The item still says
    the call was made and no change was seen, and why it could not look (never a guess
    that it changed), within the watch's time even when the read hangs."""
    with SlowLockStub() as stub:
        stub.set_fault(fault)
        src = make_source(stub.url, "token", allow_control=True, timeout_s=10, confirm_s=1)
        await src.start()
        try:
            started = time.monotonic()
            (item,) = await src.act(command_of(src, "lock the shed lock"))
            waited = time.monotonic() - started
        finally:
            await src.aclose()
    assert isinstance(item, Unchanged) and item.reason == "no_change"
    assert item.text == (
        "Called lock.lock on Shed Lock: Home Assistant reported no change within 1 s "
        "(it was unlocked); the device may be slower than that, or may have ignored the "
        "call: its history shows which." + said
    )
    assert waited < 5  # the watch's 1 s, not the source's 10 s timeout or the 30 s hang
    reads = [r for r in stub.requests if r.path == "/api/states/lock.shed"]
    assert len(reads) == 1  # a failed read is not tried again; a hanging one runs out the watch


async def test_a_watch_never_outlasts_most_of_the_call_timeout() -> None:
    src = make_source("http://127.0.0.1:9", "token", timeout_s=2, confirm_s=30)
    assert src.confirm_s == pytest.approx(1.6)


@pytest.mark.slow
async def test_a_device_already_in_the_asked_state_is_reported_unchanged(
    controller: HomeAssistantSource, home_assistant: HomeAssistant
) -> None:
    """HA answers the states a call changed: none here, and the item says so, with the
    state the device was in, instead of a change it did not see."""
    call_service(home_assistant, "light", "turn_on", "light.kitchen_lights")
    (item,) = await controller.act(command_of(controller, "turn on the kitchen lights"))
    assert isinstance(item, Unchanged) and item.reason == "no_change"
    assert (
        item.text
        == "Called light.turn_on on Kitchen Lights: it was already on, so nothing changed."
    )
    assert read_states(home_assistant)["light.kitchen_lights"]["state"] == "on"


# --- failures ---------------------------------------------------------------------------


@pytest.mark.slow
async def test_wrong_token_is_unauthorized_and_never_echoed(
    home_assistant: HomeAssistant,
) -> None:
    wrong = "not-a-valid-token-" + "x" * 20
    src = make_source(home_assistant.url, wrong)
    try:
        with pytest.raises(SourceUnauthorized) as caught:
            await src.search("lights status")
        assert wrong not in str(caught.value)
        facts = await src.info()
        assert facts["error"] == "unauthorized" and "version" not in facts
    finally:
        await src.aclose()


async def test_refused_port_is_unavailable() -> None:
    src = make_source(closed_port_url(), "token")
    try:
        with pytest.raises(SourceUnavailable):
            await src.search("lights status")
    finally:
        await src.aclose()


@pytest.fixture
def silent_port() -> Iterator[str]:
    """A port that accepts TCP connections but never answers (a hung server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_server_that_never_answers_times_out(silent_port: str) -> None:
    src = make_source(silent_port, "token", timeout_s=0.5)
    try:
        with pytest.raises(SourceTimeout):
            await src.search("lights status")
    finally:
        await src.aclose()


class HaRestStub(WireServer):
    """HA's `/api/states` wire format (a JSON list of states), for injected faults only;
    `/api/template` renders `template` (HA answers a rendered template as text/plain)."""

    STATES: ClassVar[list[dict[str, Any]]] = [
        {"entity_id": "light.porch", "state": "on", "attributes": {"friendly_name": "Porch Light"}},
    ]

    def __init__(self, template: str = "[]") -> None:
        super().__init__()
        self.template = template

    def routes(self) -> list[Route]:
        return [
            Route("/api/states", self._states),
            Route("/api/template", self._template, methods=["POST"]),
        ]

    async def _states(self, request: Request) -> Response:
        def answer(_: Request, shape: str) -> Response:
            if shape == "wrong_shape":
                return JSONResponse({"message": "not a list"})
            return JSONResponse([] if shape == "empty" else self.STATES)

        return await self.serve(request, answer)

    async def _template(self, request: Request) -> Response:
        return Response(self.template, media_type="text/plain")


PORCH = '[{"entity_id": "light.porch", "state": "on", "attributes": {"brightness": %s}}]'


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault.status(500), SourceServerError),
        (Fault.status(429), SourceRateLimited),
        (Fault.not_json(), SourceBadResponse),
        (Fault.wrong_shape(), SourceBadResponse),
        (Fault.custom(200, PORCH % "NaN"), SourceBadResponse),
        (Fault.custom(200, PORCH % "Infinity"), SourceBadResponse),
        (Fault.custom(200, PORCH % "1e999"), SourceBadResponse),
        (Fault.custom(200, "[" * 100_000 + "]" * 100_000), SourceBadResponse),
    ],
    ids=["500", "429", "html", "shape", "nan", "infinity", "1e999", "deep"],
)
async def test_server_errors_and_malformed_bodies_are_typed(fault: Fault, error: type) -> None:
    with HaRestStub() as stub:
        stub.set_fault(fault)
        src = make_source(stub.url, "token")
        try:
            with pytest.raises(error):
                await src.search("porch light")
        finally:
            await src.aclose()
        assert stub.requests[0].headers["authorization"] == "Bearer token"


async def test_stub_sanity_the_same_query_answers_without_a_fault() -> None:
    with HaRestStub() as stub:
        src = make_source(stub.url, "token")
        try:
            items = await src.search("porch light")
        finally:
            await src.aclose()
    assert [i.text for i in items] == ["Porch Light is on"]


async def test_429_is_rate_limited_not_a_plain_error() -> None:
    with HaRestStub() as stub:
        stub.set_fault(Fault.status(429))
        src = make_source(stub.url, "token")
        try:
            with pytest.raises(SourceRateLimited) as caught:
                await src.search("porch light")
        finally:
            await src.aclose()
    assert caught.value.reason == "rate_limited"
    assert len(stub.requests) == 1  # a 429 is not retried into the limit


async def test_an_area_template_too_deep_to_parse_leaves_areas_out() -> None:
    """Areas are an extra: a template answer no parser can take must not fail the search."""
    with HaRestStub(template="[" * 100_000 + "]" * 100_000) as stub:
        src = make_source(stub.url, "token")
        try:
            items = await src.search("porch light")
        finally:
            await src.aclose()
    assert [i.text for i in items] == ["Porch Light is on"]


async def test_an_endless_states_answer_is_cut_off() -> None:
    """`BodyServer` (tests/sources/hostile.py) stands in for an HA whose /api/states never
    ends; it counts what it wrote before the router hung up."""
    async with BodyServer(None) as server:
        src = make_source(server.url, "token")
        try:
            with pytest.raises(SourceBadResponse, match=f"over {ha.MAX_STATES_BYTES} bytes"):
                await src.search("porch light")
        finally:
            await src.aclose()
        await server.finished()
    assert server.client_left
    assert server.written < ha.MAX_STATES_BYTES + 24 * 1024 * 1024


async def test_credentials_in_the_url_are_neither_sent_nor_shown() -> None:
    """`HomeAssistantApi` (tests/support/faulty.py) speaks HA's REST API and answers 401 to
    anything but the bearer token, as HA does: Basic auth made of user:pass@ is refused."""
    with HomeAssistantApi("the-token") as api:
        src = make_source(api.url.replace("http://", "http://admin:hunter2@"), "the-token")
        try:
            items = await src.search("kitchen lights")
        finally:
            await src.aclose()
    assert [i.url for i in items] == [f"{api.url}/history?entity_id=light.kitchen_lights"]
    assert all(r.headers["authorization"] == "Bearer the-token" for r in api.requests)
    assert "hunter2" not in str([i.to_dict() for i in items])


def test_an_entity_id_without_a_domain_is_no_crash() -> None:
    """A broken integration's entity (no "." in its id, no friendly name) failed every
    status answer that looked at names (IndexError); it is named by its id instead."""
    from sources.homeassistant import match_entities

    states = [
        {"entity_id": "lightbad", "state": "on"},
        {"entity_id": "light.kitchen", "state": "on", "attributes": {"friendly_name": "Kitchen"}},
    ]
    matches = match_entities(states, {}, parse_request("kitchen status"))
    assert [m.entity_id for m in matches][:1] == ["light.kitchen"]
