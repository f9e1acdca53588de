"""The Starlette app: `/search`, `/healthz`, `/openapi.json`.

Only plain ASGI middleware is used: Starlette's `BaseHTTPMiddleware` runs the endpoint
in another task and breaks ContextVar propagation, which would cut the route log.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from search import __version__
from search.config import Config
from search.middleware import BearerTokenMiddleware
from search.openapi import openapi_document
from search.schemas import ErrorDetail, SearchRequest, first_error
from search.service import Service


class BodyTooLarge(Exception):
    pass


def error_response(status: int, type_: str, message: str, field: str | None = None) -> JSONResponse:
    detail = ErrorDetail(type=type_, message=message, field=field)
    return JSONResponse({"error": detail.model_dump(exclude_none=True)}, status_code=status)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than `limit` bytes without reading them all."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def parse_search_request(raw: bytes, max_query_chars: int) -> SearchRequest | JSONResponse:
    """A valid request, or the 4xx response that names what is wrong."""
    try:
        data: Any = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error_response(400, "invalid_json", "body: not valid JSON", "body")
    if not isinstance(data, dict):
        return error_response(422, "invalid_request", "body: must be a JSON object", "body")
    try:
        request = SearchRequest.model_validate(data)
    except ValidationError as exc:
        detail = first_error(exc)
        return error_response(422, detail.type, detail.message, detail.field)
    if not request.query.strip():
        return error_response(422, "invalid_request", "query: must not be empty", "query")
    if len(request.query) > max_query_chars:
        return error_response(
            422,
            "invalid_request",
            f"query: longer than the maximum of {max_query_chars} characters",
            "query",
        )
    return request


def create_app(config: Config, service: Service | None = None) -> Starlette:
    service = service or Service(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.aclose()

    async def search(request: Request) -> Response:
        try:
            raw = await read_body(request, config.server.max_body_bytes)
        except BodyTooLarge:
            return error_response(
                413,
                "body_too_large",
                f"body: larger than the maximum of {config.server.max_body_bytes} bytes",
                "body",
            )
        parsed = parse_search_request(raw, config.server.max_query_chars)
        if isinstance(parsed, JSONResponse):
            return parsed
        outcome = await service.search(
            parsed.query,
            explain=parsed.explain,
            dry_run=parsed.dry_run,
            session_id=parsed.session_id,
        )
        return JSONResponse(outcome.body, status_code=outcome.status_code)

    async def healthz(request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "version": __version__,
                "sources": {name: e.enabled for name, e in config.sources.items()},
            }
        )

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(__version__))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, kind, f"{request.url.path}: {exc.detail}")

    middleware = []
    if config.server.api_token is not None and config.server.api_token.get_secret_value():
        token = config.server.api_token.get_secret_value()
        middleware.append(Middleware(BearerTokenMiddleware, token=token))
    app = Starlette(
        middleware=middleware,
        routes=[
            Route("/search", search, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
    )
    app.state.service = service
    app.state.config = config
    return app
