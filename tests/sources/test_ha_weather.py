"""The `ha_weather` source against a real Home Assistant 2024.3.3 running its demo.

The forecast comes over HA's websocket API (`weather.get_forecasts` with
`return_response`); each expectation is checked against the same service's raw answer,
fetched independently by the harness's own websocket client. Day selection is also
tested as a pure function on fixed dates, because the real clock decides which weekday
"today" is in the live test.
"""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import date, datetime, timedelta
from typing import Any

import pytest

from sources import ha_weather as hw
from sources.base import SourceError, SourceTimeout, SourceUnauthorized, SourceUnavailable
from sources.ha_weather import HAWeatherSource
from tests.support import homeassistant as ha_harness
from tests.support.homeassistant import HomeAssistant, ws_commands
from tests.support.wire_servers import closed_port_url

# The session-wide real HA (one per test session, shared with the other HA test modules).
home_assistant = ha_harness.home_assistant

ENTITY = "weather.demo_weather_south"
DAY_TEXT = re.compile(
    r"^(Today \(\w+day\)|Tomorrow \(\w+day\)|\w+day): [a-z ]+, high -?\d+ °C, low -?\d+ °C, "
    r"precipitation [\d.]+ mm \(\d+% chance\)$"
)


def make_source(url: str, token: str, **extra: Any) -> HAWeatherSource:
    config = hw.Config.model_validate(
        {"type": "ha_weather", "url": url, "token": token, "entity_id": ENTITY, **extra}
    )
    source = hw.build("forecast_ha", config)
    assert isinstance(source, HAWeatherSource)
    return source


@pytest.fixture
async def source(home_assistant: HomeAssistant) -> AsyncIterator[HAWeatherSource]:
    src = make_source(home_assistant.url, home_assistant.token, timeout_s=10)
    await src.start()
    yield src
    await src.aclose()


async def raw_forecast(hass: HomeAssistant) -> list[dict[str, Any]]:
    """The service's answer, fetched without the source under test."""
    [result] = await ws_commands(
        hass.url,
        hass.token,
        [
            {
                "type": "call_service",
                "domain": "weather",
                "service": "get_forecasts",
                "service_data": {"type": "daily"},
                "target": {"entity_id": ENTITY},
                "return_response": True,
            }
        ],
    )
    forecast: list[dict[str, Any]] = result["response"][ENTITY]["forecast"]
    return forecast


def item_date(title: str) -> date:
    return date.fromisoformat(title.rsplit(" ", 1)[1])


# --- against the real demo --------------------------------------------------------------


@pytest.mark.slow
async def test_forecast_items_match_the_demo_weather_service(
    source: HAWeatherSource, home_assistant: HomeAssistant
) -> None:
    raw = await raw_forecast(home_assistant)
    items = await source.search("weather forecast for the week ahead")
    assert len(items) == min(len(raw), 7)
    for item, entry in zip(items, raw, strict=False):
        day = datetime.fromisoformat(entry["datetime"]).date()
        assert item.title == f"Demo Weather South: {day.strftime('%A')} {day.isoformat()}"
        assert DAY_TEXT.match(item.text), item.text
        assert f"high {round(entry['temperature'])} °C" in item.text
        assert f"low {round(entry['templow'])} °C" in item.text
        assert f"precipitation {entry['precipitation']:g} mm" in item.text
        assert item.url == f"{home_assistant.url}/history?entity_id={ENTITY}"
        assert home_assistant.token not in item.text + item.title + (item.url or "")
    assert items[0].text.startswith("Today (")


@pytest.mark.slow
async def test_today_tomorrow_and_weekend_select_days(
    source: HAWeatherSource, home_assistant: HomeAssistant
) -> None:
    raw = await raw_forecast(home_assistant)
    first = datetime.fromisoformat(raw[0]["datetime"])
    today = datetime.now(first.tzinfo).date()

    [item] = await source.search("what's the weather today")
    assert item_date(item.title) == today and item.text.startswith("Today (")
    [item] = await source.search("will it rain tomorrow")
    assert item_date(item.title) == today + timedelta(days=1)
    assert item.text.startswith("Tomorrow (")

    weekend = await source.search("forecast for this weekend")
    if today.weekday() == 6:  # Sunday: only what is left of this weekend
        expected = {today}
    else:
        saturday = today + timedelta(days=5 - today.weekday())
        expected = {saturday, saturday + timedelta(days=1)}
    forecast_days = {datetime.fromisoformat(e["datetime"]).date() for e in raw}
    expected &= forecast_days
    assert expected  # the demo forecasts a week, so some weekend day is always in it
    assert {item_date(i.title) for i in weekend} == expected
    assert all(item_date(i.title).weekday() >= 5 for i in weekend)


@pytest.mark.slow
async def test_max_days_caps_the_forecast(home_assistant: HomeAssistant) -> None:
    src = make_source(home_assistant.url, home_assistant.token, max_days=3)
    try:
        items = await src.search("weather for the coming days")
        [today] = await src.search("weather")  # naming no day: today
    finally:
        await src.aclose()
    assert len(items) == 3
    assert today.text.startswith("Today (")


@pytest.mark.slow
async def test_wrong_token_on_the_websocket_is_unauthorized(home_assistant: HomeAssistant) -> None:
    wrong = "wrong-token-" + "y" * 30
    src = make_source(home_assistant.url, wrong)
    try:
        with pytest.raises(SourceUnauthorized) as caught:
            await src.search("weather today")
    finally:
        await src.aclose()
    assert "auth_invalid" in str(caught.value)  # refused by the websocket handshake
    assert wrong not in str(caught.value)


@pytest.mark.slow
async def test_unknown_weather_entity_is_a_source_error(home_assistant: HomeAssistant) -> None:
    src = make_source(home_assistant.url, home_assistant.token, entity_id="weather.nowhere")
    try:
        with pytest.raises(SourceError, match=r"weather\.nowhere"):
            await src.search("weather today")
    finally:
        await src.aclose()


@pytest.mark.slow
async def test_info_reads_the_version(source: HAWeatherSource) -> None:
    facts = await source.info()
    assert facts == {"type": "ha_weather", "entity_id": ENTITY, "version": "2024.3.3"}


# --- failures without HA ----------------------------------------------------------------


async def test_refused_port_is_unavailable() -> None:
    src = make_source(closed_port_url(), "token")
    try:
        with pytest.raises(SourceUnavailable):
            await src.search("weather today")
    finally:
        await src.aclose()


@pytest.fixture
def silent_port() -> Iterator[str]:
    """A port that accepts TCP connections but never answers the websocket upgrade."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_silent_server_times_out(silent_port: str) -> None:
    src = make_source(silent_port, "token", timeout_s=0.5)
    try:
        with pytest.raises(SourceTimeout):
            await src.search("weather today")
    finally:
        await src.aclose()


def test_config_rejects_a_non_weather_entity() -> None:
    with pytest.raises(ValueError, match="entity_id"):
        hw.Config.model_validate(
            {"type": "ha_weather", "url": "http://h:8123", "token": "t", "entity_id": "light.x"}
        )
