"""Home Assistant's websocket exchange (sources/ha_websocket.py) when the far end misbehaves.

A real HA cannot be made to redirect its websocket, send NaN or a 5 MB error code, so
these tests run against `tests.sources.hostile.HaWire`: the `websockets` library's own
server speaking HA's documented websocket API (auth_required → auth → auth_ok, then
`result` messages) and the REST GETs the sources make. What a well-behaved HA does is
covered against the real HA 2024.3.3 in test_ha_weather.py and test_ha_recognize.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sources import ha_weather as hw
from sources import ha_websocket
from sources import homeassistant as ha
from sources.base import Command, SourceBadResponse, SourceError, SourceServerError
from sources.ha_weather import HAWeatherSource
from sources.homeassistant import HomeAssistantSource
from tests.sources.hostile import HaWire

TOKEN = "long-lived-token-" + "t" * 40
ENTITY = "weather.home"


def weather_source(url: str, **extra: Any) -> HAWeatherSource:
    config = hw.Config.model_validate(
        {"type": "ha_weather", "url": url, "token": TOKEN, "entity_id": ENTITY, **extra}
    )
    source = hw.build("forecast_ha", config)
    assert isinstance(source, HAWeatherSource)
    return source


def home_source(url: str) -> HomeAssistantSource:
    config = ha.Config.model_validate(
        {"type": "homeassistant", "url": url, "token": TOKEN, "allow_control": True}
    )
    source = ha.build("ha", config)
    assert isinstance(source, HomeAssistantSource)
    return source


def forecast(**entry: Any) -> dict[str, Any]:
    """`weather.get_forecasts`' documented answer, one day (today, in UTC)."""
    day = {
        "datetime": datetime.now(UTC).isoformat(),
        "condition": "sunny",
        "temperature": 21.0,
        "templow": 12.0,
        "precipitation": 0.0,
        "precipitation_probability": 10,
    } | entry
    return {"success": True, "result": {"response": {ENTITY: {"forecast": [day]}}}}


STATE = {
    f"/api/states/{ENTITY}": {
        "entity_id": ENTITY,
        "state": "sunny",
        "attributes": {"friendly_name": "Home", "temperature_unit": "°C"},
    }
}


def ws_url(server: HaWire) -> str:
    return server.url.replace("http://", "ws://") + "/api/websocket"


# --- redirects: the token must never leave for where a redirect points ------------------


async def test_the_recorder_sees_an_auth_message_when_dialled_directly() -> None:
    """Sanity for the redirect tests: the same call, not redirected, does authenticate."""
    async with HaWire(TOKEN) as target:
        message = await ha_websocket.call(
            target.url, TOKEN, {"type": "ping"}, timeout_s=5, what="HA"
        )
    assert message["success"] is True
    assert target.auth_messages == [{"type": "auth", "access_token": TOKEN}]


@pytest.mark.parametrize("same_origin", [False, True], ids=["other-origin", "same-origin"])
async def test_a_redirected_websocket_is_refused_and_sends_no_token(same_origin: bool) -> None:
    async with HaWire(TOKEN) as target, HaWire(TOKEN) as front:
        front.redirect_to = (
            "/elsewhere/api/websocket" if same_origin else ws_url(target)  # another port
        )
        with pytest.raises(SourceBadResponse) as caught:
            await ha_websocket.call(front.url, TOKEN, {"type": "ping"}, timeout_s=5, what="HA")
    message = str(caught.value)
    assert "redirected its websocket" in message and "HTTP 302" in message
    assert TOKEN not in message
    assert caught.value.reason == "malformed_response"
    assert target.headers == [] and target.auth_messages == []  # never even connected
    assert front.auth_messages == [] and len(front.headers) == 1  # no second try


async def test_ha_weather_over_a_redirect_sends_no_token() -> None:
    async with HaWire(TOKEN, answer=lambda _: forecast()) as target, HaWire(TOKEN) as front:
        front.redirect_to = ws_url(target)
        source = weather_source(front.url)
        try:
            with pytest.raises(SourceBadResponse, match="redirect") as caught:
                await source.search("weather today")
        finally:
            await source.aclose()
    assert target.headers == [] and target.auth_messages == []
    assert TOKEN not in str(caught.value)


async def test_homeassistant_recognizer_over_a_redirect_sends_no_token() -> None:
    async with HaWire(TOKEN) as target, HaWire(TOKEN) as front:
        front.redirect_to = ws_url(target)
        source = home_source(front.url)
        try:
            command = source.command("turn on the kitchen light")
            assert command is not None
            recognized = await source.recognize(command)
        finally:
            await source.aclose()
    assert target.headers == [] and target.auth_messages == []
    assert isinstance(recognized, Command) and recognized.recognized is not None
    assert recognized.recognized["error"] == "malformed_response"
    assert TOKEN not in str(recognized.recognized)


# --- credentials in the URL -------------------------------------------------------------


async def test_credentials_in_the_url_are_neither_sent_nor_shown() -> None:
    async with HaWire(TOKEN, answer=lambda _: forecast(), rest=STATE) as server:
        url = server.url.replace("http://", "http://user:hunter2@")
        source = weather_source(url)
        try:
            [item] = await source.search("weather today")
        finally:
            await source.aclose()
    assert item.url == f"{server.url}/history?entity_id={ENTITY}"
    assert "hunter2" not in f"{item.title} {item.text} {item.url}"
    upgrade, rest = server.headers  # the websocket, then GET /api/states/<entity>
    assert "Authorization" not in upgrade  # no Basic auth made of user:hunter2
    assert rest["Authorization"] == f"Bearer {TOKEN}"
    assert server.auth_messages == [{"type": "auth", "access_token": TOKEN}]


# --- answers no HA sends ----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        '{"id": 1, "type": "result", "success": true, "result": NaN}',
        '{"id": 1, "type": "result", "success": true, "result": [Infinity]}',
        '{"id": 1, "type": "result", "success": true, "result": 1e999}',
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=["nan", "infinity", "1e999", "deep"],
)
async def test_json_no_ha_sends_is_malformed(raw: str) -> None:
    async with HaWire(TOKEN, raw_messages=[raw]) as server:
        with pytest.raises(SourceBadResponse, match="not JSON"):
            await ha_websocket.call(server.url, TOKEN, {"type": "x"}, timeout_s=5, what="HA")


@pytest.mark.parametrize("field", ["temperature", "templow", "precipitation"])
async def test_a_forecast_number_out_of_range_is_malformed(field: str) -> None:
    """1e999 would be infinity (refused when decoded); a 400-digit int passes the JSON
    decoder as an int but is no temperature either."""
    async with HaWire(TOKEN, answer=lambda _: forecast(**{field: 10**400}), rest=STATE) as server:
        source = weather_source(server.url)
        try:
            with pytest.raises(SourceBadResponse, match="out of range"):
                await source.search("weather today")
        finally:
            await source.aclose()


def test_parse_days_refuses_nan_and_infinity() -> None:
    for value in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(SourceBadResponse):
            hw.parse_days(forecast(temperature=value)["result"], ENTITY)


async def test_a_message_over_the_limit_is_malformed() -> None:
    huge = '{"id": 1, "type": "result", "success": true, "result": "' + "x" * (5 << 20) + '"}'
    async with HaWire(TOKEN, raw_messages=[huge]) as server:
        with pytest.raises(SourceBadResponse, match="over"):
            await ha_websocket.call(server.url, TOKEN, {"type": "x"}, timeout_s=5, what="HA")


async def test_a_huge_error_code_and_message_are_cut() -> None:
    error = {"code": "c" * 1_500_000, "message": "m" * 1_500_000}
    failed = {"success": False, "error": error}
    async with HaWire(TOKEN, answer=lambda _: failed, rest=STATE) as server:
        source = weather_source(server.url)
        try:
            with pytest.raises(SourceError) as caught:
                await source.search("weather today")
        finally:
            await source.aclose()
    assert len(str(caught.value)) < 600
    assert not isinstance(caught.value, SourceServerError)


def test_failure_cuts_what_the_server_said() -> None:
    code, text = ha_websocket.failure(
        {"error": {"code": ["x" * 100_000] * 10_000, "message": "y" * 1_000_000}}
    )
    # cut to http.SHOWN_CHARS, marked where cut (the scrubber masks a secret cut there)
    assert len(code) <= 201 and text == "y" * 200 + "…"
