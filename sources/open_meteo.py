"""Weather forecasts from Open-Meteo (`GET /v1/forecast`), summarised per day the query names.

One request fetches the configured place's daily, hourly and current blocks; the query
only decides which days are summarised ("today" by default, "tomorrow", weekday names,
"weekend", "this week", ISO dates). "Today" is the place's local date, taken from the
answer itself (`current.time`, else the clock shifted by `utc_offset_seconds`), so the
summary is right whatever timezone the server runs in. Field names follow
https://open-meteo.com/en/docs; errors come back as HTTP 400 `{"error": true, "reason"}`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import httpx
from pydantic import Field, SecretStr

from sources import http
from sources.base import (
    Item,
    Source,
    SourceBadResponse,
    SourceError,
    SourceRateLimited,
    SourceUnauthorized,
)
from sources.dates import pick_days
from sources.registry import HttpUrl, SourceConfig

WHAT = "Open-Meteo"
DAILY = (
    "weather_code",
    "temperature_2m_max",
    "temperature_2m_min",
    "precipitation_sum",
    "precipitation_probability_max",
    "wind_speed_10m_max",
)
HOURLY = ("temperature_2m", "precipitation_probability", "weather_code")
CURRENT = ("temperature_2m", "weather_code", "wind_speed_10m")

# WMO weather interpretation codes, as listed in Open-Meteo's documentation.
WMO_CODES: dict[int, str] = {
    0: "Clear sky",
    1: "Mainly clear",
    2: "Partly cloudy",
    3: "Overcast",
    45: "Fog",
    48: "Depositing rime fog",
    51: "Light drizzle",
    53: "Moderate drizzle",
    55: "Dense drizzle",
    56: "Light freezing drizzle",
    57: "Dense freezing drizzle",
    61: "Light rain",
    63: "Moderate rain",
    65: "Heavy rain",
    66: "Light freezing rain",
    67: "Heavy freezing rain",
    71: "Light snowfall",
    73: "Moderate snowfall",
    75: "Heavy snowfall",
    77: "Snow grains",
    80: "Light rain showers",
    81: "Moderate rain showers",
    82: "Violent rain showers",
    85: "Light snow showers",
    86: "Heavy snow showers",
    95: "Thunderstorm",
    96: "Thunderstorm with light hail",
    99: "Thunderstorm with heavy hail",
}
SNOW_CODES = frozenset({71, 73, 75, 77, 85, 86})


class Config(SourceConfig):
    """`sources.<name>` keys for `type: open_meteo`."""

    type: Literal["open_meteo"]
    url: HttpUrl = "https://api.open-meteo.com"
    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)
    timezone: str = Field(default="auto", min_length=1)
    place_name: str | None = Field(default=None, description="Shown in item titles.")
    forecast_days: int = Field(default=7, ge=1, le=16)
    api_key: SecretStr | None = Field(
        default=None, description="Only for the commercial customer-api (sent as `apikey`)."
    )


# ---------------------------------------------------------------------------------------
# The answer, validated
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Day:
    """One day of the daily block; None where the API sent null."""

    date: date
    code: int | None
    t_max: float | None
    t_min: float | None
    precipitation: float | None
    probability: float | None
    wind: float | None


@dataclass(frozen=True, slots=True)
class Forecast:
    today: date
    days: list[Day]
    units: dict[str, str]
    hourly: dict[date, list[tuple[int, float | None]]]  # date → [(hour, precip. probability)]
    current: dict[str, Any] | None


def _number(value: Any, where: str) -> float | None:
    return http.finite_number(value, f"{WHAT}'s {where}")


def _finite(value: Any) -> float | None:
    """`value` as a finite float, or None: for optional detail that is never fatal."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def parse_forecast(body: Any, now: datetime | None = None) -> Forecast:
    """Validate the documented shape: parallel arrays in `daily`, keyed by `daily.time`."""
    if not isinstance(body, dict):
        raise SourceBadResponse(f"{WHAT} answer is not a JSON object")
    if body.get("error") is True:
        raise SourceError(f"{WHAT} error: {http.shown(str(body.get('reason', 'unknown')))}")
    daily = body.get("daily")
    if not isinstance(daily, dict) or not isinstance(daily.get("time"), list):
        raise SourceBadResponse(f"{WHAT} answer has no `daily.time` array")
    times = daily["time"]
    columns: dict[str, list[Any]] = {}
    for name in DAILY:
        column = daily.get(name)
        if not isinstance(column, list):
            raise SourceBadResponse(f"{WHAT} answer lacks the `daily.{name}` array")
        if len(column) != len(times):
            raise SourceBadResponse(
                f"{WHAT} `daily.{name}` has {len(column)} values for {len(times)} days"
            )
        columns[name] = column
    days: list[Day] = []
    for i, raw in enumerate(times):
        try:
            day = date.fromisoformat(raw)
        except (TypeError, ValueError):
            raise SourceBadResponse(
                f"{WHAT} sent a bad date in `daily.time`: {http.shown(raw)!r}"
            ) from None
        code = _number(columns["weather_code"][i], "daily.weather_code")
        days.append(
            Day(
                date=day,
                code=None if code is None else int(code),
                t_max=_number(columns["temperature_2m_max"][i], "daily.temperature_2m_max"),
                t_min=_number(columns["temperature_2m_min"][i], "daily.temperature_2m_min"),
                precipitation=_number(columns["precipitation_sum"][i], "daily.precipitation_sum"),
                probability=_number(
                    columns["precipitation_probability_max"][i],
                    "daily.precipitation_probability_max",
                ),
                wind=_number(columns["wind_speed_10m_max"][i], "daily.wind_speed_10m_max"),
            )
        )
    raw_units = body.get("daily_units")
    units: dict[str, Any] = raw_units if isinstance(raw_units, dict) else {}
    current = body.get("current") if isinstance(body.get("current"), dict) else None
    return Forecast(
        today=_local_today(body, current, now),
        days=days,
        units={k: v for k, v in units.items() if isinstance(v, str)},
        hourly=_parse_hourly(body.get("hourly")),
        current=current,
    )


MAX_UTC_OFFSET_S = 14 * 3600


def _local_today(
    body: dict[str, Any], current: dict[str, Any] | None, now: datetime | None
) -> date:
    """The place's local date: from `current.time`, else the clock plus the UTC offset."""
    if current is not None and isinstance(current.get("time"), str):
        try:
            return datetime.fromisoformat(current["time"]).date()
        except ValueError:
            pass
    offset = body.get("utc_offset_seconds")
    if isinstance(offset, bool) or not isinstance(offset, int) or abs(offset) > MAX_UTC_OFFSET_S:
        offset = 0  # no place on Earth is more than 14 hours from UTC
    return ((now or datetime.now(UTC)) + timedelta(seconds=offset)).date()


def _parse_hourly(hourly: Any) -> dict[date, list[tuple[int, float | None]]]:
    """Hourly precipitation chances per day; optional extra detail, so never fatal."""
    out: dict[date, list[tuple[int, float | None]]] = {}
    if not isinstance(hourly, dict):
        return out
    times, probs = hourly.get("time"), hourly.get("precipitation_probability")
    if not isinstance(times, list) or not isinstance(probs, list) or len(times) != len(probs):
        return out
    for stamp, prob in zip(times, probs, strict=True):
        try:
            moment = datetime.fromisoformat(stamp)
        except (TypeError, ValueError):
            return {}
        out.setdefault(moment.date(), []).append((moment.hour, _finite(prob)))
    return out


# ---------------------------------------------------------------------------------------
# What the query asks about (the days: sources.dates)
# ---------------------------------------------------------------------------------------

_RAIN_WORDS = re.compile(
    r"\b(rain\w*|showers?|drizzl\w*|umbrella|wet|precipitation|snow\w*|sleet|hail)\b"
)
_SNOW_WORDS = re.compile(r"\b(snow\w*|sleet)\b")


# ---------------------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------------------


def _deg(value: float) -> str:
    return str(round(value))


def describe(code: int | None) -> str:
    if code is None:
        return "Conditions unknown"
    return WMO_CODES.get(code, f"Weather code {code}")


def day_label(day: date, today: date) -> str:
    if day == today:
        return "today"
    if today < date.max and day == today + timedelta(days=1):
        return "tomorrow"
    return f"on {day.strftime('%A')}"


def summarise_day(day: Day, units: dict[str, str]) -> str:
    """ "Light rain, 4–9 °C, 2.3 mm precipitation (80% chance), wind up to 21 km/h." """
    t_unit = units.get("temperature_2m_max", "°C")
    p_unit = units.get("precipitation_sum", "mm")
    w_unit = units.get("wind_speed_10m_max", "km/h")
    parts = [describe(day.code)]
    if day.t_min is not None and day.t_max is not None:
        low, high = _deg(day.t_min), _deg(day.t_max)
        if low == high:
            parts.append(f"{low} {t_unit}")
        elif day.t_min < 0 or day.t_max < 0:  # "-5–-1" reads badly
            parts.append(f"{low} to {high} {t_unit}")
        else:
            parts.append(f"{low}–{high} {t_unit}")
    elif day.t_max is not None:
        parts.append(f"up to {_deg(day.t_max)} {t_unit}")
    chance = "" if day.probability is None else f" ({round(day.probability)}% chance)"
    if day.precipitation is not None:
        if day.precipitation > 0:
            parts.append(f"{day.precipitation:.1f} {p_unit} precipitation{chance}")
        else:
            parts.append(f"no precipitation{chance}")
    elif chance:
        parts.append(f"precipitation{chance}")
    if day.wind is not None:
        parts.append(f"wind up to {round(day.wind)} {w_unit}")
    return ", ".join(parts) + "."


def answer_precipitation(
    day: Day,
    today: date,
    units: dict[str, str],
    snow: bool,
    hours: list[tuple[int, float | None]] | None = None,
) -> str:
    """The yes/no-ish lead sentence for "will it rain/snow ..." questions."""
    what = "snow" if snow else "rain"
    when = day_label(day.date, today)
    prob, amount = day.probability, day.precipitation
    p_unit = units.get("precipitation_sum", "mm")
    expected = f", {amount:.1f} {p_unit} expected" if amount else ""
    likely = (prob is not None and prob >= 60) or (prob is None and (amount or 0) >= 1.0)
    possible = (prob is not None and prob >= 30) or (prob is None and (amount or 0) > 0)
    if snow and day.code not in SNOW_CODES:
        likely = False
        possible = possible and day.code is None
    chance = f"{round(prob)}% chance" if prob is not None else "no stated chance"
    if likely:
        sentence = f"Yes, {what} is likely {when} ({chance}{expected})."
    elif possible:
        amount_note = f" ({amount:.1f} {p_unit} expected)" if amount else ""
        sentence = f"Possibly: {chance} of {what} {when}{amount_note}."
    elif prob is not None:
        sentence = f"Probably not: {chance} of {what} {when}."
    else:
        sentence = f"Probably not: no {what} is expected {when}."
    peak = max((h for h in hours or [] if h[1] is not None), key=lambda h: h[1] or 0, default=None)
    if (likely or possible) and peak is not None and peak[1]:
        sentence += f" Most likely around {peak[0]:02d}:00."
    return sentence


def summarise_current(current: dict[str, Any], units: dict[str, str]) -> str | None:
    raw_temp, code, raw_wind = (current.get(k) for k in CURRENT)
    temp, wind = _finite(raw_temp), _finite(raw_wind)
    if temp is None:
        return None
    text = f"Now {temp:.1f} {units.get('temperature_2m_max', '°C')}"
    if isinstance(code, int) and not isinstance(code, bool):
        text += f", {describe(code).lower()}"
    if wind is not None:
        text += f", wind {round(wind)} {units.get('wind_speed_10m_max', 'km/h')}"
    return text + "."


def build_items(forecast: Forecast, query: str, place: str | None, url: str | None) -> list[Item]:
    """One item per day the query names; [] when none of them is in the forecast."""
    by_date = {d.date: d for d in forecast.days}
    asks_rain = _RAIN_WORDS.search(query.lower()) is not None
    asks_snow = _SNOW_WORDS.search(query.lower()) is not None
    items: list[Item] = []
    for wanted in pick_days(query, forecast.today, list(by_date)):
        day = by_date[wanted]
        sentences = []
        if asks_rain:
            sentences.append(
                answer_precipitation(
                    day, forecast.today, forecast.units, asks_snow, forecast.hourly.get(wanted)
                )
            )
        sentences.append(summarise_day(day, forecast.units))
        if wanted == forecast.today and forecast.current is not None:
            now = summarise_current(forecast.current, forecast.units)
            if now:
                sentences.append(now)
        title = f"Weather for {wanted.strftime('%A')} {wanted.isoformat()}"
        if place:
            title += f" in {place}"
        items.append(Item(title=title, text=" ".join(sentences), url=url))
    return items


# ---------------------------------------------------------------------------------------
# The source
# ---------------------------------------------------------------------------------------


async def _reason(response: httpx.Response) -> str:
    """The `reason` of Open-Meteo's error body, read from its first bytes only."""
    try:
        body = http.decode_json(await http.read_prefix(response, WHAT), WHAT)
    except SourceBadResponse:
        return ""
    reason = body.get("reason") if isinstance(body, dict) else None
    return reason if isinstance(reason, str) else ""  # whole: a key in it is redacted first


class OpenMeteoSource(Source):
    """The forecast for one configured place."""

    kind = "open_meteo"

    def __init__(self, name: str, config: Config) -> None:
        super().__init__(name, config.timeout_s)
        self.config = config
        self._client: httpx.AsyncClient | None = None
        self.params: dict[str, str | int | float] = {
            "latitude": config.latitude,
            "longitude": config.longitude,
            "daily": ",".join(DAILY),
            "hourly": ",".join(HOURLY),
            "current": ",".join(CURRENT),
            "timezone": config.timezone,
            "forecast_days": config.forecast_days,
        }
        # The URL shown in items: the request without the API key or URL credentials.
        base = httpx.URL(config.url).copy_with(username=None, password=None)
        self.public_base = str(base).rstrip("/")
        self.public_url = str(httpx.URL(f"{self.public_base}/v1/forecast", params=self.params))

    async def start(self) -> None:
        if self._client is None:
            self._client = http.make_client(self.config.url, self.timeout_s)
            self._client.event_hooks = {"request": [], "response": [self._map_error_status]}

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _redact(self, text: str) -> str:
        key = self.config.api_key.get_secret_value() if self.config.api_key else ""
        return text.replace(key, "***") if key else text

    async def _map_error_status(self, response: httpx.Response) -> None:
        """Surface Open-Meteo's `{"error": true, "reason"}` body, which `sources.http`
        would otherwise reduce to a bare status code."""
        status = response.status_code
        if status not in (400, 401, 403, 429):
            return
        reason = http.shown(self._redact(await _reason(response))) or f"HTTP {status}"
        if status == 429:
            raise SourceRateLimited(f"{WHAT} rate limit reached: {reason}")
        if status in (401, 403):
            raise SourceUnauthorized(f"{WHAT} refused the request (HTTP {status}): {reason}")
        raise SourceError(f"{WHAT} rejected the request: {reason}")

    async def fetch(self) -> Forecast:
        if self._client is None:
            await self.start()
        assert self._client is not None
        params = dict(self.params)
        if self.config.api_key and self.config.api_key.get_secret_value():
            params["apikey"] = self.config.api_key.get_secret_value()
        body = await http.get_json(self._client, "/v1/forecast", what=WHAT, params=params)
        try:
            return parse_forecast(body)
        except SourceError as exc:  # an error answer's reason may quote the key
            raise type(exc)(self._redact(str(exc))) from None

    async def search(self, query: str) -> list[Item]:
        forecast = await self.fetch()
        return build_items(forecast, query, self.config.place_name, self.public_url)

    async def info(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "url": self.public_base,
            "latitude": self.config.latitude,
            "longitude": self.config.longitude,
            "forecast_days": self.config.forecast_days,
        }


def build(name: str, config: SourceConfig) -> Source:
    assert isinstance(config, Config)
    return OpenMeteoSource(name, config)
