"""Plain ASGI middleware.

Never Starlette's base-HTTP middleware class: it runs the endpoint in another task, which
breaks ContextVar propagation and so the route log.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

# /healthz for probes; the viewer's static files hold no data (their fetches need the token).
OPEN_PATHS = frozenset({"/healthz", "/ui", "/ui/", "/ui/app.js", "/ui/style.css"})


class BearerTokenMiddleware:
    """Require `Authorization: Bearer <token>` on every route but `/healthz`.

    The comparison is constant-time, and the token is never echoed or logged.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        presented = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                presented = value
                break
        if hmac.compare_digest(presented, self._expected):
            await self.app(scope, receive, send)
            return
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
