"""config.yaml: load, expand `${ENV}`, validate with pydantic, and name the bad key.

The whole service is configured here. Each source entry is validated by the `Config`
model of its own module (see `sources.registry`), so a new source kind brings its own
keys without touching this file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from routing.config import RoutingConfig, Strict
from routing.stages.route_data import (
    NONE,
    RouteDataError,
    refuse_booleans_as_numbers,
    resolve_routes,
)
from search.client_settings import ENV_REFERENCE, ConfigLoader, DuplicateKeyError, env_reference
from search.errors import ConfigError
from sources.registry import KINDS, MAX_ENTRIES, YEAR_S, SourceConfig, kind_module

DEFAULT_CONFIG_PATH = "config.yaml"
# libyaml where PyYAML has it: it refuses nesting past 1000 levels with a YAMLError, where
# the pure-Python loader recurses until a RecursionError. It refuses a key given twice.
_LOADER: type[Any] = ConfigLoader
# Bounds on the loaded data, so that a hostile or broken file is refused before it costs
# memory: values counted as `*alias` expansion copies them (an alias bomb of 450 bytes
# expands to 10^8 values), and levels of nesting (a config needs a handful).
MAX_CONFIG_VALUES = 100_000
MAX_CONFIG_DEPTH = 64


def default_data_dir() -> str:
    """$SEARCH_DATA_DIR, else ~/.local/share/search-router: outside any checkout."""
    return os.environ.get("SEARCH_DATA_DIR") or "~/.local/share/search-router"


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_query_chars: int = Field(default=1000, ge=1, le=100_000)
    max_body_bytes: int = Field(default=64 * 1024, ge=256, le=16 * 1024 * 1024)
    api_token: SecretStr | None = None
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Names besides the server's own (localhost, 127.0.0.1, [::1], the bind "
        "host and the address a request came in on) that a request's Host may carry, "
        "e.g. a reverse proxy's public name; 'name' for any port or 'name:port'.",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Origins (scheme://host[:port]) besides the server's own whose pages may "
        "send requests, e.g. the public origin of a reverse proxy that rewrites Host.",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+)(:\d{1,5})?", value):
                raise ValueError(f"{value!r} is not a host name (name or name:port)")
        return [v.lower() for v in values]

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(r"https?://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+)(:\d{1,5})?", value):
                raise ValueError(f"{value!r} is not an origin (scheme://host[:port], no path)")
        return [v.lower() for v in values]


class CacheConfig(Strict):
    result_ttl_s: float = Field(default=300.0, ge=0, le=YEAR_S)
    result_max_entries: int = Field(default=1000, ge=0, le=MAX_ENTRIES)
    redis_url: SecretStr | None = Field(
        default=None,
        description="redis://[:password@]host:port/db (or rediss://, unix://): share the "
        "decision cache, the result cache and circuit-breaker state across workers and "
        "replicas. Unset or empty: each process keeps its own. Kept secret (it may hold a "
        "password): never in a response, trace or log.",
    )
    redis_key_prefix: str = Field(
        default="search:",
        min_length=1,
        max_length=100,
        description="Prefix of every Redis key, so deployments can share one Redis.",
    )
    redis_timeout_s: float = Field(
        default=0.2, gt=0, le=10, description="Limit on each Redis call; past it, local state."
    )
    redis_retry_after_s: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="After a failed Redis call, how long to use local state only before "
        "trying Redis again.",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: SecretStr | None) -> SecretStr | None:
        url = value.get_secret_value().strip() if value is not None else ""
        if not url:
            return None
        if not url.startswith(("redis://", "rediss://", "unix://")):
            # The URL itself is not repeated: it may carry a password.
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return SecretStr(url)


class TraceConfig(Strict):
    enabled: bool = True
    path: str = Field(
        default_factory=lambda: default_data_dir() + "/traces.db",
        description="The trace store; its directory is the data directory (labels, fits).",
    )
    max_traces: int = Field(default=10_000, ge=1, le=100_000_000)
    max_age_days: float = Field(default=30.0, gt=0, le=36_500)
    max_labels: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Labels kept at most (one per part; the oldest go first).",
    )
    capture_results: bool = False
    capture_prompts: bool = False
    redact: bool = False


class TelemetryConfig(Strict):
    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP collector (http://tempo:4318 or its full /v1/traces URL); "
        "unset: no OpenTelemetry export.",
    )
    service_name: str = Field(default="search-router", min_length=1)
    timeout_s: float = Field(default=10.0, gt=0, le=120, description="Per export request.")


class McpConfig(Strict):
    enabled: bool = Field(default=True, description="Serve the MCP tools at /mcp.")
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="The older spelling of server.allowed_hosts (merged with it; checked "
        "on every route, not only /mcp).",
    )


class Config(Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    trace: TraceConfig = Field(default_factory=TraceConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    sources: dict[str, SourceConfig] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _typed_sources(cls, data: Any) -> Any:
        """Validate each source entry with the model of its own `type:`."""
        if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
            return data
        typed: dict[str, Any] = {}
        for name, entry in data["sources"].items():
            if not isinstance(entry, dict):
                raise ValueError(f"sources.{name}: must be a mapping with a `type:`")
            kind = entry.get("type")
            if kind not in KINDS:
                known = ", ".join(sorted(KINDS))
                raise ValueError(f"sources.{name}.type: unknown type {kind!r} (known: {known})")
            model = kind_module(kind).Config
            try:
                refuse_booleans_as_numbers(model, entry)  # SourceConfig is not `Strict`
                typed[name] = model.model_validate(entry)
            except ValidationError as exc:
                raise ValueError(f"sources.{name}.{_describe(exc)}") from None
        return {**data, "sources": typed}

    @model_validator(mode="after")
    def _references(self) -> Config:
        """Every name a route or fallback mentions exists, and no fallback chain loops."""
        routes = set(self.sources) | set(self.routing.fusion)
        for section, names in (("sources", self.sources), ("routing.fusion", self.routing.fusion)):
            if NONE in names:
                raise ValueError(
                    f"{section}.{NONE}: the name {NONE!r} is reserved for requests no source "
                    "serves (routing.routes.none); no query can be routed to it"
                )
        for name in self.routing.fusion:
            if name in self.sources:
                raise ValueError(f"routing.fusion.{name}: a fusion route may not shadow a source")
            for member in self.routing.fusion[name]:
                if member not in self.sources:
                    raise ValueError(f"routing.fusion.{name}: unknown source {member!r}")
        if self.routing.default_source not in routes:
            raise ValueError(
                f"routing.default_source: {self.routing.default_source!r} is not a configured source"
            )
        for section, table in (
            ("keywords", self.routing.keywords),
            ("semantic.exemplars", self.routing.semantic.exemplars),
        ):
            for name in table:
                if name not in routes:
                    raise ValueError(f"routing.{section}.{name}: unknown source or route")
        timely = self.routing.time_sensitive
        named = (
            [("live_route", timely.live_route)] if "live_route" in timely.model_fields_set else []
        )
        if "from_routes" in timely.model_fields_set:
            named += [("from_routes", name) for name in timely.from_routes]
        for key, name in named:
            if name not in routes:
                raise ValueError(f"routing.time_sensitive.{key}: unknown source {name!r}")
        try:
            resolved = resolve_routes(
                routes, self.routing.route_overrides(), shipped=self.routing.shipped_routes
            )
        except RouteDataError as exc:
            raise ValueError(str(exc)) from None
        for name, source in self.sources.items():
            if not source.description and name in resolved:
                source.description = resolved[name].description  # the route's, shipped
        for name, source in self.sources.items():
            for target in source.fallback:
                if target not in self.sources:
                    raise ValueError(f"sources.{name}.fallback: unknown source {target!r}")
                if target == name:
                    raise ValueError(f"sources.{name}.fallback: {name!r} names itself")
        return self


def _describe(exc: ValidationError) -> str:
    """'key.path: message' for the first error, the way a user reads config."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(root)"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    return f"{loc}: {msg}"


def expand_env(value: Any, where: str = "") -> Any:
    """Replace `${VAR}` (or `${VAR:-default}`) in every string; a missing VAR is an error.

    As in the shell, `${VAR:-default}` is the default when VAR is unset or empty, and
    `${VAR}` of a VAR set empty is the empty string.

    The result is a copy, each alias expanded, so a file whose copy would pass
    MAX_CONFIG_VALUES values or MAX_CONFIG_DEPTH levels (an alias bomb, a list that
    contains itself) is a ConfigError as soon as the walk gets there.
    """
    return _expand(value, where, 0, [MAX_CONFIG_VALUES])


def _expand(value: Any, where: str, depth: int, budget: list[int]) -> Any:
    """expand_env at `depth`, taking one from `budget[0]` for each value it visits."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(
            f"(root): config too large: more than {MAX_CONFIG_VALUES:,} values once "
            "its *aliases are expanded"
        )
    if depth > MAX_CONFIG_DEPTH:
        shown = where if len(where) <= 80 else where[:80] + "..."
        raise ConfigError(f"{shown}: nested too deep (more than {MAX_CONFIG_DEPTH} levels)")
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            found = env_reference(match)
            if found is None:
                raise ConfigError(
                    f"{where or '(root)'}: environment variable ${{{match.group(1)}}} is not set"
                )
            return found

        return ENV_REFERENCE.sub(sub, value)
    if isinstance(value, dict):
        return {
            k: _expand(v, f"{where}.{k}" if where else str(k), depth + 1, budget)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_expand(v, f"{where}[{i}]", depth + 1, budget) for i, v in enumerate(value)]
    return value


def parse_config(data: Any) -> Config:
    """Validate already-loaded YAML data; ConfigError names the offending key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("(root): config must be a mapping")
    try:
        return Config.model_validate(expand_env(data))
    except RecursionError:  # a last guard: expand_env bounds the depth well below the limit
        raise ConfigError("(root): config nested too deep") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["type"] == "value_error" and not err["loc"]:
            raise ConfigError(str(err["ctx"]["error"])) from None
        raise ConfigError(_describe(exc)) from None


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Load config from `path`, `$SEARCH_CONFIG`, or ./config.yaml: a parse, nothing else
    (the household's fitted routing is read by the `Service` that routes with it)."""
    chosen = Path(path or os.environ.get("SEARCH_CONFIG") or DEFAULT_CONFIG_PATH)
    try:
        text = chosen.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {chosen}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"cannot read config file {chosen}: not UTF-8 text "
            f"(byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        ) from None
    return parse_config(_parse_yaml(text, chosen))


def _parse_yaml(text: str, path: Path) -> Any:
    """The YAML document in `text`; ConfigError, never a traceback, when it is not one.

    A syntax error, or a key given twice, is one line: the problem and the line and column
    where it was found. Besides YAMLError, PyYAML lets a ValueError out of a bad implicit or
    tagged scalar (`2024-13-45`, `!!int x`), and the pure-Python loader a RecursionError
    from deep nesting.
    """
    try:
        return yaml.load(text, Loader=_LOADER)
    except DuplicateKeyError as exc:
        raise ConfigError(f"{path}: {_marked(exc)}") from None
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_marked(exc)}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML: nested too deep") from None


def _marked(exc: yaml.MarkedYAMLError) -> str:
    """'line L, column C: problem', where PyYAML found it: its own text is several lines
    and names first the construct it was reading (`while scanning a plain scalar`)."""
    mark, problem = exc.problem_mark or exc.context_mark, exc.problem or exc.context
    if mark is None or problem is None:
        return _one_line(str(exc))
    return f"line {mark.line + 1}, column {mark.column + 1}: {_one_line(problem)}"


def _one_line(text: str) -> str:
    return " ".join(text.split())
