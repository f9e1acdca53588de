"""Home Assistant over its REST API: device status questions, and opt-in device control.

Status ("lights status", "is the garage door open", "temperature in the living room",
"which lights are on in the kitchen") is answered from one `GET /api/states`, matched
locally: the query's words are sorted into domain words ("lights" → `light`), device-class
words ("temperature" → sensors with `device_class: temperature`), state words ("on",
"open") and name words, which are fuzzy-matched (rapidfuzz) against each entity's
friendly name and area. Areas are not in `/api/states`; they come from one rendered
template (`POST /api/template`, read-only, admin tokens only) cached for a few minutes,
and are simply absent when that is refused.

Control ("turn on the kitchen light", "close the garage door") changes the world, so it
is not `search` at all: `command(query)` reads the `Command` out of the words and `act`
carries it out, called only through the dispatcher's control gate. It runs only with
`allow_control: true`, is never retried (a service call is not idempotent) and resolves to
exactly one device unless the query says "all". `search` on a command's words only reads:
it reports the state of the devices the command names. Once the gate let a command through,
`recognize` asks HA's own sentence matching (sources/ha_recognize.py: registry names,
areas, aliases) which devices it means; `act` uses those when HA fully matched an on/off
intent of the command's polarity, and this module's matching otherwise.

Answers about the home go stale the moment something changes, so by default they are not
kept in the result cache (`cache_ttl_s: 0`); a user who sets a lifetime opts in.
"""

from __future__ import annotations

import asyncio
import re
import time
import unicodedata
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import Field, SecretStr
from rapidfuzz import fuzz

from sources import ha_recognize, http
from sources.base import (
    ActingSource,
    Command,
    ControlNotAllowed,
    Item,
    Source,
    SourceBadResponse,
    SourceError,
    Unchanged,
)
from sources.registry import HttpUrl, SourceConfig

AREA_CACHE_S = 300.0
# `/api/states` of a large home runs to a few MiB; anything far past that is not HA.
MAX_STATES_BYTES = 16 * 1024 * 1024
WORD_MATCH = 80  # rapidfuzz ratio at which a query word counts as naming an entity word

# Renders [[entity_id, area name], ...] for every entity that has an area.
AREA_TEMPLATE = (
    "{% set ns = namespace(out=[]) %}{% for s in states %}"
    "{% set a = area_name(s.entity_id) %}{% if a %}"
    "{% set ns.out = ns.out + [[s.entity_id, a]] %}{% endif %}{% endfor %}"
    "{{ ns.out | tojson }}"
)


class Config(SourceConfig):
    """`sources.<name>` keys for `type: homeassistant`."""

    type: Literal["homeassistant"]
    url: HttpUrl = Field(description="Base URL, e.g. http://homeassistant.local:8123")
    token: SecretStr = Field(description="Long-lived access token, from ${HA_TOKEN}.")
    allow_control: bool = Field(
        default=False, description="Allow service calls that change device state."
    )
    recognizer: Literal["homeassistant", "local"] = Field(
        default="homeassistant",
        description=(
            "Who finds a command's devices once the gate let it through: Home Assistant's "
            "own sentence matching (registry names, areas, aliases; bench/ha_parse.py), "
            "with this source's parser when it matches nothing; or only this source's parser."
        ),
    )
    max_results: int = Field(default=10, ge=1, le=200)
    confirm_s: float = Field(
        default=2.0,
        ge=0,
        le=30,
        description=(
            "After a call Home Assistant answered with no change, how long to keep reading "
            "the device for one (a lock or a cover that reports later); 0: not at all. "
            "Never past 80% of timeout_s."
        ),
    )
    cache_ttl_s: float | None = Field(
        default=0.0,
        ge=0,
        description="Result cache lifetime (default 0: the home's state is always read fresh).",
    )


# ---------------------------------------------------------------------------------------
# Reading the query
# ---------------------------------------------------------------------------------------

# Words that name a kind of device; removed from the name words.
DOMAIN_WORDS: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        ["light", "lights", "lamp", "lamps", "bulb", "bulbs", "lighting"], frozenset({"light"})
    ),
    **dict.fromkeys(
        ["switch", "switches", "plug", "plugs", "outlet", "outlets", "socket", "sockets"],
        frozenset({"switch"}),
    ),
    **dict.fromkeys(
        [
            "cover",
            "covers",
            "blind",
            "blinds",
            "shade",
            "shades",
            "shutter",
            "shutters",
            "curtain",
            "curtains",
        ],
        frozenset({"cover"}),
    ),
    **dict.fromkeys(["lock", "locks"], frozenset({"lock"})),
    **dict.fromkeys(
        ["thermostat", "thermostats", "heating", "heater", "hvac", "climate", "ac", "aircon"],
        frozenset({"climate"}),
    ),
    **dict.fromkeys(["fan", "fans"], frozenset({"fan"})),
    **dict.fromkeys(["sensor", "sensors"], frozenset({"sensor", "binary_sensor"})),
    **dict.fromkeys(["vacuum", "vacuums", "robot", "hoover"], frozenset({"vacuum"})),
    **dict.fromkeys(["tv", "speaker", "speakers", "player", "media"], frozenset({"media_player"})),
    **dict.fromkeys(["camera", "cameras"], frozenset({"camera"})),
    **dict.fromkeys(["alarm"], frozenset({"alarm_control_panel"})),
    **dict.fromkeys(["humidifier", "dehumidifier"], frozenset({"humidifier"})),
}
# Nouns that hint at a domain and are also part of device names ("Garage Door").
NOUN_WORDS: dict[str, frozenset[str]] = {
    **dict.fromkeys(["door", "doors"], frozenset({"cover", "lock", "binary_sensor"})),
    **dict.fromkeys(["garage", "gate", "gates"], frozenset({"cover", "binary_sensor"})),
    **dict.fromkeys(["window", "windows"], frozenset({"cover", "binary_sensor"})),
}
# Words that name a measured quantity: (domains, device_class).
MEASURE_WORDS: dict[str, tuple[frozenset[str], str]] = {
    **dict.fromkeys(
        ["temperature", "temp", "temperatures", "warm", "hot", "cold"],
        (frozenset({"sensor", "climate"}), "temperature"),
    ),
    **dict.fromkeys(["humidity", "humid"], (frozenset({"sensor"}), "humidity")),
    **dict.fromkeys(["power", "consumption", "watts"], (frozenset({"sensor"}), "power")),
    **dict.fromkeys(["energy"], (frozenset({"sensor"}), "energy")),
    **dict.fromkeys(["battery"], (frozenset({"sensor"}), "battery")),
    **dict.fromkeys(["motion", "movement"], (frozenset({"binary_sensor"}), "motion")),
    **dict.fromkeys(["co2"], (frozenset({"sensor"}), "carbon_dioxide")),
}
STATE_WORDS: dict[str, str] = {
    "on": "on",
    "off": "off",
    "open": "open",
    "opened": "open",
    "closed": "closed",
    "shut": "closed",
    "locked": "locked",
    "unlocked": "unlocked",
    "playing": "playing",
}
LISTING_WORDS = frozenset({"which", "what", "any", "list", "show", "all", "every"})
STOPWORDS = frozenset(
    {
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "do",
        "does",
        "did",
        "of",
        "in",
        "at",
        "on",
        "to",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "my",
        "our",
        "your",
        "me",
        "us",
        "i",
        "we",
        "you",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "everywhere",
        "status",
        "state",
        "states",
        "what",
        "whats",
        "which",
        "who",
        "how",
        "much",
        "many",
        "current",
        "currently",
        "right",
        "now",
        "please",
        "tell",
        "show",
        "list",
        "give",
        "check",
        "any",
        "all",
        "every",
        "still",
        "left",
        "level",
        "reading",
        "value",
        "anything",
        "something",
        "can",
        "could",
        "would",
        "will",
        "hey",
        "ok",
        "okay",
        "home",
        "house",
    }
)
ALL_WORDS = frozenset({"all", "every", "everything", "everywhere"})

# Words in any script: a household may name its devices so, and a command's words the
# source cannot place on a device (any it cannot read among them) withhold it.
_TOKEN = re.compile(r"[^\W_]+")
_ENTITY_ID = re.compile(r"\b([a-z_]+\.[a-z0-9_]+)\b")
# Words that ask for what follows without changing it: "please", "could you", "I need you
# to", "go ahead and".
_POLITE = (
    r"^(?:(?:please|kindly|just|hey|ok|okay|can you|could you|would you|will you"
    r"|i need you to|i want you to|i'd like you to|i would like you to|go ahead and"
    r"|(?:please\s+)?help me)[\s,]+)*"
)
_NOW = r"(?:\s+(?:now|right now|please))?[.!]?$"  # what may follow a command's last word
_ON_OFF_FIRST = re.compile(_POLITE + r"(?:turn|switch|put)\s+(on|off)\s+(.+)$")
_ON_OFF_LAST = re.compile(_POLITE + r"(?:turn|switch|put)\s+(.+?)\s+(on|off)" + _NOW)
# The particle between the device and where it is: "turn the lights off in the bedroom",
# "switch every light on across the house" (not "put": "put apples on the list")
_ON_OFF_MID = re.compile(
    _POLITE + r"(?:turn|switch)\s+(.+?)\s+(on|off)\s+((?:in|at|across|throughout|around"
    r"|upstairs|downstairs|everywhere|inside|outside|here)\b.*?)" + _NOW
)
_VERB = re.compile(_POLITE + r"(open|close|shut|lock|unlock|toggle)\s+(.+)$")

# (action, domain) → service; an action on a domain not listed is not supported.
_ON_OFF_DOMAINS = (
    "light",
    "switch",
    "fan",
    "input_boolean",
    "media_player",
    "climate",
    "humidifier",
    "siren",
    "automation",
    "script",
)
SERVICES: dict[tuple[str, str], str] = {
    **{("on", d): "turn_on" for d in _ON_OFF_DOMAINS},
    **{("off", d): "turn_off" for d in _ON_OFF_DOMAINS},
    **{("toggle", d): "toggle" for d in (*_ON_OFF_DOMAINS, "cover")},
    ("open", "cover"): "open_cover",
    ("close", "cover"): "close_cover",
    ("lock", "lock"): "lock",
    ("unlock", "lock"): "unlock",
}

# The state each action asks for (toggle asks for none): a device already in it was left
# as it was on purpose, not by a change still to come.
ASKED_STATE: dict[str, str] = {
    "on": "on",
    "off": "off",
    "lock": "locked",
    "unlock": "unlocked",
    "open": "open",
    "close": "closed",
}


# How often a watched device is read back after a call it did not report on.
WATCH_EVERY_S = 0.25


@dataclass(frozen=True, slots=True)
class Reported:
    """A state a device reported after the call that asked for it had returned."""

    state: str
    after_s: float


@dataclass(frozen=True, slots=True)
class _Unreported:
    """A device called whose change Home Assistant did not report during the call."""

    match: Match
    called: str  # "Called lock.lock on Attic Hatch"
    url: str
    was: Any


@dataclass(frozen=True, slots=True)
class Request:
    """What a query asks, read from its words."""

    domains: frozenset[str]  # empty: any domain
    device_class: str | None
    state: str | None  # filter: only entities in this state ("which lights are on")
    names: tuple[str, ...]  # words to fuzzy-match against names and areas
    entity_id: str | None = None
    action: str | None = None  # control: on/off/toggle/open/close/lock/unlock
    all: bool = False


def _words(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).lower()
    return _TOKEN.findall(folded.replace("'s", "").replace("’s", ""))


def parse_control(query: str) -> tuple[str, str] | None:
    """(action, target text) when the query asks to change a device, else None."""
    text = query.strip().lower()
    if "?" in text or re.search(r"\b(status|state)\b", text):
        return None
    if m := _ON_OFF_FIRST.match(text):
        return m.group(1), m.group(2)
    if m := _ON_OFF_LAST.match(text):
        return m.group(2), m.group(1)
    if m := _ON_OFF_MID.match(text):
        return m.group(2), f"{m.group(1)} {m.group(3)}"
    if m := _VERB.match(text):
        action = {"shut": "close"}.get(m.group(1), m.group(1))
        return action, m.group(2)
    return None


def parse_request(query: str) -> Request:
    """Sort the query's words into domains, measures, states and names."""
    control = parse_control(query)
    text = control[1] if control else query
    words = _words(text)
    domains: set[str] = set()
    device_class = None
    state = None
    names: list[str] = []
    listing = bool(LISTING_WORDS.intersection(words))
    for word in words:
        if word in DOMAIN_WORDS:
            domains |= DOMAIN_WORDS[word]
        elif word in MEASURE_WORDS:
            measure_domains, device_class = MEASURE_WORDS[word]
            domains |= measure_domains
        elif word in NOUN_WORDS:
            domains |= NOUN_WORDS[word]
            names.append(word)
        elif word in STATE_WORDS:
            state = STATE_WORDS[word]
            if word in ("locked", "unlocked"):
                domains.add("lock")
        elif word not in STOPWORDS:
            names.append(word)
    entity = _ENTITY_ID.search(text.lower())
    return Request(
        domains=frozenset(domains),
        device_class=device_class,
        state=state if listing and not control else None,
        names=tuple(names),
        entity_id=entity.group(1) if entity else None,
        action=control[0] if control else None,
        all=bool(ALL_WORDS.intersection(words)),
    )


# ---------------------------------------------------------------------------------------
# Matching entities
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Match:
    state: dict[str, Any]
    area: str | None
    matched_words: int = 0
    score: float = 0.0
    name: str = field(default="")

    @property
    def entity_id(self) -> str:
        return str(self.state["entity_id"])

    @property
    def domain(self) -> str:
        return self.entity_id.split(".", 1)[0]


def _name_of(state: dict[str, Any]) -> str:
    name = state.get("attributes", {}).get("friendly_name")
    if isinstance(name, str) and name.strip():
        return name
    # an id without a domain (a broken integration's) is named as it is, not a crash
    return str(state["entity_id"]).partition(".")[2].replace("_", " ") or str(state["entity_id"])


def _fits_kind(state: dict[str, Any], request: Request, domain: str) -> bool:
    if request.domains and domain not in request.domains:
        return False
    if request.device_class and domain in ("sensor", "binary_sensor", "number"):
        return bool(state.get("attributes", {}).get("device_class") == request.device_class)
    if request.device_class == "temperature" and domain == "climate":
        return "current_temperature" in state.get("attributes", {})
    return True


def match_entities(
    states: list[dict[str, Any]], areas: dict[str, str], request: Request
) -> list[Match]:
    """Entities the request names, best first; [] when nothing fits.

    With name words, only the entities matching the most of them are kept (so "garage
    door" keeps Garage Door, not every door); without, every entity of the asked kind.
    """
    if request.entity_id:
        exact = [s for s in states if s["entity_id"] == request.entity_id]
        if exact:
            return [Match(exact[0], areas.get(request.entity_id), name=_name_of(exact[0]))]
    if not request.domains and not request.names:
        return []
    matches: list[Match] = []
    for state in states:
        domain = state["entity_id"].split(".", 1)[0]
        if not _fits_kind(state, request, domain):
            continue
        if request.state and str(state.get("state")) != request.state:
            continue
        name = _name_of(state)
        area = areas.get(state["entity_id"])
        match = Match(state, area, name=name)
        if request.names:
            candidate = _words(f"{name} {area or ''}")
            if not candidate:
                continue
            best = [max(fuzz.ratio(word, c) for c in candidate) for word in request.names]
            hits = [b for b in best if b >= WORD_MATCH]
            if not hits:
                continue
            match.matched_words = len(hits)
            match.score = sum(hits) / len(request.names)
        matches.append(match)
    if request.names and matches:
        top = max(m.matched_words for m in matches)
        matches = [m for m in matches if m.matched_words == top]
    matches.sort(key=lambda m: (-m.matched_words, -m.score, m.name.lower()))
    return matches


# ---------------------------------------------------------------------------------------
# Saying it
# ---------------------------------------------------------------------------------------


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def describe(state: dict[str, Any], area: str | None, temp_unit: str) -> str:
    """One readable sentence: "Kitchen Lights is on (brightness 180)"."""
    attrs = state.get("attributes", {}) or {}
    name = _name_of(state)
    domain = state["entity_id"].split(".", 1)[0]
    value = str(state.get("state"))
    unit = attrs.get("unit_of_measurement")
    details: list[str] = []
    if value in ("unavailable", "unknown"):
        sentence = f"{name} is {value}"
    elif unit:
        sentence = f"{name} is {value} {unit}"
    else:
        sentence = f"{name} is {value.replace('_', ' ')}"
    if domain == "light" and value == "on" and attrs.get("brightness") is not None:
        details.append(f"brightness {_num(attrs['brightness'])}")
    if domain == "cover" and attrs.get("current_position") is not None:
        details.append(f"position {_num(attrs['current_position'])}%")
    if domain == "climate":
        if attrs.get("current_temperature") is not None:
            details.append(f"current temperature {_num(attrs['current_temperature'])} {temp_unit}")
        if attrs.get("temperature") is not None:
            details.append(f"target {_num(attrs['temperature'])} {temp_unit}")
    if domain == "media_player" and attrs.get("media_title"):
        details.append(f"playing {attrs['media_title']}")
    if area:
        details.append(f"area {area}")
    return sentence + (f" ({', '.join(details)})" if details else "")


# ---------------------------------------------------------------------------------------
# The source
# ---------------------------------------------------------------------------------------


class HomeAssistantSource(ActingSource):
    """Answers device-status questions from a Home Assistant; controls devices if allowed."""

    kind = "homeassistant"

    def __init__(self, name: str, config: Config) -> None:
        super().__init__(name, config.timeout_s)
        self.url = config.url
        # Item URLs never carry credentials the configured URL may hold (user:pass@).
        self.public_base = http.public_url(config.url)
        self.allow_control = config.allow_control
        self.max_results = config.max_results
        self.recognizer = config.recognizer
        # A watch ends well inside the call's own timeout, so a device that never reports
        # reads as "no change", not as an act cut off (which may have taken effect).
        self.confirm_s = min(config.confirm_s, 0.8 * config.timeout_s)
        self._token = config.token
        self._what = f"Home Assistant ({name})"
        self._api = http.BearerClient(self.url, self.timeout_s, config.token)
        self._areas: dict[str, str] = {}
        self._areas_at = float("-inf")
        self._temp_unit: str | None = None

    # -- plumbing --

    def _http(self) -> httpx.AsyncClient:
        return self._api.get()

    async def start(self) -> None:
        self._api.get()

    async def aclose(self) -> None:
        await self._api.aclose()

    async def _states(self) -> list[dict[str, Any]]:
        body = await http.get_json(
            self._http(), "/api/states", what=self._what, max_bytes=MAX_STATES_BYTES
        )
        if not isinstance(body, list) or not all(
            isinstance(s, dict) and isinstance(s.get("entity_id"), str) and "state" in s
            for s in body
        ):
            raise SourceBadResponse(f"{self._what}: /api/states is not a list of states")
        for state in body:
            if not isinstance(state.get("attributes"), dict):
                state["attributes"] = {}
        return body

    async def _config(self) -> dict[str, Any]:
        body = await http.get_json(self._http(), "/api/config", what=self._what)
        if not isinstance(body, dict):
            raise SourceBadResponse(f"{self._what}: /api/config is not an object")
        return body

    async def _area_map(self) -> dict[str, str]:
        """entity_id → area name, cached; empty when the template API is refused."""
        if time.monotonic() - self._areas_at < AREA_CACHE_S:
            return self._areas
        try:
            response = await http.request(
                self._http(),
                "POST",
                "/api/template",
                what=self._what,
                json={"template": AREA_TEMPLATE},
            )
            pairs = http.parse_json(response, self._what)
            self._areas = {str(e): str(a) for e, a in pairs}
        except (SourceError, ValueError, TypeError):
            self._areas = {}  # areas are an extra: status answers work without them
        self._areas_at = time.monotonic()
        return self._areas

    async def _temperature_unit(self) -> str:
        if self._temp_unit is None:
            units = (await self._config()).get("unit_system")
            unit = units.get("temperature") if isinstance(units, dict) else None
            self._temp_unit = unit if isinstance(unit, str) else "°"
        return self._temp_unit

    def _history_url(self, entity_id: str) -> str:
        return f"{self.public_base}/history?entity_id={quote(entity_id)}"

    # -- the interface --

    def command(self, query: str) -> Command | None:
        """The service call `query` asks for ("unlock the front door"), or None."""
        parsed = parse_control(query)
        if parsed is None:
            return None
        action, target = parsed
        return Command(action=action, target=target.strip(), query=query)

    async def info(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"type": self.kind, "allow_control": self.allow_control}
        try:
            config = await self._config()
        except SourceError as exc:
            facts["error"] = exc.reason
            return facts
        facts["version"] = config.get("version")
        facts["state"] = config.get("state")
        return facts

    async def search(self, query: str) -> list[Item]:
        request = parse_request(query)
        states = await self._states()
        areas = await self._area_map()
        if request.action:  # reading a command's words: the state of what it names
            request = Request(
                domains=request.domains,
                device_class=None,
                state=None,
                names=request.names,
                entity_id=request.entity_id,
                all=request.all,
            )
        matches = match_entities(states, areas, request)
        if not matches:
            return []
        needs_unit = any(m.domain == "climate" for m in matches[: self.max_results])
        unit = await self._temperature_unit() if needs_unit else "°"
        return [
            Item(
                title=m.name,
                text=describe(m.state, m.area, unit),
                url=self._history_url(m.entity_id),
            )
            for m in matches[: self.max_results]
        ]

    async def recognize(self, command: Command) -> Command:
        """What HA's own sentence matching makes of the command (read-only: the Assist
        debug recognition runs no agent and calls no service)."""
        if self.recognizer != "homeassistant":
            return command
        facts: dict[str, Any] = {"recognizer": "homeassistant"}
        try:
            (found,) = await ha_recognize.recognize(
                self.url,
                self._token.get_secret_value(),
                [command.query],
                timeout_s=self.timeout_s,
                what=self._what,
            )
            facts.update(found.to_event())
        except SourceError as exc:
            facts.update(intent=None, matched=False, slots={}, targets=[], error=exc.reason)
        return replace(command, recognized=facts)

    async def act(self, command: Command) -> list[Item]:
        """Call the service `command` asks for on the one device it names (or all, if it
        says so): an item per device called, `Unchanged` for one that reported no change.
        A command that could mean several devices calls nothing and answers which
        (`Unchanged`); one that names no device that can do it answers no item.

        The devices are those HA's recognition targeted when it matched an on/off intent
        of the same polarity as the command the gate let through; else this parser's."""
        if not self.allow_control:
            raise ControlNotAllowed(f"source '{self.name}' does not allow control")
        request = parse_request(command.query)
        states = await self._states()
        targets = recognized_targets(command)
        if targets:
            by_id = {s["entity_id"]: s for s in states}
            areas = await self._area_map()
            action = request.action or command.action
            chosen = [
                Match(by_id[e], areas.get(e), name=_name_of(by_id[e]))
                for e in targets
                if e in by_id and (action, e.split(".", 1)[0]) in SERVICES
            ]
            if chosen:
                return await self._call_all(action, chosen[: self.max_results])
        areas = await self._area_map()
        return await self._control(command.query, request, states, areas)

    async def unplaced(self, command: Command) -> tuple[str, ...]:
        """The target's words that name nothing about the device this parser would act
        on: "seven" in "turn on the bed light at seven", "arrival" in "... on arrival".
        None when Home Assistant's own sentence matching understood the whole command
        (its targets are used), or when nothing matches (nothing would be changed)."""
        if recognized_targets(command):
            return ()
        request = parse_request(command.query)
        targeted = _targeted(request)
        if targeted is None or request.entity_id or not request.names:
            return ()
        matches = match_entities(await self._states(), await self._area_map(), targeted)
        if not matches:
            return ()
        best = matches[0]
        known = _words(f"{best.name} {best.area or ''}")
        return tuple(
            word for word in request.names if max(fuzz.ratio(word, k) for k in known) < WORD_MATCH
        )

    async def _control(
        self,
        query: str,
        request: Request,
        states: list[dict[str, Any]],
        areas: dict[str, str],
    ) -> list[Item]:
        action = request.action or ""
        targeted = _targeted(request)
        if targeted is None:
            return []
        matches = match_entities(states, areas, targeted)
        if not matches:
            return []
        if not request.all and not request.entity_id:
            best = [m for m in matches if m.score == matches[0].score]
            if not request.names or len(best) > 1:
                return [self._ambiguous(query, best if request.names else matches)]
            matches = best
        matches = matches[: self.max_results]
        return await self._call_all(action, matches)

    def _ambiguous(self, query: str, matches: list[Match]) -> Item:
        """Several devices the command could mean: guessing one is not what was asked."""
        listed = ", ".join(f"{m.name} ({m.entity_id})" for m in matches[: self.max_results])
        return Unchanged(
            title="Which device?",
            text=(
                f"'{query}' could mean several devices: {listed}. Name one, or say 'all'. "
                "Nothing was changed."
            ),
            reason="ambiguous",
        )

    async def _call_all(self, action: str, matches: list[Match]) -> list[Item]:
        """Call each device, then read back together the ones whose change Home Assistant
        did not report during their call, so one `confirm_s` covers them all."""
        called = [await self._call(action, m) for m in matches]
        unreported = [c for c in called if isinstance(c, _Unreported)]
        seen = await self._watch(unreported) if unreported and self.confirm_s > 0 else {}
        return [
            c if isinstance(c, Item) else self._verdict(c, seen.get(c.match.entity_id))
            for c in called
        ]

    async def _call(self, action: str, match: Match) -> Item | _Unreported:
        service = SERVICES[(action, match.domain)]
        response = await http.request(
            self._http(),
            "POST",
            f"/api/services/{match.domain}/{service}",
            what=self._what,
            retries=0,
            json={"entity_id": match.entity_id},
        )
        changed = http.parse_json(response, self._what)
        new_state = None
        if isinstance(changed, list):
            for state in changed:
                if isinstance(state, dict) and state.get("entity_id") == match.entity_id:
                    new_state = state.get("state")
        # HA answers the states that changed during the call: none for a device already in
        # that state, or for one that reports its change only later.
        called = f"Called {match.domain}.{service} on {match.name}"
        url = self._history_url(match.entity_id)
        if new_state is not None:
            return Item(title=match.name, text=f"{called}: now {new_state}.", url=url)
        was = match.state.get("state")
        if was == ASKED_STATE.get(action):
            text = f"{called}: it was already {was}, so nothing changed."
            return Unchanged(title=match.name, text=text, url=url, reason="no_change")
        return _Unreported(match, called, url, was)

    def _verdict(self, device: _Unreported, seen: Reported | str | None) -> Item:
        """What came of a call Home Assistant reported no change for, once watched."""
        title, called, was = device.match.name, device.called, device.was
        if isinstance(seen, Reported):
            text = f"{called}: now {seen.state} (reported after {seen.after_s:.1f} s)."
            return Item(title=title, text=text, url=device.url)
        if self.confirm_s <= 0:  # not watched: it may yet report, or may never
            text = f"{called}: Home Assistant reported no change yet (it was {was})."
        else:
            text = (
                f"{called}: Home Assistant reported no change within {self.confirm_s:g} s "
                f"(it was {was}); the device may be slower than that, or may have ignored "
                "the call: its history shows which."
            )
        if seen is not None:  # reading it back failed: say so rather than guess
            text += f" Reading its state back failed: {seen}."
        return Unchanged(title=title, text=text, url=device.url, reason="no_change")

    async def _watch(self, devices: list[_Unreported]) -> dict[str, Reported | str]:
        """Read `devices` back, every WATCH_EVERY_S, until each has left the state it was
        in or `confirm_s` has passed: per entity, what it became and when, or why reading
        it failed (none: nothing changed). Only reads: a device that ignored the call is
        told apart from a slow one, never called again."""
        started = time.monotonic()
        until = started + self.confirm_s
        waiting = {d.match.entity_id: d.was for d in devices}
        seen: dict[str, Reported | str] = {}
        while waiting and (left := until - time.monotonic()) > 0:
            await asyncio.sleep(min(WATCH_EVERY_S, left))
            for entity_id, was in list(waiting.items()):
                path = f"/api/states/{quote(entity_id, safe='.')}"
                try:
                    async with asyncio.timeout(max(until - time.monotonic(), 0.05)):
                        state = await http.get_json(self._http(), path, what=self._what)
                except TimeoutError:
                    return seen  # the time to watch is up
                except SourceError as exc:
                    seen[entity_id] = exc.reason
                else:
                    if not isinstance(state, dict) or "state" not in state:
                        seen[entity_id] = "malformed_response"
                    elif state["state"] != was:
                        after_s = time.monotonic() - started
                        seen[entity_id] = Reported(str(state["state"]), after_s)
                if entity_id in seen:
                    del waiting[entity_id]
        return seen


def _targeted(request: Request) -> Request | None:
    """The devices a command's words can reach: its domains that support its action (any
    such domain when it names none); None when none does."""
    action = request.action or ""
    able = frozenset(d for (a, d) in SERVICES if a == action)
    domains = (request.domains & able) if request.domains else able
    if not domains:
        return None
    return Request(
        domains=domains,
        device_class=None,
        state=None,
        names=request.names,
        entity_id=request.entity_id,
    )


# HA's on/off intents, and this parser's actions of each polarity (HA locks with
# HassTurnOn and opens covers with it; unlocks and closes with HassTurnOff).
INTENT_POLARITY = {"HassTurnOn": "on", "HassTurnOff": "off"}
ACTION_POLARITY = {"on": "on", "open": "on", "lock": "on", "off": "off", "close": "off"}
ACTION_POLARITY["unlock"] = "off"


def recognized_targets(command: Command) -> tuple[str, ...]:
    """HA's targets for `command`, when its recognition fully matched an on/off intent
    that agrees with the command's own action; () otherwise (the local parse decides)."""
    found = command.recognized or {}
    polarity = INTENT_POLARITY.get(str(found.get("intent")))
    if not found.get("matched") or polarity is None:
        return ()
    if ACTION_POLARITY.get(command.action) != polarity:
        return ()
    return tuple(str(t) for t in found.get("targets") or ())


def build(name: str, config: SourceConfig) -> Source:
    assert isinstance(config, Config)
    return HomeAssistantSource(name, config)
