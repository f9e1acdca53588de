"""Start a real Home Assistant (2024.3.3, its `demo` integration) for the test suite.

Why real: the `homeassistant` and `ha_weather` sources speak HA's REST and websocket APIs,
and a hand-written fake would only test our reading of the docs. HA lives in its own venv
(`scripts/ha_venv.sh`, cached under `${SEARCH_HA_VENV:-~/.cache/search-router/ha-2024.3.3}`)
because its pins clash with ours; the only allowed skip is when that venv cannot be built
(and under `CI=true` even that fails the run: tests/support/require.py).

No browser, no onboarding: the config dir is pre-seeded with `.storage/auth` holding an
owner user and a long-lived refresh token, and the access token is the HS256 JWT HA itself
would mint for it (`{"iss": token_id, "iat", "exp"}` signed with the token's `jwt_key`).

Demo entities the tests rely on (all created by `demo:` in 2024.3.3):
- lights: `light.bed_light` (off), `light.ceiling_lights`, `light.kitchen_lights`,
  `light.office_rgbw_lights`, `light.living_room_rgbww_lights`,
  `light.entrance_color_white_lights` (on);
- covers: `cover.garage_door` ("Garage Door", device_class garage, closed),
  `cover.kitchen_window`, `cover.hall_window`, `cover.living_room_window`;
- sensors: `sensor.outside_temperature` ("Outside Temperature", 15.6 °C),
  `sensor.outside_humidity`;
- locks: `lock.front_door` (locked), `lock.kitchen_door` (unlocked); and, from the
  config below, not the demo: `lock.attic_hatch` (a template lock that reports "locked"
  half a second after its call returned) and `lock.cellar_hatch` (one whose lock action
  does nothing: always unlocked);
- weather: `weather.demo_weather_south` (sunny), `weather.demo_weather_north` (rainy).
The config also loads `conversation` (Assist's agents, and the sentence-matching debug
command), and the repo's `homeassistant/custom_components/` is copied into the config dir,
so the Search Router agent can be set up through its config flow.

The demo assigns no areas, so after start-up the harness creates the area "Living Room"
and puts `sensor.outside_temperature` in it (through the websocket registry API), so
"temperature in the living room" exercises real area matching.

Use: the session-scoped pytest fixture `home_assistant` below (import it into a test
module, or register it once in tests/conftest.py). However many modules import it, one
HA runs per test session: the instance is shared and reference-counted.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.ports import free_port
from tests.support.require import missing_service
from tests.support.venvs import run_venv_script

HA_VERSION = "2024.3.3"
REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_SCRIPT = REPO_ROOT / "scripts" / "ha_venv.sh"
# The integrations this repo ships for HA (the Assist agent): installed into every test HA.
CUSTOM_COMPONENTS = REPO_ROOT / "homeassistant" / "custom_components"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
VENV_BUILD_TIMEOUT_S = 1200.0

# Entities the tests read; start-up is not over until all of them exist.
REQUIRED_ENTITIES = (
    "light.kitchen_lights",
    "light.bed_light",
    "cover.garage_door",
    "sensor.outside_temperature",
    "weather.demo_weather_south",
    "lock.attic_hatch",
    "lock.cellar_hatch",
)
LIVING_ROOM_ENTITY = "sensor.outside_temperature"


@dataclass(frozen=True)
class HomeAssistant:
    """A running HA: where it listens, a long-lived admin token, and its files."""

    url: str
    token: str
    config_dir: Path
    log_path: Path
    version: str = HA_VERSION


class HomeAssistantUnavailable(RuntimeError):
    """The HA venv could not be built on this machine (the one reason to skip)."""


# --- the venv ---------------------------------------------------------------------------


# Domains of the demo's devices a command can change.
COMMANDABLE_DOMAINS = frozenset(
    {"light", "fan", "switch", "cover", "lock", "media_player", "climate", "input_boolean"}
)


def call_service(hass: HomeAssistant, domain: str, service: str, entity_id: str) -> None:
    """Set a device's state through HA itself, not through the source under test."""
    httpx.post(
        f"{hass.url}/api/services/{domain}/{service}",
        json={"entity_id": entity_id},
        headers={"Authorization": f"Bearer {hass.token}"},
        timeout=10,
        trust_env=False,
    ).raise_for_status()


def read_states(hass: HomeAssistant) -> dict[str, dict[str, Any]]:
    """Every entity's state object, read from HA itself, not through the source under test."""
    response = httpx.get(
        f"{hass.url}/api/states",
        timeout=10,
        trust_env=False,
        headers={"Authorization": f"Bearer {hass.token}"},
    )
    response.raise_for_status()
    return {s["entity_id"]: s for s in response.json()}


def device_states(hass: HomeAssistant) -> dict[str, tuple[str, str]]:
    """(state, last_changed) of every device a command could change: the witness that a
    command ran or did not. `last_changed` moves only with the state: the demo's media
    players refresh their attributes, and so `last_updated`, on their own."""
    return {
        entity: (s["state"], s["last_changed"])
        for entity, s in read_states(hass).items()
        if entity.split(".")[0] in COMMANDABLE_DOMAINS
    }


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "search-router" / f"ha-{HA_VERSION}"
    return Path(os.environ.get("SEARCH_HA_VENV", default))


def ensure_venv() -> Path:
    """Build (or reuse) the HA venv; the path of its `hass` executable."""
    run_venv_script(VENV_SCRIPT, VENV_BUILD_TIMEOUT_S, HomeAssistantUnavailable, "HA")
    hass = venv_dir() / "bin" / "hass"
    if not hass.exists():
        raise HomeAssistantUnavailable(f"no hass executable at {hass}")
    return hass


# --- the config dir ---------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def make_access_token(refresh_token_id: str, jwt_key: str, lifetime_s: int) -> str:
    """The HS256 JWT HA mints for a refresh token (see homeassistant/auth/__init__.py)."""
    now = int(time.time())
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = {"iss": refresh_token_id, "iat": now, "exp": now + lifetime_s}
    payload = _b64url(json.dumps(claims).encode())
    signing_input = f"{header}.{payload}".encode("ascii")
    signature = hmac.new(jwt_key.encode(), signing_input, hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64url(signature)}"


def _store(key: str, version: int, data: Mapping[str, object]) -> str:
    return json.dumps({"version": version, "minor_version": 1, "key": key, "data": data})


def seed_auth(config_dir: Path) -> str:
    """Write an owner user with a long-lived token into `.storage`; the access token."""
    storage = config_dir / ".storage"
    storage.mkdir(parents=True, exist_ok=True)
    user_id = uuid.uuid4().hex
    token_id = uuid.uuid4().hex
    jwt_key = secrets.token_hex(64)
    lifetime_s = 10 * 365 * 24 * 3600
    auth = {
        "users": [
            {
                "id": user_id,
                "group_ids": ["system-admin"],
                "is_owner": True,
                "is_active": True,
                "name": "search-router tests",
                "system_generated": False,
                "local_only": False,
            }
        ],
        "groups": [{"id": "system-admin", "name": "Administrators"}],
        "credentials": [],
        "refresh_tokens": [
            {
                "id": token_id,
                "user_id": user_id,
                "client_id": None,
                "client_name": "search-router tests",
                "client_icon": None,
                "token_type": "long_lived_access_token",
                "created_at": datetime.now(UTC).isoformat(),
                "access_token_expiration": float(lifetime_s),
                "token": secrets.token_hex(64),
                "jwt_key": jwt_key,
                "last_used_at": None,
                "last_used_ip": None,
                "expire_at": None,
                "credential_id": None,
                "version": HA_VERSION,
            }
        ],
    }
    (storage / "auth").write_text(_store("auth", 1, auth))
    onboarding = {"done": ["user", "core_config", "analytics", "integration"]}
    (storage / "onboarding").write_text(_store("onboarding", 4, onboarding))
    return make_access_token(token_id, jwt_key, lifetime_s)


CONFIGURATION_YAML = """\
# Written by tests/support/homeassistant.py: loopback only, no default_config (which
# would pull in bluetooth, zeroconf, cloud...), just what the sources under test use.
homeassistant:
  name: Search Router Test Home
  latitude: 52.37
  longitude: 4.89
  elevation: 0
  unit_system: metric
  time_zone: UTC
  currency: EUR
  country: NL
  internal_url: "http://127.0.0.1:{port}"
http:
  server_host: 127.0.0.1
  server_port: {port}
api:
websocket_api:
config:
conversation:
demo:
# Two locks the demo lacks, to tell a slow device from one that ignores a call: the attic
# hatch's bolt is shot by a script half a second after the call returned (HA reports no
# change during the call); the cellar hatch's lock action does nothing at all.
input_boolean:
  attic_hatch_bolt:
    name: Attic hatch bolt
    initial: false
script:
  attic_hatch_bolt:
    sequence:
      - delay:
          milliseconds: 500
      - service: input_boolean.turn_on
        target:
          entity_id: input_boolean.attic_hatch_bolt
lock:
  - platform: template
    name: Attic Hatch
    value_template: "{{{{ is_state('input_boolean.attic_hatch_bolt', 'on') }}}}"
    lock:
      - service: script.turn_on
        target:
          entity_id: script.attic_hatch_bolt
    unlock:
      - service: input_boolean.turn_off
        target:
          entity_id: input_boolean.attic_hatch_bolt
  - platform: template
    name: Cellar Hatch
    value_template: "{{{{ false }}}}"
    lock:
      - delay: 0
    unlock:
      - delay: 0
logger:
  default: warning
"""


def install_custom_components(config_dir: Path) -> None:
    """Copy the repo's custom integrations into `custom_components/`, as a user would."""
    for integration in CUSTOM_COMPONENTS.iterdir():
        if (integration / "manifest.json").exists():
            shutil.copytree(
                integration,
                config_dir / "custom_components" / integration.name,
                ignore=shutil.ignore_patterns("__pycache__"),
            )


def write_config(config_dir: Path, port: int) -> str:
    """A fresh HA config dir; returns the access token."""
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "configuration.yaml").write_text(CONFIGURATION_YAML.format(port=port))
    install_custom_components(config_dir)
    return seed_auth(config_dir)


# --- the process ------------------------------------------------------------------------


def _log_tail(log_path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _hass_env() -> dict[str, str]:
    """Our environment without our venv's Python settings or any proxy."""
    drop = {
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    }
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def start_process(hass: Path, config_dir: Path, log_path: Path) -> subprocess.Popen[bytes]:
    command = [
        str(hass),
        "-c",
        str(config_dir),
        "--skip-pip",
        "--log-file",
        str(config_dir / "home-assistant.log"),
    ]
    # util-linux `setpriv --pdeathsig` (it execs HA, so the PID stays HA's): if the test
    # process is killed before teardown, the kernel sends HA SIGTERM instead of orphaning it.
    if setpriv := shutil.which("setpriv"):
        command = [setpriv, "--pdeathsig", "TERM", *command]
    log = open(log_path, "ab")  # noqa: SIM115 - the child keeps its own copy
    try:
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_hass_env(),
            start_new_session=True,
        )
    finally:
        log.close()


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM by PID, then SIGKILL if HA has not stopped within `timeout_s`."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def wait_until_running(
    url: str,
    token: str,
    proc: subprocess.Popen[bytes],
    log_path: Path,
    timeout_s: float = START_TIMEOUT_S,
) -> None:
    """Poll `/api/config` until `state` is RUNNING and the demo entities exist."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {token}"}
    last = "no answer yet"
    with httpx.Client(base_url=url, headers=headers, timeout=5.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"hass exited with {proc.returncode} during start-up; log tail:\n"
                    + _log_tail(log_path)
                )
            try:
                config = client.get("/api/config")
                if config.status_code == 200 and config.json().get("state") == "RUNNING":
                    states = client.get("/api/states").json()
                    present = {s["entity_id"] for s in states}
                    missing = [e for e in REQUIRED_ENTITIES if e not in present]
                    if not missing:
                        return
                    last = f"running, still missing {missing}"
                else:
                    last = f"HTTP {config.status_code}: {config.text[:200]}"
            except (httpx.HTTPError, ValueError) as exc:
                last = type(exc).__name__
            time.sleep(0.5)
    raise RuntimeError(
        f"Home Assistant not running after {timeout_s:.0f} s ({last}); log tail:\n"
        + _log_tail(log_path)
    )


async def ws_commands(url: str, token: str, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send websocket commands in order (each may use `$prev.<key>` from the last result)."""
    from websockets.asyncio.client import connect

    results: list[dict[str, Any]] = []
    ws_url = url.replace("http://", "ws://", 1) + "/api/websocket"
    async with connect(ws_url, proxy=None, open_timeout=10, close_timeout=5) as ws:
        await asyncio.wait_for(ws.recv(), 10)  # auth_required
        await ws.send(json.dumps({"type": "auth", "access_token": token}))
        reply = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if reply.get("type") != "auth_ok":
            raise RuntimeError(f"websocket auth failed: {reply.get('type')}")
        for msg_id, command in enumerate(commands, start=1):
            message = dict(command, id=msg_id)
            for key, value in list(message.items()):
                if isinstance(value, str) and value.startswith("$prev."):
                    message[key] = results[-1][value.removeprefix("$prev.")]
            await ws.send(json.dumps(message))
            while True:
                answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if answer.get("id") == msg_id and answer.get("type") == "result":
                    break
            if not answer.get("success"):
                raise RuntimeError(f"websocket {command['type']} failed: {answer.get('error')}")
            results.append(answer.get("result") or {})
    return results


def assign_living_room(url: str, token: str) -> None:
    """Create the "Living Room" area and put the outside temperature sensor in it."""
    asyncio.run(
        ws_commands(
            url,
            token,
            [
                {"type": "config/area_registry/create", "name": "Living Room"},
                {
                    "type": "config/entity_registry/update",
                    "entity_id": LIVING_ROOM_ENTITY,
                    "area_id": "$prev.area_id",
                },
            ],
        )
    )


# --- the shared instance and the fixture ------------------------------------------------


class _Shared:
    """One HA per test session, however many modules define the fixture."""

    instance: HomeAssistant | None = None
    proc: subprocess.Popen[bytes] | None = None
    users = 0


def _acquire(make_dir: Callable[[], Path]) -> HomeAssistant:
    if _Shared.instance is not None:
        _Shared.users += 1
        return _Shared.instance
    hass = ensure_venv()
    base_dir = make_dir()
    config_dir = base_dir / "config"
    log_path = base_dir / "hass.out"
    port = free_port()
    token = write_config(config_dir, port)
    url = f"http://127.0.0.1:{port}"
    proc = start_process(hass, config_dir, log_path)
    atexit.register(stop_process, proc, 10.0)  # if the session dies before teardown
    try:
        wait_until_running(url, token, proc, log_path)
        assign_living_room(url, token)
    except BaseException:
        stop_process(proc)
        raise
    _Shared.instance = HomeAssistant(url, token, config_dir, log_path)
    _Shared.proc = proc
    _Shared.users = 1
    return _Shared.instance


def _release() -> None:
    _Shared.users -= 1
    if _Shared.users <= 0 and _Shared.proc is not None:
        stop_process(_Shared.proc)
        _Shared.instance = None
        _Shared.proc = None


@pytest.fixture(scope="session")
def home_assistant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HomeAssistant]:
    """A real HA with the demo integration, for the whole session; skips only if the
    HA venv cannot be built here."""
    try:
        instance = _acquire(lambda: tmp_path_factory.mktemp("homeassistant"))
    except HomeAssistantUnavailable as exc:
        missing_service("Home Assistant", str(exc))
    try:
        yield instance
    finally:
        _release()
