"""Plain ASGI middleware.

Never Starlette's base-HTTP middleware class: it runs the endpoint in another task, which
breaks ContextVar propagation and so the route log.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

from search.api.refusals import note_refusal

# /healthz for probes; the viewer's static files hold no data (their fetches need the token).
OPEN_PATHS = frozenset({"/healthz", "/ui", "/ui/", "/ui/app.js", "/ui/style.css"})


_SCHEME = b"bearer "  # the scheme, lower case, and the one space before the token


class BearerTokenMiddleware:
    """Require `Authorization: Bearer <token>` on every route but `/healthz`.

    The scheme is case-insensitive (RFC 7235: `bearer` is `Bearer`); the token is
    compared in constant time, exactly (no padding stripped), and never echoed or logged.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        presented = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                presented = value
                break
        scheme, credentials = presented[: len(_SCHEME)], presented[len(_SCHEME) :]
        valid = hmac.compare_digest(credentials, self._token)
        if valid and scheme.lower() == _SCHEME:
            await self.app(scope, receive, send)
            return
        note_refusal(scope, 401, "unauthorized")
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps(
            {
                "error": {
                    "type": "unauthorized",
                    "message": "authorization: a valid bearer token is required",
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="search"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
