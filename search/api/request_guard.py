"""Refuse requests another web site or a rebound DNS name makes a browser send.

A page on any site can make the user's browser send a request to the router: an HTML form
(`enctype=text/plain` carries a JSON-looking body), or `fetch` in `no-cors` mode. Neither
can set `Content-Type: application/json` without a CORS preflight, which this server never
answers, so a body of any other type is refused (415) before any route reads it. A
browser names the page's site in `Origin`; one that is not this server's own is refused
(403). A DNS-rebinding page (its own name resolved to 127.0.0.1) is same-origin to the
browser, so only `Host` gives it away: a name that is not the server's is refused (403).

The server's own names: `localhost`, `127.0.0.1`, `[::1]`, the configured bind host,
the address the connection came in on (an IP under uvicorn: not a name DNS can rebind,
and what a health probe dialling the pod's address sends), plus `server.allowed_hosts`.
A Host without a port names the host; with one, the port must be the server's own (the
configured one, or the one the connection came in on), unless listed as `name:port`.
A request without Host (HTTP/1.0) is let through: no browser sends one.

Plain ASGI (never Starlette's base-HTTP middleware, which breaks ContextVar propagation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from search.api.refusals import note_refusal

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_AUTHORITY = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9._-]+)(?::(\d{1,5}))?")
_DEFAULT_PORT = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def split_authority(text: str) -> tuple[str, int | None] | None:
    """'Localhost:8080' -> ('localhost', 8080); '[::1]' -> ('[::1]', None); None if malformed."""
    match = _AUTHORITY.fullmatch(text.strip().lower())
    if match is None:
        return None
    return match.group(1), int(match.group(2)) if match.group(2) else None


def bracketed(host: str) -> str:
    """An IPv6 literal as a Host header writes it ('::1' -> '[::1]')."""
    host = host.lower()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class RequestGuard:
    """Host (403), Origin (403) and, on requests with a body, Content-Type (415)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        bind_host: str = "127.0.0.1",
        port: int | None = None,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        names = set(LOOPBACK_NAMES)
        if bind_host.lower() not in WILDCARD_HOSTS:
            names.add(bracketed(bind_host))
        self.names = frozenset(names)
        self.port = port
        self.any_port: set[str] = set()
        self.exact: set[tuple[str, int]] = set()
        for entry in allowed_hosts:
            parsed = split_authority(entry)
            if parsed is None:
                continue
            name, entry_port = parsed
            if entry_port is None:
                self.any_port.add(name)
            else:
                self.exact.add((name, entry_port))
        self.origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)
        self._good: set[tuple[Any, ...]] = set()

    def host_allowed(self, host: str, scope: Scope) -> bool:
        parsed = split_authority(host)
        if parsed is None:
            return False
        name, port = parsed
        if name in self.any_port or (port is not None and (name, port) in self.exact):
            return True
        server = scope.get("server") or (None, None)
        own = set(self.names)
        if server[0]:
            own.add(bracketed(str(server[0])))
        if name not in own:
            return False
        return port is None or port in (self.port, server[1])

    def origin_allowed(self, origin: str, host: str | None, scope: Scope) -> bool:
        """Same origin as the request (scheme, Host), or listed in `server.allowed_origins`."""
        origin = origin.strip().lower().rstrip("/")
        if origin in self.origins:
            return True
        scheme, sep, authority = origin.partition("://")
        if not sep or scheme not in ("http", "https") or host is None:
            return False
        theirs, ours = split_authority(authority), split_authority(host)
        if theirs is None or ours is None:
            return False
        request_scheme = {"ws": "http", "wss": "https"}.get(
            str(scope.get("scheme", "http")), str(scope.get("scheme", "http"))
        )
        default = _DEFAULT_PORT[scheme]
        return (scheme, theirs[0], theirs[1] or default) == (
            request_scheme,
            ours[0],
            ours[1] or _DEFAULT_PORT.get(request_scheme, 80),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host")
        origin = headers.get("origin")
        refusal: tuple[int, str, str, str] | None = None
        # The same few Host/Origin pairs come with nearly every request: remember the
        # good ones (bounded, so a client cycling names cannot grow it).
        server = scope.get("server")
        key = (host, origin, tuple(server) if server else None, scope.get("scheme"))
        if key not in self._good:
            refusal = self._refusal(host, origin, scope)
            if refusal is None:
                if len(self._good) >= 256:
                    self._good.clear()
                self._good.add(key)
        if refusal is None and scope["type"] == "http" and scope.get("method") in BODY_METHODS:
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                refusal = (
                    415,
                    "unsupported_media_type",
                    "Content-Type",
                    "Content-Type: must be application/json"
                    + (f", not {_shown(media)}" if media else " (none was sent)"),
                )
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, kind, field, message = refusal
        note_refusal(scope, status, kind)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": {"type": kind, "message": message, "field": field}}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _refusal(
        self, host: str | None, origin: str | None, scope: Scope
    ) -> tuple[int, str, str, str] | None:
        if host is not None and not self.host_allowed(host, scope):
            message = (
                f"Host: {_shown(host)} is not a name of this server "
                "(list it in server.allowed_hosts)"
            )
            return (403, "forbidden_host", "Host", message)
        if origin is not None and not self.origin_allowed(origin, host, scope):
            message = (
                f"Origin: {_shown(origin)} is not this server's own "
                "(list it in server.allowed_origins)"
            )
            return (403, "forbidden_origin", "Origin", message)
        return None


_READ = {b"host": "host", b"origin": "origin", b"content-type": "content-type"}


def _headers(scope: Scope) -> dict[str, str]:
    """The headers this guard reads (the first of each; ASGI names are lower-case)."""
    found: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        key = _READ.get(name)
        if key is not None and key not in found:
            found[key] = value.decode("latin-1")
    return found


def _shown(value: Any, limit: int = 80) -> str:
    """A client's header value, quoted and cut short, for the error message."""
    text = str(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")
