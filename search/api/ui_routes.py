"""`/ui`: the trace viewer, three static files served from the package.

No build step and nothing from outside (no CDN, no web fonts): many home networks reach
none. The Content-Security-Policy says so to the browser too: scripts, styles and
requests may come from this origin only, so a query text shown on the page can never
pull in anything else. The page reads `GET /traces`, `GET /traces/{id}` and
`POST /search`; everything it draws comes from the recorded events.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _read(name: str) -> bytes:
    return resources.files("search").joinpath("ui", name).read_bytes()


def ui_routes() -> list[BaseRoute]:
    """`/ui` and its two assets; the files are read once, at app creation."""
    content = {name: _read(name) for name in FILES}

    async def page(request: Request) -> Response:
        return Response(content["index.html"], media_type=FILES["index.html"], headers=HEADERS)

    def asset(name: str) -> Route:
        async def serve(request: Request) -> Response:
            return Response(content[name], media_type=FILES[name], headers=HEADERS)

        return Route(f"/ui/{name}", serve, methods=["GET", "HEAD"])

    async def slash(request: Request) -> Response:
        # The page links its assets relatively ("ui/app.js"), which needs it at "/ui".
        return RedirectResponse(request.url.path.rstrip("/") or "/", status_code=308)

    return [
        Route("/ui", page, methods=["GET", "HEAD"]),
        Route("/ui/", slash, methods=["GET", "HEAD"]),
        *(asset(name) for name in FILES if name != "index.html"),
    ]
