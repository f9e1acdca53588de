"""`open_meteo` against a loopback server replaying Open-Meteo's documented wire format.

Open-Meteo cannot be reached from the test machine, so `tests.support.wire_servers.
OpenMeteoServer` answers `GET /v1/forecast` exactly as https://open-meteo.com/en/docs
describes: `daily`/`hourly`/`current` blocks of parallel arrays keyed by `time`, `*_units`,
`utc_offset_seconds`, and HTTP 400 `{"error": true, "reason": ...}` for a bad request
(including unknown variable names, so a typo in what we ask for fails here). Its dates start
at "today" in the requested timezone, from the real clock, so the day picking is tested
against real dates; the day words are tested on fixed dates in test_dates.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, date, datetime, timedelta

import pytest

from sources import open_meteo, registry
from sources.base import (
    SourceBadResponse,
    SourceError,
    SourceRateLimited,
    SourceServerError,
    SourceTimeout,
    SourceUnauthorized,
    SourceUnavailable,
)
from sources.open_meteo import OpenMeteoSource, parse_forecast
from tests.sources.hostile import BodyServer
from tests.support.wire_servers import Fault, OpenMeteoServer, closed_port_url


@pytest.fixture(scope="module")
def server() -> Iterator[OpenMeteoServer]:
    with OpenMeteoServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _reset(server: OpenMeteoServer) -> None:
    server.clear_faults()
    server.auto_timezone = "UTC"
    server.requests.clear()


def make(url: str, **extra: object) -> OpenMeteoSource:
    config = registry.kind_module("open_meteo").Config.model_validate(
        {
            "type": "open_meteo",
            "url": url,
            "latitude": 59.91,
            "longitude": 10.75,
            "timeout_s": 2,
            **extra,
        }
    )
    source = registry.kind_module("open_meteo").build("forecast", config)
    assert isinstance(source, OpenMeteoSource)
    return source


@pytest.fixture
async def forecast(server: OpenMeteoServer) -> AsyncIterator[OpenMeteoSource]:
    source = make(server.url)
    await source.start()
    yield source
    await source.aclose()


def next_weekday(start: date, weekday: int) -> date:
    return start + timedelta(days=(weekday - start.weekday()) % 7)


def title_for(day: date) -> str:
    return f"Weather for {day.strftime('%A')} {day.isoformat()}"


# -- the request ----------------------------------------------------------------------------


async def test_request_uses_documented_parameters(
    forecast: OpenMeteoSource, server: OpenMeteoServer
) -> None:
    await forecast.search("weather")
    [seen] = server.requests
    assert seen.path == "/v1/forecast"
    assert seen.param("daily") == (
        "weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum,"
        "precipitation_probability_max,wind_speed_10m_max"
    )
    assert seen.param("hourly") == "temperature_2m,precipitation_probability,weather_code"
    assert seen.param("current") == "temperature_2m,weather_code,wind_speed_10m"
    assert seen.param("timezone") == "auto" and seen.param("forecast_days") == "7"
    assert (seen.param("latitude"), seen.param("longitude")) == ("59.91", "10.75")


# -- which days, against the server's real dates ------------------------------------------


async def test_today_is_the_default(forecast: OpenMeteoSource, server: OpenMeteoServer) -> None:
    today = server.today()
    [item] = await forecast.search("what is the weather")
    assert item.title == title_for(today)
    # DEFAULT_WEEK day 0: overcast, 3.6–9.4 °C, dry (10%), wind 14.8 km/h; plus "now".
    assert item.text.startswith(
        "Overcast, 4–9 °C, no precipitation (10% chance), wind up to 15 km/h. Now 6.5 °C"
    )
    assert item.url is not None and item.url.startswith(f"{server.url}/v1/forecast?latitude=59.91")


async def test_tomorrow_rain_question_leads_with_yes(
    forecast: OpenMeteoSource, server: OpenMeteoServer
) -> None:
    [item] = await forecast.search("will it rain tomorrow?")
    assert item.title == title_for(server.today() + timedelta(days=1))
    assert item.text.startswith("Yes, rain is likely tomorrow (80% chance, 2.3 mm expected).")
    assert "Most likely around 15:00." in item.text
    assert "Light rain, 4–9 °C, 2.3 mm precipitation (80% chance), wind up to 21 km/h." in item.text


async def test_rain_question_on_a_dry_day_leads_with_no(forecast: OpenMeteoSource) -> None:
    [item] = await forecast.search("is it going to rain today")
    assert item.text.startswith("Probably not: 10% chance of rain today.")


async def test_weekend_gives_one_item_per_weekend_day(
    forecast: OpenMeteoSource, server: OpenMeteoServer
) -> None:
    today = server.today()
    if today.weekday() == 6:  # on a Sunday only today is left of this weekend
        expected = [today]
    else:
        saturday = next_weekday(today, 5)
        expected = [saturday, saturday + timedelta(days=1)]
    items = await forecast.search("temperature this weekend")
    assert [i.title for i in items] == [title_for(d) for d in expected]
    for item, day in zip(items, expected, strict=True):
        weather = server.weather_for((day - today).days)
        assert open_meteo.describe(weather.weather_code) in item.text


async def test_weekday_name(forecast: OpenMeteoSource, server: OpenMeteoServer) -> None:
    today = server.today()
    friday = next_weekday(today, 4)
    [item] = await forecast.search("forecast for friday")
    assert item.title == title_for(friday)
    weather = server.weather_for((friday - today).days)
    assert item.text.startswith(open_meteo.describe(weather.weather_code))


async def test_this_week_covers_through_sunday(
    forecast: OpenMeteoSource, server: OpenMeteoServer
) -> None:
    today = server.today()
    items = await forecast.search("weather this week")
    span = 7 if today.weekday() == 6 else 7 - today.weekday()
    assert [i.title for i in items] == [title_for(today + timedelta(days=i)) for i in range(span)]


async def test_today_is_the_places_date_not_the_machines(server: OpenMeteoServer) -> None:
    # UTC+14 and UTC-11: at any hour at least one of them is on another date than UTC.
    for zone in ("Pacific/Kiritimati", "Pacific/Pago_Pago"):
        server.auto_timezone = zone
        source = make(server.url)
        await source.start()
        try:
            [item] = await source.search("weather today")
        finally:
            await source.aclose()
        assert item.title == title_for(server.today())


async def test_day_beyond_the_forecast_is_empty(server: OpenMeteoServer) -> None:
    source = make(server.url, forecast_days=1)
    await source.start()
    try:
        assert await source.search("weather the day after tomorrow") == []
        assert len(await source.search("weather today")) == 1
    finally:
        await source.aclose()


async def test_place_name_in_title(server: OpenMeteoServer) -> None:
    source = make(server.url, place_name="Oslo")
    await source.start()
    try:
        [item] = await source.search("weather")
    finally:
        await source.aclose()
    assert item.title.endswith(" in Oslo")


# -- parsing ---------------------------------------------------------------------------------

VALID_DAILY = {
    "time": ["2026-11-28", "2026-11-29"],
    "weather_code": [61, 0],
    "temperature_2m_max": [9.2, 3.0],
    "temperature_2m_min": [4.1, -4.6],
    "precipitation_sum": [2.3, 0.0],
    "precipitation_probability_max": [80, None],
    "wind_speed_10m_max": [21.0, 5.0],
}


def test_parse_uses_utc_offset_when_there_is_no_current_block() -> None:
    body = {"utc_offset_seconds": 3600, "daily": VALID_DAILY}
    forecast = parse_forecast(body, now=datetime(2026, 11, 27, 23, 30, tzinfo=UTC))
    assert forecast.today == date(2026, 11, 28)  # 00:30 local
    assert forecast.days[1].probability is None


def test_summary_handles_nulls_and_frost() -> None:
    forecast = parse_forecast(
        {"utc_offset_seconds": 0, "daily": VALID_DAILY}, now=datetime(2026, 11, 28, 12, tzinfo=UTC)
    )
    text = open_meteo.summarise_day(forecast.days[1], {})
    assert text == "Clear sky, -5 to 3 °C, no precipitation, wind up to 5 km/h."


@pytest.mark.parametrize(
    "daily",
    [
        {k: v for k, v in VALID_DAILY.items() if k != "precipitation_sum"},
        VALID_DAILY | {"temperature_2m_max": [9.2]},
        VALID_DAILY | {"time": ["28/11/2026", "2026-11-29"]},
        VALID_DAILY | {"weather_code": ["rain", 0]},
        "not an object",
    ],
)
def test_parse_rejects_broken_daily(daily: object) -> None:
    with pytest.raises(SourceBadResponse):
        parse_forecast({"daily": daily})


def test_parse_rejects_missing_daily() -> None:
    with pytest.raises(SourceBadResponse):
        parse_forecast({"latitude": 1.0})


# -- faults ----------------------------------------------------------------------------------


async def test_api_error_reason_is_reported(
    forecast: OpenMeteoSource, server: OpenMeteoServer
) -> None:
    server.set_fault(Fault.status(400))
    with pytest.raises(SourceError, match="must have the same number of elements") as caught:
        await forecast.search("weather")
    assert caught.value.reason == "error"


async def test_rate_limit_is_typed(forecast: OpenMeteoSource, server: OpenMeteoServer) -> None:
    server.set_fault(Fault.status(429))
    with pytest.raises(SourceRateLimited, match="Daily API request limit exceeded"):
        await forecast.search("weather")


@pytest.mark.parametrize("status", [401, 403])
async def test_refused_is_unauthorized(
    forecast: OpenMeteoSource, server: OpenMeteoServer, status: int
) -> None:
    server.set_fault(Fault.status(status))
    with pytest.raises(SourceUnauthorized):
        await forecast.search("weather")


@pytest.mark.parametrize("status", [500, 502])
async def test_server_errors(
    forecast: OpenMeteoSource, server: OpenMeteoServer, status: int
) -> None:
    server.set_fault(Fault.status(status))
    with pytest.raises(SourceServerError):
        await forecast.search("weather")


async def test_one_bad_gateway_is_retried(
    forecast: OpenMeteoSource, server: OpenMeteoServer
) -> None:
    server.set_fault(Fault.status(502), times=1)
    assert len(await forecast.search("weather")) == 1
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "fault",
    [
        Fault.not_json(),
        Fault.wrong_shape(),
        Fault.custom(200, {"latitude": 1.0, "daily_units": {}}),
    ],
)
async def test_malformed_bodies(
    forecast: OpenMeteoSource, server: OpenMeteoServer, fault: Fault
) -> None:
    server.set_fault(fault)
    with pytest.raises(SourceBadResponse):
        await forecast.search("weather")


async def test_empty_forecast_is_an_empty_list(
    forecast: OpenMeteoSource, server: OpenMeteoServer
) -> None:
    server.set_fault(Fault.empty())
    assert await forecast.search("weather today") == []


async def test_slow_answer_times_out(server: OpenMeteoServer) -> None:
    source = make(server.url, timeout_s=0.3)
    server.set_fault(Fault.delay(3))
    await source.start()
    try:
        with pytest.raises(SourceTimeout):
            await source.search("weather")
    finally:
        await source.aclose()


async def test_closed_port_is_unavailable() -> None:
    source = make(closed_port_url())
    await source.start()
    try:
        with pytest.raises(SourceUnavailable):
            await source.search("weather")
    finally:
        await source.aclose()


async def test_api_key_is_sent_but_never_shown(server: OpenMeteoServer) -> None:
    source = make(server.url, api_key="sekrit-key-123")
    await source.start()
    try:
        [item] = await source.search("weather")
        assert server.requests[-1].param("apikey") == "sekrit-key-123"
        assert "sekrit" not in (item.url or "") and "sekrit" not in item.text
        server.set_fault(Fault.custom(401, {"error": True, "reason": "Key sekrit-key-123 unknown"}))
        with pytest.raises(SourceUnauthorized) as caught:
            await source.search("weather")
        assert "sekrit" not in str(caught.value) and "unknown" in str(caught.value)
        assert "sekrit" not in str(await source.info())
        # an error answered with 200, and a key where a long reason is cut
        server.clear_faults()
        server.set_fault(Fault.custom(200, {"error": True, "reason": "Key sekrit-key-123 bad"}))
        with pytest.raises(SourceError) as caught:
            await source.search("weather")
        assert "sekrit" not in str(caught.value) and "bad" in str(caught.value)
        long = "x" * 195 + " sekrit-key-123 unknown"
        server.clear_faults()
        server.set_fault(Fault.custom(400, {"error": True, "reason": long}))
        with pytest.raises(SourceError) as caught:
            await source.search("weather")
        assert "sekrit" not in str(caught.value)
    finally:
        await source.aclose()


def test_config_validation() -> None:
    base = {"type": "open_meteo", "latitude": 0, "longitude": 0}
    assert open_meteo.Config.model_validate(base).url == "https://api.open-meteo.com"
    for bad in (
        {"latitude": 91},
        {"longitude": -181},
        {"forecast_days": 17},
        {"forecast_days": 0},
        {"url": "api.open-meteo.com"},
    ):
        with pytest.raises(ValueError):
            open_meteo.Config.model_validate(base | bad)


# -- answers Open-Meteo never sends ------------------------------------------------------------


def test_a_huge_bad_date_is_cut_in_the_message() -> None:
    huge = VALID_DAILY | {"time": ["x" * 3_000_000, "2026-11-29"]}
    with pytest.raises(SourceBadResponse, match="bad date") as caught:
        parse_forecast({"daily": huge})
    assert len(str(caught.value)) < 300


def test_a_huge_error_reason_is_cut_in_the_message() -> None:
    with pytest.raises(SourceError) as caught:
        parse_forecast({"error": True, "reason": "r" * 3_000_000})
    assert len(str(caught.value)) < 300


def test_a_bad_date_that_is_a_huge_list_is_cut_too() -> None:
    huge = VALID_DAILY | {"time": [["y" * 100_000] * 10_000, "2026-11-29"]}
    with pytest.raises(SourceBadResponse, match="bad date") as caught:
        parse_forecast({"daily": huge})
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize("column", ["weather_code", "temperature_2m_max", "wind_speed_10m_max"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 10**400])
def test_parse_refuses_numbers_no_arithmetic_can_take(column: str, value: float) -> None:
    daily = VALID_DAILY | {column: [value, VALID_DAILY[column][1]]}
    with pytest.raises(SourceBadResponse, match="out of range"):
        parse_forecast({"daily": daily})


def test_current_and_hourly_numbers_out_of_range_are_left_out() -> None:
    """Both are optional detail: an impossible value drops the detail, not the answer."""
    current = {"time": "2026-11-28T12:00", "temperature_2m": 10**400, "wind_speed_10m": 3.0}
    assert open_meteo.summarise_current(current, {}) is None
    current = {"time": "2026-11-28T12:00", "temperature_2m": 4.0, "wind_speed_10m": 10**400}
    assert open_meteo.summarise_current(current, {}) == "Now 4.0 °C."
    hourly = {"time": ["2026-11-28T01:00"], "precipitation_probability": [float("nan")]}
    assert open_meteo._parse_hourly(hourly) == {date(2026, 11, 28): [(1, None)]}


def _daily_body(value: str, first_day: str | None = None) -> str:
    """Open-Meteo's daily block for today and tomorrow (UTC), spelt as raw JSON, with the
    first `temperature_2m_max` spelt `value`."""
    today = datetime.now(UTC).date()
    days = [first_day or today.isoformat(), (today + timedelta(days=1)).isoformat()]
    columns = ", ".join(
        f'"{name}": [1, 2]' for name in open_meteo.DAILY if name != "temperature_2m_max"
    )
    return (
        f'{{"utc_offset_seconds": 0, "daily": {{"time": ["{days[0]}", "{days[1]}"], '
        f'"temperature_2m_max": [{value}, 2], {columns}}}}}'
    )


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
async def test_json_numbers_no_api_sends_are_malformed(
    forecast: OpenMeteoSource, server: OpenMeteoServer, value: str
) -> None:
    server.set_fault(Fault.custom(200, _daily_body(value)))
    with pytest.raises(SourceBadResponse) as caught:
        await forecast.search("weather")
    assert caught.value.reason == "malformed_response"


async def test_sanity_the_same_raw_body_with_a_number_answers(
    forecast: OpenMeteoSource, server: OpenMeteoServer
) -> None:
    server.set_fault(Fault.custom(200, _daily_body("7.5")))
    [item] = await forecast.search("weather today")
    assert "1–8 °C" in item.text


async def test_a_bad_date_from_the_server_is_short_in_the_message(
    forecast: OpenMeteoSource, server: OpenMeteoServer
) -> None:
    server.set_fault(Fault.custom(200, _daily_body("1", first_day="x" * 3_000_000)))
    with pytest.raises(SourceBadResponse, match="bad date") as caught:
        await forecast.search("weather")
    assert len(str(caught.value)) < 300


async def test_an_endless_error_body_is_read_only_in_part() -> None:
    """`BodyServer` (tests/sources/hostile.py) stands in for an Open-Meteo, or a proxy,
    whose 400 never ends: the `reason` is looked for in its first bytes only."""
    async with BodyServer(None, status=400) as endless:
        source = make(endless.url)
        try:
            with pytest.raises(SourceError, match="HTTP 400"):
                await source.search("weather")
        finally:
            await source.aclose()
        await endless.finished()
    assert endless.client_left and endless.written < 32 * 1024 * 1024


async def test_an_endless_forecast_is_cut_off() -> None:
    async with BodyServer(None) as endless:
        source = make(endless.url)
        try:
            with pytest.raises(SourceBadResponse, match="over"):
                await source.search("weather")
        finally:
            await source.aclose()
        await endless.finished()
    assert endless.client_left and endless.written < 32 * 1024 * 1024


def test_an_offset_or_a_date_no_place_has_is_no_crash() -> None:
    """A backend's `utc_offset_seconds` past any timezone (OverflowError once added to the
    clock), and a `current.time` on the calendar's last day (whose tomorrow does not
    exist), are read as malformed: the clock's day, and no tomorrow."""
    body = {"utc_offset_seconds": 10**18, "daily": VALID_DAILY}
    forecast = parse_forecast(body, now=datetime(2026, 11, 27, 23, 30, tzinfo=UTC))
    assert forecast.today == date(2026, 11, 27)
    assert open_meteo.day_label(date.max, date.max) == "today"
    from sources.dates import pick_days

    assert pick_days("weather tomorrow", date.max, [date.max]) == []
    assert pick_days("weather today", date(2026, 11, 28), [date(2026, 11, 28)]) == [
        date(2026, 11, 28)
    ]
