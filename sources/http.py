"""Shared HTTP plumbing for sources: one pooled client each, typed failures, safe retries.

Every HTTP source turns transport trouble into the same `SourceError` subclasses, so the
fallback chain sees the same `reason` codes whichever backend failed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import reprlib
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from pydantic import SecretStr

from sources.base import (
    SourceBadResponse,
    SourceError,
    SourceRateLimited,
    SourceServerError,
    SourceTimeout,
    SourceUnauthorized,
    SourceUnavailable,
)

# A backend answer is read up to this many bytes (decoded), then refused: a hostile or
# broken server must not be able to fill the router's memory. Sources with bigger
# legitimate answers pass their own `max_bytes`.
MAX_BODY_BYTES = 4 * 1024 * 1024
# What an event hook reads of an error body to find the backend's own explanation.
MAX_ERROR_BODY_BYTES = 64 * 1024
# Backend text quoted in an error message is cut to this: messages reach events, traces
# and every client, so one huge field must not grow them all.
SHOWN_CHARS = 200

# Query parameters that carry credentials (Open-Meteo's customer API takes `apikey`).
_SECRET_PARAMS = re.compile(
    r"(?i)([?&](?:api_?key|access_token|token|key|password|secret)=)[^&#\s\"']+"
)


# user:password@ in a URL (the user kept, the password masked); linear: no nested repeats.
_URL_USERINFO = re.compile(r"(://[^/@:\s]*):[^/@\s]*@")


class MaskSecretParams(logging.Filter):
    """httpx logs every request's full URL at INFO; mask credential parameters and a
    URL's password in it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = _URL_USERINFO.sub(r"\1:***@", _SECRET_PARAMS.sub(r"\1***", message))
        if masked != message:
            record.msg, record.args = masked, None
        return True


logging.getLogger("httpx").addFilter(MaskSecretParams())


def public_url(url: str) -> str:
    """`url` without user:password, for item URLs, `info()` and as a client's base URL
    where the credentials must not be sent (httpx would send them as Basic auth)."""
    return str(httpx.URL(url).copy_with(username=None, password=None)).rstrip("/")


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = SHOWN_CHARS
_SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxtuple = 6
_SHOWN.maxlevel = 3


SHOWN_CUT = "…"  # ends a text `shown` cut: the scrubber masks a secret cut off before it


def shown(value: Any) -> str:
    """Backend text for an error message: a string cut to SHOWN_CHARS, anything else a
    bounded repr (never the full repr of a huge list); marked with SHOWN_CUT where cut."""
    text = value if isinstance(value, str) else _SHOWN.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + SHOWN_CUT


def finite_number(value: Any, what: str) -> float | None:
    """A backend's number as a finite float, None for null; `what` names it in the error
    (a bool, a string, NaN, an infinity or an int too big for a float is malformed: each
    would break the rounding and arithmetic that describe it)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SourceBadResponse(f"{what} is not a number")
    try:
        number = float(value)
    except OverflowError:  # an int too big for a float
        raise SourceBadResponse(f"{what} is out of range") from None
    if not math.isfinite(number):
        raise SourceBadResponse(f"{what} is out of range")
    return number


def make_client(
    base_url: str, timeout_s: float, headers: dict[str, str] | None = None
) -> httpx.AsyncClient:
    """The one pooled client a source keeps for its lifetime (closed in `aclose`)."""
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=httpx.Timeout(timeout_s),
        # Only encodings `_decoded` can inflate within a bound (never br or zstd, which
        # httpx would ask for once their packages are installed).
        headers={"Accept-Encoding": "gzip, deflate", **(headers or {})},
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
            # user:pass@ in the base URL would make httpx send Basic auth in its place.
            self._client = make_client(public_url(self.base_url), self.timeout_s, headers)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _check_status(response: httpx.Response, what: str) -> None:
    if response.status_code in (401, 403):
        raise SourceUnauthorized(f"{what} refused our credentials (HTTP {response.status_code})")
    if response.status_code == 429:
        raise SourceRateLimited(f"{what} is rate limiting us (HTTP 429)")
    if 300 <= response.status_code < 400:  # clients never follow them (make_client)
        raise SourceBadResponse(
            f"{what} answered with a redirect (HTTP {response.status_code}), which is not "
            "followed: configure the URL it answers on"
        )
    if response.status_code >= 500:
        raise SourceServerError(f"{what} failed with HTTP {response.status_code}")
    if response.status_code >= 400:
        raise SourceError(f"{what} rejected the request (HTTP {response.status_code})")


def _inflater(response: httpx.Response, what: str) -> Any | None:
    """A decompressor for the body's Content-Encoding (None: sent as is). Only what
    `make_client` asks for is taken; anything else cannot be read within a bound."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or zlib header
    raise SourceBadResponse(f"{what} sent a body in an encoding not asked for ({shown(encoding)})")


async def _decoded(response: httpx.Response, what: str, limit: int) -> AsyncIterator[bytes]:
    """The decoded body, ending once it is past `limit` bytes (limit + 1 at most).

    Decompressed here rather than by httpx, with a bound on each chunk's output: httpx
    inflates each network chunk whole, and 64 KiB of gzip can inflate to 64 MiB.
    """
    inflater = _inflater(response, what)
    room = limit + 1
    async for raw in response.aiter_raw():
        if inflater is None:
            chunk = raw[:room]
        else:
            try:
                chunk = inflater.decompress(raw, room)
            except zlib.error:
                raise SourceBadResponse(f"{what} sent a body that does not decompress") from None
        room -= len(chunk)
        yield chunk
        if room <= 0:
            return
    if inflater is not None and response.num_bytes_downloaded:  # an empty body is empty
        yield inflater.flush(room)
        if not inflater.eof:
            raise SourceBadResponse(f"{what} sent a compressed body that is cut short")


async def read_body(response: httpx.Response, what: str, max_bytes: int) -> bytes:
    """The decoded body of a streamed response, refused once it is over `max_bytes`:
    the read stops there, so an endless or huge answer never sits in memory whole."""
    declared = response.headers.get("content-length", "")
    encoded = response.headers.get("content-encoding", "identity") != "identity"
    if declared.isdigit() and int(declared) > max_bytes and not encoded:
        raise SourceBadResponse(f"{what} answer is over {max_bytes} bytes")
    body = bytearray()
    async for chunk in _decoded(response, what, max_bytes):
        body += chunk
    if len(body) > max_bytes:
        raise SourceBadResponse(f"{what} answer is over {max_bytes} bytes")
    return bytes(body)


async def read_prefix(
    response: httpx.Response, what: str, max_bytes: int = MAX_ERROR_BODY_BYTES
) -> bytes:
    """At most `max_bytes` of a streamed body (an error page's explanation), the rest
    left unread: enough to quote, never the whole of a huge page."""
    body = bytearray()
    async for chunk in _decoded(response, what, max_bytes):
        body += chunk
    return bytes(body[:max_bytes])


def _with_body(response: httpx.Response, body: bytes) -> httpx.Response:
    """A plain response holding `body` (already decoded, so no Content-Encoding)."""
    dropped = {"content-encoding", "content-length", "transfer-encoding"}
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in dropped]
    return httpx.Response(
        response.status_code,
        headers=headers,
        content=body,
        request=response.request,
        extensions=response.extensions,
    )


async def _send(
    client: httpx.AsyncClient, request: httpx.Request, what: str, max_bytes: int
) -> httpx.Response:
    """One request and its body, read up to `max_bytes`, within the client's read timeout
    for the whole call: the per-read timeout alone lets a trickling body go on forever."""
    deadline = client.timeout.read
    async with asyncio.timeout(deadline):
        response = await client.send(request, stream=True)
        try:
            if response.status_code >= 300:  # only the status matters (_check_status)
                return response
            return _with_body(response, await read_body(response, what, max_bytes))
        finally:
            await response.aclose()


async def request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    what: str,
    retries: int = 0,
    max_bytes: int = MAX_BODY_BYTES,
    **kwargs: Any,
) -> httpx.Response:
    """Send one request, mapping transport failures to typed `SourceError`s.

    `retries` is only for idempotent calls (GETs): a refused connection, a dropped
    connection or a 502/503/504 is tried again; a timeout is not, because the time budget
    is already spent. The body is read up to `max_bytes`; a longer one is
    `SourceBadResponse` (an error status's body is not read at all).
    """
    attempt = 0
    while True:
        try:
            response = await _send(
                client, client.build_request(method, url, **kwargs), what, max_bytes
            )
        except (httpx.TimeoutException, TimeoutError) as exc:
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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as infinity
        raise ValueError("a number out of range")
    return value


def decode_json(data: str | bytes, what: str) -> Any:
    """Strict JSON: no NaN or Infinity (which no backend's documented format has, and which
    break the arithmetic of whoever reads them), no nesting deeper than the parser can
    take, every failure `SourceBadResponse` naming the source."""
    try:
        return json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SourceBadResponse(f"{what} sent a body that is not JSON") from exc


def parse_json(response: httpx.Response, what: str) -> Any:
    """The body as JSON, or `SourceBadResponse` naming the source."""
    return decode_json(response.content, what)


async def get_json(
    client: httpx.AsyncClient,
    url: str,
    *,
    what: str,
    retries: int = 1,
    max_bytes: int = MAX_BODY_BYTES,
    **kwargs: Any,
) -> Any:
    """GET and decode JSON; idempotent, so retried once on a dropped connection."""
    response = await request(
        client, "GET", url, what=what, retries=retries, max_bytes=max_bytes, **kwargs
    )
    return parse_json(response, what)
