"""What a client of the running server needs from config.yaml, read without validating the rest.

`search query` with a server running only dials it: the address, the token, the query
limit and the request deadline. The full `search.config` validation imports pydantic, every
source kind and the shipped route data, and takes longer than the server's answer; a
client that asks a server does not need it. Each key read here is checked as the full
config checks it; anything this reader does not take as plainly valid (a missing
environment variable, a port that is not an integer) gives None, and the caller loads the
full config, which names the bad key (exit 2) and runs in-process if need be.

Only the standard library and PyYAML are imported.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The defaults of `search.config.ServerConfig` and `routing.config.RoutingConfig`
# (tests/search/test_client_settings.py holds them equal).
DEFAULT_CONFIG_PATH = "config.yaml"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_MAX_QUERY_CHARS = 1000
DEFAULT_REQUEST_DEADLINE_S = 15.0
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """The server's address, its bearer token (None: none configured) and two limits."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_token: str | None = None
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS
    request_deadline_s: float = DEFAULT_REQUEST_DEADLINE_S


class _Unsure(Exception):
    """A value this reader does not judge; the full config will."""


def _expanded(value: Any) -> Any:
    if not isinstance(value, str):
        return value

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise _Unsure

    return _ENV.sub(sub, value)


def _int(value: Any, low: int, high: int) -> int:
    value = _expanded(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _Unsure
    return value


def _number(value: Any, low: float, high: float) -> float:
    value = _expanded(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Unsure
    if not (low < value <= high):
        raise _Unsure
    return float(value)


def _text(value: Any) -> str:
    value = _expanded(value)
    if not isinstance(value, str):
        raise _Unsure
    return value


def read_client_settings(path: str | os.PathLike[str] | None = None) -> ClientSettings | None:
    """The client's settings from `path` (or `$SEARCH_CONFIG`, or ./config.yaml), or None
    when the file or one of these keys needs the full config's judgement."""
    chosen = Path(path or os.environ.get("SEARCH_CONFIG") or DEFAULT_CONFIG_PATH)
    try:
        data = yaml.load(chosen.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - a safe loader
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None
    server = data.get("server") or {}
    routing = data.get("routing") or {}
    if not isinstance(server, dict) or not isinstance(routing, dict):
        return None
    try:
        token = server.get("api_token")
        return ClientSettings(
            host=_text(server.get("host", DEFAULT_HOST)),
            port=_int(server.get("port", DEFAULT_PORT), 0, 65535),
            api_token=None if token is None else _text(token),
            max_query_chars=_int(
                server.get("max_query_chars", DEFAULT_MAX_QUERY_CHARS), 1, 100_000
            ),
            request_deadline_s=_number(
                routing.get("request_deadline_s", DEFAULT_REQUEST_DEADLINE_S), 0, 600
            ),
        )
    except _Unsure:
        return None


def settings_of(config: Any) -> ClientSettings:
    """The same settings from a fully validated `search.config.Config`."""
    token = config.server.api_token
    return ClientSettings(
        host=config.server.host,
        port=config.server.port,
        api_token=token.get_secret_value() if token is not None else None,
        max_query_chars=config.server.max_query_chars,
        request_deadline_s=config.routing.request_deadline_s,
    )
