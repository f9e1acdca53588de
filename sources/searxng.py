"""Web search through a SearXNG instance's JSON API (`GET /search?q=...&format=json`).

SearXNG only answers JSON when `json` is listed in `search.formats` of its settings.yml;
otherwise it answers 403, which this module reports as exactly that misconfiguration
instead of a generic "unauthorized". Results without a title or url are dropped.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import httpx
from pydantic import Field, field_validator

from sources import http
from sources.base import (
    Item,
    Source,
    SourceBadResponse,
    SourceError,
    SourceRateLimited,
    SourceServerError,
    SourceUnauthorized,
)
from sources.registry import HttpUrl, SourceConfig

WHAT = "SearXNG"
_SPACE = re.compile(r"\s+")


class Config(SourceConfig):
    """`sources.<name>` keys for `type: searxng`."""

    type: Literal["searxng"]
    url: HttpUrl = Field(description="Base URL of the SearXNG instance, e.g. http://127.0.0.1:8888")
    max_results: int = Field(default=5, ge=1, le=50)
    categories: list[str] | None = Field(
        default=None, description="SearXNG categories to search (general, news, science...)."
    )
    language: str | None = Field(default=None, description="Search language, e.g. en or de-DE.")

    @field_validator("categories", mode="before")
    @classmethod
    def _split_categories(cls, value: Any) -> Any:
        if isinstance(value, str):  # "general,news" is how SearXNG itself spells it
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


def _clean(value: Any) -> str:
    return _SPACE.sub(" ", value).strip() if isinstance(value, str) else ""


async def _map_error_status(response: httpx.Response) -> None:
    """Name SearXNG's own failure modes before the generic status mapping sees them."""
    status = response.status_code
    if status == 403:
        raise SourceUnauthorized(
            f"{WHAT} refused format=json (HTTP 403): enable `json` in search.formats "
            "of its settings.yml (or a proxy in front of it denied access)"
        )
    if status == 429:
        raise SourceRateLimited(f"{WHAT} is rate limiting us (HTTP 429, its limiter is on)")
    if status in (400, 500):  # the JSON format's own error body: {"error": "..."}
        message = ""
        try:
            body = http.decode_json(await http.read_prefix(response, WHAT), WHAT)
            if isinstance(body, dict):
                message = http.shown(_clean(body.get("error")))
        except SourceBadResponse:
            pass  # not SearXNG's JSON error body: the status alone says it
        detail = f": {message}" if message else ""
        if status == 500:
            raise SourceServerError(f"{WHAT} failed with HTTP 500{detail}")
        raise SourceError(f"{WHAT} rejected the request (HTTP 400){detail}")


def _engines(unresponsive: Any) -> str:
    """SearXNG's `[[engine, reason], ...]` as "wikipedia (timeout), ...", cut to
    `http.SHOWN_CHARS`: the names are the backend's text, and go into every trace."""
    if not isinstance(unresponsive, list):
        return http.shown(unresponsive)
    named = (
        f"{http.shown(e[0])} ({http.shown(e[1])})"
        if isinstance(e, list) and len(e) >= 2
        else http.shown(e)
        for e in unresponsive[:5]
    )
    return http.shown(", ".join(named))


def parse_results(body: Any, max_results: int) -> list[Item]:
    """`results[]` → items; raises `SourceBadResponse` when the shape is not SearXNG's."""
    if not isinstance(body, dict) or not isinstance(body.get("results"), list):
        raise SourceBadResponse(f"{WHAT} answer has no `results` list")
    items: list[Item] = []
    seen: set[str] = set()
    for result in body["results"]:
        if not isinstance(result, dict):
            raise SourceBadResponse(f"{WHAT} result is not an object")
        title, url = _clean(result.get("title")), _clean(result.get("url"))
        if not title or not url or url in seen:
            continue
        seen.add(url)
        items.append(Item(title=title, text=_clean(result.get("content")) or title, url=url))
        if len(items) >= max_results:
            break
    if not items and body["results"] == [] and body.get("unresponsive_engines"):
        # Every engine failed: SearXNG still says 200 with no results. That is an
        # upstream failure, not "nothing found", so the fallback chain should know.
        raise SourceServerError(
            f"{WHAT} engines did not answer: {_engines(body['unresponsive_engines'])}"
        )
    return items


class SearxngSource(Source):
    """One SearXNG instance, one pooled client."""

    kind = "searxng"

    def __init__(self, name: str, config: Config) -> None:
        super().__init__(name, config.timeout_s)
        self.config = config
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        if self._client is None:
            self._client = http.make_client(self.config.url, self.timeout_s)
            self._client.event_hooks = {"request": [], "response": [_map_error_status]}

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def search(self, query: str) -> list[Item]:
        if self._client is None:
            await self.start()
        assert self._client is not None
        params: dict[str, str] = {"q": query, "format": "json"}
        if self.config.categories:
            params["categories"] = ",".join(self.config.categories)
        if self.config.language:
            params["language"] = self.config.language
        body = await http.get_json(self._client, "/search", what=WHAT, params=params)
        return parse_results(body, self.config.max_results)

    async def info(self) -> dict[str, Any]:
        url = httpx.URL(self.config.url).copy_with(username=None, password=None)
        return {"type": self.kind, "url": str(url), "max_results": self.config.max_results}


def build(name: str, config: SourceConfig) -> Source:
    assert isinstance(config, Config)
    return SearxngSource(name, config)
