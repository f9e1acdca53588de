"""Shared HTTP plumbing for sources: one pooled client each, typed failures, safe retries.

Every HTTP source turns transport trouble into the same `SourceError` subclasses, so the
fallback chain sees the same `reason` codes whichever backend failed.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import httpx
from pydantic import SecretStr

from sources.base import (
    SourceBadResponse,
    SourceError,
    SourceServerError,
    SourceTimeout,
    SourceUnauthorized,
    SourceUnavailable,
)

# Query parameters that carry credentials (Open-Meteo's customer API takes `apikey`).
_SECRET_PARAMS = re.compile(
    r"(?i)([?&](?:api_?key|access_token|token|key|password|secret)=)[^&#\s\"']+"
)


class MaskSecretParams(logging.Filter):
    """httpx logs every request's full URL at INFO; mask credential parameters in it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = _SECRET_PARAMS.sub(r"\1***", message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


logging.getLogger("httpx").addFilter(MaskSecretParams())


def make_client(
    base_url: str, timeout_s: float, headers: dict[str, str] | None = None
) -> httpx.AsyncClient:
    """The one pooled client a source keeps for its lifetime (closed in `aclose`)."""
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=httpx.Timeout(timeout_s),
        headers=headers or {},
        limits=httpx.Limits(max_connections=16, max_keepalive_connections=8),
        follow_redirects=False,
        trust_env=False,
    )


class BearerClient:
    """A source's pooled client, made on first use and closed in `aclose`, that sends
    `token` as a bearer token with every request (Home Assistant's REST API)."""

    __slots__ = ("base_url", "timeout_s", "_token", "_client")

    def __init__(self, base_url: str, timeout_s: float, token: SecretStr) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._token = token
        self._client: httpx.AsyncClient | None = None

    def get(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._token.get_secret_value()}"}
            self._client = make_client(self.base_url, self.timeout_s, headers)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _check_status(response: httpx.Response, what: str) -> None:
    if response.status_code in (401, 403):
        raise SourceUnauthorized(f"{what} refused our credentials (HTTP {response.status_code})")
    if response.status_code >= 500:
        raise SourceServerError(f"{what} failed with HTTP {response.status_code}")
    if response.status_code >= 400:
        raise SourceError(f"{what} rejected the request (HTTP {response.status_code})")


async def request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    what: str,
    retries: int = 0,
    **kwargs: Any,
) -> httpx.Response:
    """Send one request, mapping transport failures to typed `SourceError`s.

    `retries` is only for idempotent calls (GETs): a refused connection, a dropped
    connection or a 502/503/504 is tried again; a timeout is not, because the time budget
    is already spent.
    """
    attempt = 0
    while True:
        try:
            response = await client.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            raise SourceTimeout(f"{what} did not answer in time") from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
            if attempt < retries:
                attempt += 1
                continue
            raise SourceUnavailable(f"{what} is unreachable ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise SourceError(f"{what} failed ({type(exc).__name__})") from exc
        if response.status_code in (502, 503, 504) and attempt < retries:
            attempt += 1
            continue
        _check_status(response, what)
        return response


def parse_json(response: httpx.Response, what: str) -> Any:
    """The body as JSON, or `SourceBadResponse` naming the source."""
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SourceBadResponse(f"{what} sent a body that is not JSON") from exc


async def get_json(
    client: httpx.AsyncClient, url: str, *, what: str, retries: int = 1, **kwargs: Any
) -> Any:
    """GET and decode JSON; idempotent, so retried once on a dropped connection."""
    response = await request(client, "GET", url, what=what, retries=retries, **kwargs)
    return parse_json(response, what)
