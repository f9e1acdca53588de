"""Forecasts from a Home Assistant weather entity: the second forecast provider.

HA (since 2023.9) gives forecasts only through the `weather.get_forecasts` service, and
its REST API returns service responses (`?return_response`) only from 2024.8 on, so the
forecast is read over the websocket API, which has had `return_response` since 2023.7:
`auth_required` → `auth` → `auth_ok`, then one `call_service` with `return_response: true`.
Each search opens its own short websocket (HA's socket is stateful and dies with a
restart; one handshake on a LAN is cheaper than reconnect logic). The entity's units and
name come from `GET /api/states/<entity_id>` once, over a pooled httpx client.

The query picks the days, as for every forecast source (`sources.dates`): today unless it
names others ("tomorrow", "friday", "this weekend", "the week ahead"...), and never more
than `max_days` from today.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import Field, SecretStr

from sources import ha_websocket, http
from sources.base import (
    Item,
    Source,
    SourceBadResponse,
    SourceError,
    SourceServerError,
    SourceUnauthorized,
)
from sources.dates import pick_days
from sources.registry import HttpUrl, SourceConfig

CONDITIONS = {
    "clear-night": "clear night",
    "cloudy": "cloudy",
    "exceptional": "exceptional weather",
    "fog": "fog",
    "hail": "hail",
    "lightning": "thunderstorms",
    "lightning-rainy": "thunderstorms with rain",
    "partlycloudy": "partly cloudy",
    "pouring": "pouring rain",
    "rainy": "rainy",
    "snowy": "snowy",
    "snowy-rainy": "sleet",
    "sunny": "sunny",
    "windy": "windy",
    "windy-variant": "windy and cloudy",
}


class Config(SourceConfig):
    """`sources.<name>` keys for `type: ha_weather`."""

    type: Literal["ha_weather"]
    url: HttpUrl = Field(description="Base URL, e.g. http://homeassistant.local:8123")
    token: SecretStr = Field(description="Long-lived access token, from ${HA_TOKEN}.")
    entity_id: str = Field(pattern=r"^weather\.[a-z0-9_]+$")
    max_days: int = Field(default=7, ge=1, le=16)


@dataclass(frozen=True, slots=True)
class Day:
    date: date
    condition: str | None
    high: float | None
    low: float | None
    precipitation: float | None
    probability: float | None


# ---------------------------------------------------------------------------------------
# The answer, validated
# ---------------------------------------------------------------------------------------


def _number(entry: dict[str, Any], key: str) -> float | None:
    return http.finite_number(entry.get(key), f"forecast field {key!r}")


def parse_days(result: Any, entity_id: str) -> tuple[list[Day], date]:
    """The daily forecast in `result["response"][entity_id]["forecast"]`, and "today"
    in the forecast's own timezone."""
    response = result.get("response") if isinstance(result, dict) else None
    if not isinstance(response, dict):
        raise SourceBadResponse("get_forecasts returned no service response")
    if entity_id not in response:
        raise SourceError(f"Home Assistant returned no forecast for {entity_id}")
    forecast = (
        response[entity_id].get("forecast") if isinstance(response[entity_id], dict) else None
    )
    if not isinstance(forecast, list):
        raise SourceBadResponse(f"the forecast for {entity_id} is not a list")
    days: list[Day] = []
    tz = None
    for entry in forecast:
        if not isinstance(entry, dict) or not isinstance(entry.get("datetime"), str):
            raise SourceBadResponse("a forecast entry has no datetime")
        try:
            moment = datetime.fromisoformat(entry["datetime"])
        except ValueError:
            raise SourceBadResponse("a forecast entry has a malformed datetime") from None
        tz = tz or moment.tzinfo
        condition = entry.get("condition")
        days.append(
            Day(
                date=moment.date(),
                condition=condition if isinstance(condition, str) else None,
                high=_number(entry, "temperature"),
                low=_number(entry, "templow"),
                precipitation=_number(entry, "precipitation"),
                probability=_number(entry, "precipitation_probability"),
            )
        )
    today = datetime.now(tz).date() if tz else date.today()
    return days, today


# ---------------------------------------------------------------------------------------
# Which days, and how to say them
# ---------------------------------------------------------------------------------------


def _temp(value: float, unit: str) -> str:
    return f"{round(value)} {unit}"


def summarise(day: Day, today: date, units: dict[str, str]) -> str:
    """ "Tuesday: sunny, high 22 °C, low 14 °C, precipitation 0 mm (10% chance)"."""
    if day.date == today:
        label = f"Today ({day.date.strftime('%A')})"
    elif day.date == today + timedelta(days=1):
        label = f"Tomorrow ({day.date.strftime('%A')})"
    else:
        label = day.date.strftime("%A")
    parts = [CONDITIONS.get(day.condition or "", day.condition or "conditions unknown")]
    t_unit = units.get("temperature", "°")
    if day.high is not None:
        parts.append(f"high {_temp(day.high, t_unit)}")
    if day.low is not None:
        parts.append(f"low {_temp(day.low, t_unit)}")
    if day.precipitation is not None:
        amount = f"{day.precipitation:g} {units.get('precipitation', 'mm')}"
        chance = f" ({day.probability:g}% chance)" if day.probability is not None else ""
        parts.append(f"precipitation {amount}{chance}")
    elif day.probability is not None:
        parts.append(f"{day.probability:g}% chance of precipitation")
    return f"{label}: {', '.join(parts)}"


# ---------------------------------------------------------------------------------------
# The source
# ---------------------------------------------------------------------------------------


class HAWeatherSource(Source):
    """The daily forecast of one HA weather entity, over the websocket API."""

    kind = "ha_weather"

    def __init__(self, name: str, config: Config) -> None:
        super().__init__(name, config.timeout_s)
        self.url = config.url
        # Item URLs never carry credentials the configured URL may hold (user:pass@).
        self.public_base = http.public_url(config.url)
        self.entity_id = config.entity_id
        self.max_days = config.max_days
        self._token = config.token
        self._what = f"Home Assistant weather ({name})"
        self._api = http.BearerClient(self.url, self.timeout_s, config.token)
        self._meta: tuple[str, dict[str, str]] | None = None

    def _http(self) -> httpx.AsyncClient:
        return self._api.get()

    async def start(self) -> None:
        self._api.get()

    async def aclose(self) -> None:
        await self._api.aclose()

    async def info(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"type": self.kind, "entity_id": self.entity_id}
        try:
            config = await http.get_json(self._http(), "/api/config", what=self._what)
        except SourceError as exc:
            facts["error"] = exc.reason
            return facts
        if isinstance(config, dict):
            facts["version"] = config.get("version")
        return facts

    async def _forecast_result(self) -> Any:
        """One websocket round trip (sources/ha_websocket.py), a failed call mapped to a
        typed SourceError."""
        message = await ha_websocket.call(
            self.url,
            self._token.get_secret_value(),
            {
                "type": "call_service",
                "domain": "weather",
                "service": "get_forecasts",
                "service_data": {"type": "daily"},
                "target": {"entity_id": self.entity_id},
                "return_response": True,
            },
            timeout_s=self.timeout_s,
            what=self._what,
        )
        if not message.get("success"):
            code, text = ha_websocket.failure(message)
            if "did not match any entities" in text:
                raise SourceError(f"{self._what}: no entity {self.entity_id} in Home Assistant")
            if code == "unauthorized":
                raise SourceUnauthorized(f"{self._what}: get_forecasts not allowed ({code})")
            if code in ("home_assistant_error", "unknown_error"):
                raise SourceServerError(f"{self._what}: get_forecasts failed ({code}: {text})")
            raise SourceError(f"{self._what}: get_forecasts failed ({code}: {text})")
        return message.get("result")

    async def _entity_meta(self) -> tuple[str, dict[str, str]]:
        """(friendly name, units) of the weather entity; fetched once."""
        if self._meta is None:
            state = await http.get_json(
                self._http(), f"/api/states/{quote(self.entity_id)}", what=self._what
            )
            attrs = state.get("attributes") if isinstance(state, dict) else None
            if not isinstance(attrs, dict):
                raise SourceBadResponse(f"{self._what}: the entity state has no attributes")
            units = {
                key: attrs[f"{key}_unit"]
                for key in ("temperature", "precipitation")
                if isinstance(attrs.get(f"{key}_unit"), str)
            }
            name = attrs.get("friendly_name")
            self._meta = (name if isinstance(name, str) else self.entity_id, units)
        return self._meta

    async def search(self, query: str) -> list[Item]:
        result = await self._forecast_result()
        days, today = parse_days(result, self.entity_id)
        name, units = await self._entity_meta()
        ahead = [d for d in days if d.date >= today][: self.max_days]
        wanted = set(pick_days(query, today, [d.date for d in ahead]))
        chosen = [d for d in ahead if d.date in wanted]
        url = f"{self.public_base}/history?entity_id={quote(self.entity_id)}"
        return [
            Item(
                title=f"{name}: {d.date.strftime('%A')} {d.date.isoformat()}",
                text=summarise(d, today, units),
                url=url,
            )
            for d in chosen
        ]


def build(name: str, config: SourceConfig) -> Source:
    assert isinstance(config, Config)
    return HAWeatherSource(name, config)
