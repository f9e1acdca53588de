"""What a client of the running server needs from config.yaml, read without validating the rest.

`search query` with a server running only dials it: the address, the token, the query
limit and the request deadline. The full `search.config` validation imports pydantic, every
source kind and the shipped route data, and takes longer than the server's answer; a
client that asks a server does not need it. Each key read here is checked as the full
config checks it; anything this reader does not take as plainly valid (a missing
environment variable, a port that is not an integer) gives None, and the caller loads the
full config, which names the bad key (exit 2) and runs in-process if need be.

Only the standard library and PyYAML are imported, so the two ways of reading config.yaml
that the full config (`search.config`) shares with this one live here: `${VAR}` expansion
(`env_reference`) and the YAML loader that refuses a key given twice (`ConfigLoader`).
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
# `${VAR}` or `${VAR:-default}` in a config value (see `env_reference`).
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_MERGE_TAG = "tag:yaml.org,2002:merge"
_SHOWN_KEY_CHARS = 80


def env_reference(match: re.Match[str]) -> str | None:
    """What an ENV_REFERENCE match stands for, as in the shell: VAR's value; with
    `:-default`, the default when VAR is unset *or empty* (`SEARCH_DATA_DIR=` must not
    make the data directory `/`). None: VAR is unset and there is no default."""
    name, default = match.group(1), match.group(2)
    value = os.environ.get(name)
    if default is not None and not value:
        return default
    return value


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping names one key twice, of which YAML would silently keep the last."""


class ConfigLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML (libyaml's where PyYAML has it: it refuses nesting past 1000 levels with a
    YAMLError, where the pure-Python loader recurses) that refuses a key given twice in
    one mapping (`max_parts: 8` then `max_parts: 3`), naming it by its path in the file.

    A merge key (`<<: *base`) is not a duplicate: an explicit key may override what it
    merges. Each node's parent is kept as a link (never a path string per node, which a
    deep file with long keys would make quadratic) and the path is spelled only on error.
    """

    # Whether keys are named quoted (a check file's keys are queries: 'lights on' reads
    # as one key) or bare (a config's keys are names: routing.max_parts).
    quote_keys = False

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._parent: dict[int, tuple[int, str]] = {}  # id(node) -> (id(parent), ".key")

    def _path(self, node_id: int, label: str) -> str:
        """The dotted path of `label` in the mapping or sequence of `node_id`."""
        labels = [label]
        seen = {node_id}
        while node_id in self._parent:
            node_id, label = self._parent[node_id]
            if node_id in seen:
                break
            seen.add(node_id)
            labels.append(label)
        path = "".join(reversed(labels)).removeprefix(".")
        return path if len(path) <= _SHOWN_KEY_CHARS else path[: _SHOWN_KEY_CHARS - 3] + "..."

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=False)
                try:
                    earlier = first.setdefault(key, key_node)
                except TypeError:
                    continue  # unhashable: the constructor refuses it itself
                shown = str(key)[:_SHOWN_KEY_CHARS]
                bare = shown.isprintable() and not self.quote_keys
                label = "." + (shown if bare else repr(shown))
                self._parent.setdefault(id(value_node), (id(node), label))
                if earlier is not key_node:
                    raise DuplicateKeyError(
                        problem=f"{self._path(id(node), label)} is given twice (first on line "
                        f"{earlier.start_mark.line + 1}); YAML would keep only the last",
                        problem_mark=key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)

    def construct_sequence(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._parent.setdefault(id(item), (id(node), f"[{index}]"))
        return super().construct_sequence(node, deep=deep)


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
        found = env_reference(match)
        if found is None:
            raise _Unsure
        return found

    return ENV_REFERENCE.sub(sub, value)


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
        data = yaml.load(chosen.read_text(encoding="utf-8"), Loader=ConfigLoader)  # noqa: S506 - a safe loader
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, RecursionError):
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
