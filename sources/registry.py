"""Which `type:` in config.yaml means which source module.

Each source module defines `Config` (a subclass of `SourceConfig` with its own fields)
and `build(name, config) -> Source`. Modules are imported lazily, on first use, so a
quick CLI command never pays for libzim or a websocket client it does not need.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Annotated, Protocol, cast
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sources.base import Source

# Upper bounds of config values with no natural one: far past any household's use, and
# small enough that no store, timer or Redis expiry they reach overflows.
YEAR_S = 365 * 86400.0  # a lifetime or a cool-down, in seconds
MAX_ENTRIES = 10_000_000  # a cache's entries


def _http_url(value: str) -> str:
    """An http(s) URL whose host and port parse: refused here, not when it is dialled."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    try:
        urlsplit(value).port  # noqa: B018 - raises for a port past 65535 or not a number
    except ValueError as exc:
        raise ValueError(f"not a valid URL: {_unparsed(str(exc))}") from None
    return value.rstrip("/")


def _unparsed(message: str) -> str:
    """What `urlsplit` found wrong, in words of our own: its own message quotes what it
    took for the port, which is a password's tail when the password holds a "#", "/" or
    "?" (and a secret never goes into an error)."""
    if "out of range" in message:
        return "its port is out of range 0-65535"
    if "IPv6" in message:
        return "its bracketed (IPv6) host is malformed"
    return "its port is not a number (a password with '#', '/' or '?' must be percent-encoded)"


# A service's base URL in config: http(s) only, without a trailing slash.
HttpUrl = Annotated[str, AfterValidator(_http_url)]


class SourceConfig(BaseModel):
    """Keys every `sources.<name>` entry takes, whatever its type."""

    model_config = ConfigDict(extra="forbid")

    type: str
    enabled: bool = True
    timeout_s: float = Field(default=5.0, gt=0, le=300)
    fallback: list[str] = Field(
        default_factory=list,
        description="Sources to try, in order, when this one fails (not their own fallbacks).",
    )
    description: str = Field(default="", description="What this source answers (for the LLM).")
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    circuit_failures: int = Field(
        default=5,
        ge=0,
        le=1_000_000,
        description="Consecutive failures that open the circuit (0: never).",
    )
    circuit_cooldown_s: float = Field(
        default=30.0, gt=0, le=YEAR_S, description="How long it stays open."
    )
    cache_ttl_s: float | None = Field(
        default=None,
        ge=0,
        le=YEAR_S,
        description="Result cache lifetime for this source (0: never cache).",
    )


class SourceModule(Protocol):
    Config: type[SourceConfig]

    def build(self, name: str, config: SourceConfig) -> Source: ...


KINDS: dict[str, str] = {
    "zim": "sources.zim",
    "kiwix_serve": "sources.kiwix_serve",
    "open_meteo": "sources.open_meteo",
    "ha_weather": "sources.ha_weather",
    "homeassistant": "sources.homeassistant",
    "searxng": "sources.searxng",
}


def register_kind(kind: str, module: str) -> None:
    """Make `type: kind` mean `module` (used by plugins and by the test suite)."""
    KINDS[kind] = module


def kind_module(kind: str) -> SourceModule:
    """The module implementing `kind`; KeyError when the type is unknown."""
    module: ModuleType = importlib.import_module(KINDS[kind])
    return cast(SourceModule, module)
