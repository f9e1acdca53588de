"""Loopback servers that speak other services' documented wire formats, with injectable faults.

Open-Meteo and SearXNG cannot run on the test machine, so these servers replay their
documented responses exactly (field names, error bodies, status codes) on 127.0.0.1, and
can be told to misbehave the way the real services do: answer slowly, refuse (401/403),
rate-limit (429), fail (500/502), send a body that is not JSON or has the wrong shape, or
find nothing. Each one runs a Starlette app under uvicorn in a background thread, so it
serves sync and async tests alike, and records every request it saw.

    with OpenMeteoServer() as srv:
        srv.set_fault(Fault.status(502), times=1)   # next request only, then normal again
        srv.set_fault(Fault.delay(2.0))             # every request, until clear_faults()
        ... srv.url, srv.requests ...
    closed_port_url()                               # a URL whose port refuses connections
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Literal, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.support.ports import free_port

FaultKind = Literal["delay", "status", "not_json", "wrong_shape", "empty", "custom"]


@dataclass(frozen=True)
class Fault:
    """One way a server misbehaves. Build with the class methods, not the constructor."""

    kind: FaultKind
    status_code: int = 200
    delay_s: float = 0.0
    body: Any = None
    content_type: str = "application/json"

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Answer normally, but only after `seconds` (for client timeouts)."""
        return cls("delay", delay_s=seconds)

    @classmethod
    def status(cls, code: int) -> Fault:
        """Answer with HTTP `code` and the body the real service sends with it."""
        return cls("status", status_code=code)

    @classmethod
    def not_json(cls) -> Fault:
        """HTTP 200 with an HTML page instead of JSON (a captive portal, a proxy page)."""
        return cls("not_json")

    @classmethod
    def wrong_shape(cls) -> Fault:
        """HTTP 200 with valid JSON that breaks the documented shape."""
        return cls("wrong_shape")

    @classmethod
    def empty(cls) -> Fault:
        """A well-formed answer that contains nothing."""
        return cls("empty")

    @classmethod
    def custom(cls, status: int, body: Any, content_type: str = "application/json") -> Fault:
        """Exactly this status and body (a dict/list is sent as JSON, str/bytes as is)."""
        return cls("custom", status_code=status, body=body, content_type=content_type)


@dataclass(frozen=True)
class SeenRequest:
    """A request a server received, for asserting what the client really sent."""

    method: str
    path: str
    params: dict[str, list[str]]
    headers: dict[str, str]

    def param(self, name: str) -> str | None:
        values = self.params.get(name)
        return values[-1] if values else None


def closed_port_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens: connecting is refused."""
    return f"http://127.0.0.1:{free_port()}"


@dataclass
class _Armed:
    fault: Fault
    remaining: int | None  # None: until cleared


class WireServer:
    """Base class: a Starlette app on 127.0.0.1:<free port>, run by uvicorn in a thread.

    Subclasses list their `routes()` (each endpoint calls `self.serve(request, answer)`),
    and say what their service sends for an HTTP error (`error_response`) and for the
    `empty` / `wrong_shape` faults (via the `shape` argument of their answer function).
    """

    def __init__(self) -> None:
        self.requests: list[SeenRequest] = []
        self._armed: list[_Armed] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    # -- faults ---------------------------------------------------------------------
    def set_fault(self, fault: Fault, times: int | None = None) -> None:
        """Misbehave on the next `times` requests (None: on every request until cleared).

        Faults stack in order: `set_fault(status(502), times=1)` then `set_fault(delay(1))`
        answers 502 once, then delays every later request.
        """
        with self._lock:
            self._armed.append(_Armed(fault, times))

    def clear_faults(self) -> None:
        with self._lock:
            self._armed.clear()

    def _take_fault(self) -> Fault | None:
        with self._lock:
            while self._armed:
                armed = self._armed[0]
                if armed.remaining is None:
                    return armed.fault
                if armed.remaining > 0:
                    armed.remaining -= 1
                    if armed.remaining == 0:
                        self._armed.pop(0)
                    return armed.fault
                self._armed.pop(0)
            return None

    # -- what subclasses provide ----------------------------------------------------
    def routes(self) -> list[Route]:
        raise NotImplementedError

    def error_response(self, status: int) -> Response:
        """The body the real service sends with `status` (default: plain text)."""
        return PlainTextResponse(f"HTTP {status}", status_code=status)

    def not_json_response(self) -> Response:
        return HTMLResponse("<!doctype html><html><body><h1>Welcome</h1></body></html>")

    # -- request handling -----------------------------------------------------------
    async def serve(
        self,
        request: Request,
        answer: Callable[[Request, Literal["ok", "empty", "wrong_shape"]], Response],
    ) -> Response:
        """Record the request, apply the armed fault, else let `answer` build the reply."""
        self.requests.append(
            SeenRequest(
                method=request.method,
                path=request.url.path,
                params={k: request.query_params.getlist(k) for k in request.query_params},
                headers={k.lower(): v for k, v in request.headers.items()},
            )
        )
        fault = self._take_fault()
        if fault is None:
            return answer(request, "ok")
        if fault.kind == "delay":
            await self._sleep(fault.delay_s)
            return answer(request, "ok")
        if fault.kind == "status":
            return self.error_response(fault.status_code)
        if fault.kind == "not_json":
            return self.not_json_response()
        if fault.kind in ("empty", "wrong_shape"):
            return answer(request, fault.kind)
        body = fault.body
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        return Response(body, status_code=fault.status_code, media_type=fault.content_type)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake up when the server stops so shutdown never waits on a delay."""
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    # -- lifecycle ------------------------------------------------------------------
    @property
    def url(self) -> str:
        if not self._port:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> None:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose `proto`
        # says TCP, and without it keep-alive answers stall ~40 ms (Nagle + delayed ACK).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            Starlette(routes=self.routes()),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            daemon=True,
            name=f"{type(self).__name__}:{self._port}",
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{type(self).__name__} did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop serving; afterwards `url` refuses connections (a closed port)."""
        self._stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------
# Open-Meteo  (https://open-meteo.com/en/docs)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DayWeather:
    """One day of a replayed forecast (values in the API's default metric units)."""

    weather_code: int
    t_max: float
    t_min: float
    precipitation_mm: float
    precipitation_probability: int | None
    wind_max_kmh: float


# A week that exercises the summary: dry, wet, snowy and stormy days.
DEFAULT_WEEK: tuple[DayWeather, ...] = (
    DayWeather(3, 9.4, 3.6, 0.0, 10, 14.8),  # overcast, dry
    DayWeather(61, 8.7, 4.2, 2.3, 80, 21.2),  # slight rain
    DayWeather(0, 12.1, 1.9, 0.0, 0, 9.0),  # clear sky
    DayWeather(95, 15.3, 9.8, 12.6, 95, 48.5),  # thunderstorm
    DayWeather(2, 11.0, 5.5, 0.1, 20, 12.4),  # partly cloudy
    DayWeather(73, -0.8, -5.1, 4.4, 70, 30.1),  # moderate snow
    DayWeather(45, 6.0, 2.0, 0.0, None, 7.7),  # fog, probability unknown (null)
)

OPEN_METEO_DAILY = frozenset(
    {
        "weather_code",
        "temperature_2m_max",
        "temperature_2m_min",
        "precipitation_sum",
        "precipitation_probability_max",
        "wind_speed_10m_max",
        "sunrise",
        "sunset",
    }
)
OPEN_METEO_HOURLY = frozenset({"temperature_2m", "precipitation_probability", "weather_code"})
OPEN_METEO_CURRENT = frozenset({"temperature_2m", "weather_code", "wind_speed_10m"})
_UNITS = {
    "time": "iso8601",
    "weather_code": "wmo code",
    "temperature_2m": "°C",
    "temperature_2m_max": "°C",
    "temperature_2m_min": "°C",
    "precipitation_sum": "mm",
    "precipitation_probability_max": "%",
    "precipitation_probability": "%",
    "wind_speed_10m_max": "km/h",
    "wind_speed_10m": "km/h",
    "sunrise": "iso8601",
    "sunset": "iso8601",
}


def _om_error(status: int, reason: str) -> JSONResponse:
    """Open-Meteo's documented error body: {"error": true, "reason": "..."}."""
    return JSONResponse({"error": True, "reason": reason}, status_code=status)


class OpenMeteoServer(WireServer):
    """`GET /v1/forecast` as documented at open-meteo.com/en/docs.

    The answer holds `daily`/`hourly`/`current` blocks with parallel arrays keyed by
    `time`, the matching `*_units` objects, and `utc_offset_seconds`; day 0 is "today" in
    the requested timezone (computed from the real clock, so tests can ask for "tomorrow"
    or "saturday"). Unknown variables and out-of-range coordinates get the API's HTTP 400
    `{"error": true, "reason": ...}` body, so a typo in the client's request fails a test.
    `timezone=auto` resolves to `auto_timezone` (default UTC).
    """

    def __init__(self, week: Sequence[DayWeather] = DEFAULT_WEEK, auto_timezone: str = "UTC"):
        super().__init__()
        self.week = tuple(week)
        self.auto_timezone = auto_timezone

    def routes(self) -> list[Route]:
        async def forecast(request: Request) -> Response:
            return await self.serve(request, self._forecast)

        return [Route("/v1/forecast", forecast)]

    def error_response(self, status: int) -> Response:
        if status == 429:
            return _om_error(429, "Daily API request limit exceeded. Please try again tomorrow.")
        if status == 400:
            return _om_error(
                400, "Parameter 'latitude' and 'longitude' must have the same number of elements"
            )
        if status in (401, 403):
            return _om_error(status, "API key is invalid.")
        if status in (502, 503, 504):  # the reverse proxy in front of the API answers these
            title = f"{status} Bad Gateway" if status == 502 else f"{status} Error"
            return HTMLResponse(
                f"<html><head><title>{title}</title></head><body><center><h1>{title}</h1>"
                "</center><hr><center>nginx</center></body></html>",
                status_code=status,
            )
        return _om_error(status, "Internal server error")

    def weather_for(self, day_index: int) -> DayWeather:
        """What the forecast says for today + `day_index` days."""
        return self.week[day_index % len(self.week)]

    def today(self, timezone: str = "auto") -> date:
        """The date that is day 0 of an answer for `timezone`."""
        return datetime.now(self._zone(timezone)).date()

    def _zone(self, timezone: str) -> ZoneInfo:
        name = self.auto_timezone if timezone in ("auto", "") else timezone
        if name.upper() == "GMT":
            name = "UTC"
        return ZoneInfo(name)

    def _forecast(self, request: Request, shape: str) -> Response:
        q = request.query_params
        try:
            lat, lon = float(q["latitude"]), float(q["longitude"])
        except (KeyError, ValueError):
            return _om_error(400, "Parameter 'latitude' and 'longitude' must be set.")
        if not -90 <= lat <= 90:
            return _om_error(400, f"Latitude must be in range of -90 to 90°. Given: {lat}.")
        if not -180 <= lon <= 180:
            return _om_error(400, f"Longitude must be in range of -180 to 180°. Given: {lon}.")
        requested: dict[str, list[str]] = {}
        for key, known in (
            ("daily", OPEN_METEO_DAILY),
            ("hourly", OPEN_METEO_HOURLY),
            ("current", OPEN_METEO_CURRENT),
        ):
            names = [n for n in q.get(key, "").split(",") if n]
            for name in names:
                if name not in known:
                    return _om_error(
                        400,
                        f"Cannot initialize ForecastVariable from invalid String value "
                        f"{name} for key {key}",
                    )
            requested[key] = names
        try:
            days = int(q.get("forecast_days", "7"))
        except ValueError:
            return _om_error(400, "Parameter 'forecast_days' is invalid.")
        if not 0 <= days <= 16:
            return _om_error(400, "Forecast days is invalid. Allowed range 0 to 16.")
        try:
            zone = self._zone(q.get("timezone", "GMT"))
        except (ZoneInfoNotFoundError, ValueError):
            return _om_error(400, "Invalid timezone")
        if shape == "empty":
            days = 0
        now = datetime.now(zone)
        offset = int((now.utcoffset() or timedelta()).total_seconds())
        body: dict[str, Any] = {
            "latitude": round(lat, 4),
            "longitude": round(lon, 4),
            "generationtime_ms": 0.05,
            "utc_offset_seconds": offset,
            "timezone": str(zone.key) if zone.key != "UTC" else "GMT",
            "timezone_abbreviation": now.tzname() or "GMT",
            "elevation": 38.0,
        }
        dates = [now.date() + timedelta(days=i) for i in range(days)]
        if requested["current"]:
            today = self.weather_for(0)
            stamp = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
            values = {
                "temperature_2m": round((today.t_max + today.t_min) / 2, 1),
                "weather_code": today.weather_code,
                "wind_speed_10m": today.wind_max_kmh / 2,
            }
            body["current_units"] = {"time": "iso8601", "interval": "seconds"} | {
                n: _UNITS[n] for n in requested["current"]
            }
            body["current"] = {"time": stamp.strftime("%Y-%m-%dT%H:%M"), "interval": 900} | {
                n: values[n] for n in requested["current"]
            }
        if requested["hourly"]:
            body["hourly_units"] = {"time": "iso8601"} | {n: _UNITS[n] for n in requested["hourly"]}
            hourly: dict[str, list[Any]] = {"time": []} | {n: [] for n in requested["hourly"]}
            for i, day in enumerate(dates):
                weather = self.weather_for(i)
                for hour in range(24):
                    hourly["time"].append(f"{day.isoformat()}T{hour:02d}:00")
                    peak = 1.0 - abs(hour - 15) / 15  # wettest mid-afternoon
                    prob = weather.precipitation_probability
                    at_hour: dict[str, float | int | None] = {
                        "temperature_2m": round(
                            weather.t_min + (weather.t_max - weather.t_min) * peak, 1
                        ),
                        "precipitation_probability": None if prob is None else round(prob * peak),
                        "weather_code": weather.weather_code,
                    }
                    for n in requested["hourly"]:
                        hourly[n].append(at_hour[n])
            body["hourly"] = hourly
        if requested["daily"]:
            body["daily_units"] = {"time": "iso8601"} | {n: _UNITS[n] for n in requested["daily"]}
            daily: dict[str, list[Any]] = {"time": [d.isoformat() for d in dates]}
            for n in requested["daily"]:
                daily[n] = [
                    self._daily_value(n, self.weather_for(i), d) for i, d in enumerate(dates)
                ]
            if shape == "wrong_shape":  # one array shorter than `time`
                for n in requested["daily"]:
                    daily[n] = daily[n][:-1]
                    break
            body["daily"] = daily
        return JSONResponse(body)

    @staticmethod
    def _daily_value(name: str, w: DayWeather, day: date) -> Any:
        return {
            "weather_code": w.weather_code,
            "temperature_2m_max": w.t_max,
            "temperature_2m_min": w.t_min,
            "precipitation_sum": w.precipitation_mm,
            "precipitation_probability_max": w.precipitation_probability,
            "wind_speed_10m_max": w.wind_max_kmh,
            "sunrise": f"{day.isoformat()}T07:45",
            "sunset": f"{day.isoformat()}T16:10",
        }[name]


# ---------------------------------------------------------------------------------------
# SearXNG  (https://docs.searxng.org/dev/search_api.html)
# ---------------------------------------------------------------------------------------

_FLASK_403 = (
    "<!doctype html>\n<html lang=en>\n<title>403 Forbidden</title>\n<h1>Forbidden</h1>\n"
    "<p>You don&#39;t have the permission to access the requested resource. It is either "
    "read-protected or not readable by the server.</p>\n"
)


def searxng_result(
    title: str, url: str, content: str, engine: str = "duckduckgo", position: int = 1
) -> dict[str, Any]:
    """One entry of `results[]` as SearXNG's JSON output serialises a main result."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return {
        "url": url,
        "title": title,
        "content": content,
        "publishedDate": None,
        "thumbnail": "",
        "engine": engine,
        "template": "default.html",
        "parsed_url": [parts.scheme, parts.netloc, parts.path, "", parts.query, parts.fragment],
        "img_src": "",
        "priority": "",
        "engines": [engine],
        "positions": [position],
        "score": 1.0 / position,
        "category": "general",
    }


class SearxngServer(WireServer):
    """`GET /search?q=...&format=json` as SearXNG's webapp answers it.

    200 → `{"query", "number_of_results", "results": [{"url", "title", "content", "engine",
    "parsed_url", "engines", "positions", "score", "category", ...}], "answers",
    "corrections", "infoboxes", "suggestions", "unresponsive_engines": [[engine, error]]}`.
    A format missing from `search.formats` → Flask's HTML 403 page; no `q` → 400
    `{"error": "No query"}`; the limiter → 429 "Too Many Requests"; an engine crash → 500
    `{"error": "search error"}`; 502 comes from the reverse proxy as HTML.
    Set `results` to replay fixed results, else three are made up from the query.
    """

    def __init__(
        self,
        formats: Sequence[str] = ("html", "json"),
        results: list[dict[str, Any]] | None = None,
        unresponsive_engines: list[list[str]] | None = None,
    ) -> None:
        super().__init__()
        self.formats = tuple(formats)
        self.results = results
        self.unresponsive_engines = unresponsive_engines or []

    def routes(self) -> list[Route]:
        async def search(request: Request) -> Response:
            return await self.serve(request, self._search)

        return [Route("/search", search, methods=["GET", "POST"])]

    def error_response(self, status: int) -> Response:
        if status == 403:
            return HTMLResponse(_FLASK_403, status_code=403)
        if status == 429:
            return HTMLResponse("Too Many Requests", status_code=429)
        if status == 401:
            return HTMLResponse(
                "<html><head><title>401 Authorization Required</title></head><body>"
                "<center><h1>401 Authorization Required</h1></center></body></html>",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="searxng"'},
            )
        if status == 500:
            return JSONResponse({"error": "search error"}, status_code=500)
        return HTMLResponse(
            f"<html><head><title>{status} Bad Gateway</title></head><body><center><h1>"
            f"{status} Bad Gateway</h1></center><hr><center>nginx</center></body></html>",
            status_code=status,
        )

    def _search(self, request: Request, shape: str) -> Response:
        q = request.query_params
        output_format = q.get("format", "html")
        if output_format not in ("html", "json", "csv", "rss"):
            output_format = "html"
        if output_format not in self.formats:
            return HTMLResponse(_FLASK_403, status_code=403)
        query = q.get("q", "")
        if not query:
            return JSONResponse({"error": "No query"}, status_code=400)
        if output_format != "json":
            return HTMLResponse(f"<html><body>results for {query}</body></html>")
        if self.results is not None:
            results = list(self.results)
        else:
            slug = "-".join(query.lower().split())[:40]
            results = [
                searxng_result(
                    f"{query.title()} – result {i}",
                    f"https://example.org/{slug}/{i}",
                    f"All about {query}, part {i}.",
                    position=i,
                )
                for i in range(1, 4)
            ]
        if shape == "empty":
            results = []
        body: dict[str, Any] = {
            "query": query,
            "number_of_results": 0,
            "results": results,
            "answers": [],
            "corrections": [],
            "infoboxes": [],
            "suggestions": [],
            "unresponsive_engines": self.unresponsive_engines,
        }
        if shape == "wrong_shape":
            body["results"] = {"title": "not a list"}
        return JSONResponse(body)
