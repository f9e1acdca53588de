"""The Starlette app: `/search`, `/healthz`, `/openapi.json`, `/traces`, `/metrics`, `/ui`, `/mcp`.

Only plain ASGI middleware is used: Starlette's base-HTTP middleware class runs the endpoint
in another task and breaks ContextVar propagation, which would cut the route log.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import lru_cache
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from routing.chain.events import run_in_thread
from routing.pipeline import TooManyParts
from search import __version__
from search.api.authority import (
    client_identity,
    may_act,
    open_to_network_warning,
    peer,
    token_required,
)
from search.api.body import (
    BodyTooLarge,
    DuplicateKey,
    StrictJSONBody,
    loads_json,
    receive_body,
    too_large,
)
from search.api.middleware import BearerTokenMiddleware
from search.api.openapi import openapi_document
from search.api.request_guard import RequestGuard
from search.api.schemas import SearchRequest, error_response, first_error
from search.api.ui_routes import ui_routes
from search.config import Config, ConfigError
from search.correction.label_routes import label_routes
from search.json_codec import FastJSONResponse
from search.mcp_server import build_mcp_server, http_endpoint
from search.observability.health import HealthCache
from search.observability.metrics import MetricsObserver, metrics_route
from search.observability.telemetry import telemetry_observers
from search.query_text import query_problem
from search.service import Service
from search.traces.routes import trace_routes
from sources.base import SourceError

log = logging.getLogger("search")


def settle_heap() -> None:
    """Move everything built at start-up (modules, config, rule indexes, the model) out of
    the garbage collector's sight.

    A full collection walks every tracked object, so with start-up's hundred thousand of
    them each one pauses the event loop in proportion; and queued traces that live past a
    young collection make full collections come often. Frozen objects are never collected,
    which is what start-up state wants anyway.
    """
    gc.collect()
    gc.freeze()


# The query check reads every character; a household asks the same few questions, so the
# verdicts on the last texts are remembered (bounded; a pure function of the text).
_query_problem = lru_cache(maxsize=2048)(query_problem)


def parse_search_request(raw: bytes, max_query_chars: int) -> SearchRequest | JSONResponse:
    """A valid request, or the 4xx response that names what is wrong."""
    try:
        data: Any = loads_json(raw)
    except DuplicateKey as exc:
        return exc.response()
    except (ValueError, RecursionError):  # also: nested too deep, an integer too long
        return error_response(400, "invalid_json", "body: not valid JSON", "body")
    if not isinstance(data, dict):
        return error_response(422, "invalid_request", "body: must be a JSON object", "body")
    try:
        request = SearchRequest.model_validate(data)
    except ValidationError as exc:
        detail = first_error(exc)
        return error_response(422, detail.type, detail.message, detail.field)
    problem = _query_problem(request.query, max_query_chars)
    if problem is not None:
        return error_response(422, "invalid_request", problem, "query")
    return request


class SearchEndpoint:
    """`POST /search` as a plain ASGI app (Starlette runs a class instance as one): the
    body read from the ASGI messages and no exception-handling wrapper on the busiest
    route; it raises nothing Starlette's handlers would answer (bad input is answered
    here)."""

    def __init__(self, config: Config, service: Service) -> None:
        self.config = config
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.answer(scope, receive)
        await response(scope, receive, send)

    async def answer(self, scope: Scope, receive: Receive) -> Response:
        limit = self.config.server.max_body_bytes
        try:
            raw = await receive_body(scope, receive, limit)
        except BodyTooLarge:
            return too_large(limit)
        parsed = parse_search_request(raw, self.config.server.max_query_chars)
        if isinstance(parsed, JSONResponse):
            return parsed
        try:
            self.service.router.check_parts(parsed.query)
        except TooManyParts as exc:
            return error_response(422, "too_many_parts", str(exc), exc.field)
        outcome = await self.service.search(
            parsed.query,
            explain=parsed.explain,
            dry_run=parsed.dry_run,
            session_id=parsed.session_id,
            authorized=may_act(scope, self.config),
            client=client_identity(peer(scope)),  # a conversation is the client's own
        )
        return FastJSONResponse(outcome.body, status_code=outcome.status_code)


class OneLineStartError:
    """The served app (`search serve`, `app_factory`): a source that cannot start, or a
    trace store that cannot open, ends the start-up with one line naming it
    ("ZimUnavailable: ZIM file not found: ...", "trace.path: cannot open ...") where
    Starlette hands the server the whole traceback. Any other failure keeps its traceback:
    that is a bug to report, not a config to fix."""

    def __init__(self, app: Starlette) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_short(message: Message) -> None:
            error = getattr(self.app.state, "start_error", None)
            if message["type"] == "lifespan.startup.failed" and error is not None:
                message = {**message, "message": f"start-up failed: {error}"}
            await send(message)

        await self.app(scope, receive, send_short)


def _middleware(config: Config) -> list[Middleware]:
    """Outermost: a cross-site or rebound request is refused before the token is looked at."""
    middleware = [
        Middleware(
            RequestGuard,
            bind_host=config.server.host,
            port=config.server.port,
            allowed_hosts=[*config.server.allowed_hosts, *config.mcp.allowed_hosts],
            allowed_origins=config.server.allowed_origins,
        )
    ]
    if token_required(config):
        token = config.server.api_token.get_secret_value()  # type: ignore[union-attr]
        middleware.append(Middleware(BearerTokenMiddleware, token=token))
    return middleware


def _mcp(config: Config, service: Service) -> tuple[list[Route], Any]:
    """The `/mcp` route and its lifespan, when MCP is enabled."""
    if not config.mcp.enabled:
        return [], None
    mcp_server = build_mcp_server(service, control_offered=token_required(config))
    mcp_app, mcp_lifespan = http_endpoint(mcp_server, config.server.max_body_bytes)
    # Stateless: no server-initiated stream, so GET is 405 (the spec's alternative to an
    # SSE stream; an open GET stream here would never send anything nor end).
    guarded = StrictJSONBody(mcp_app, config.server.max_body_bytes)
    return [Route("/mcp", guarded, methods=["POST", "DELETE"])], mcp_lifespan


def _healthz(health: HealthCache) -> Any:
    async def healthz(request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "version": __version__,
                "pid": os.getpid(),  # which worker answered, under `serve --workers N`
                # type, enabled, reachable, version (checked at most every few seconds)
                "sources": await health.snapshot(),
            }
        )

    return healthz


async def _openapi(request: Request) -> Response:
    return JSONResponse(openapi_document(__version__))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, kind, f"{request.url.path}: {exc.detail}")


def create_app(
    config: Config, service: Service | None = None, *, settle: bool = False
) -> Starlette:
    """The app over `service` (built from `config` when not given).

    `settle`: freeze the start-up heap once the service has started (`settle_heap`). It
    changes the garbage collector for the whole process, so only the server process
    that owns it asks for it (`search serve`), never an embedder of the app.
    """
    owned_observers: list[Any] = []
    if service is None:
        owned_observers = [MetricsObserver(), *telemetry_observers(config)]
        service = Service(config, observers=owned_observers)
    # /metrics counts through a MetricsObserver of the service; one is added if it has none.
    metrics = next((o for o in service.observers if isinstance(o, MetricsObserver)), None)
    if metrics is None:
        metrics = MetricsObserver()
        service.observers.append(metrics)
    mcp_routes, mcp_lifespan = _mcp(config, service)
    health = HealthCache(service.sources, config.sources)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await service.start()
        except SourceError as exc:  # a source the config names cannot start: say which
            app.state.start_error = f"{type(exc).__name__}: {exc}"
            raise
        except ConfigError as exc:  # the trace store cannot open ("trace.path: ..."): say so
            app.state.start_error = str(exc)
            raise
        warning = open_to_network_warning(config)
        if warning is not None:
            log.warning("%s", warning)
        service.watch_household()  # `search fit` rewrites the artefact: route with it
        if settle:
            settle_heap()
        try:
            async with AsyncExitStack() as stack:
                if mcp_lifespan is not None:
                    await stack.enter_async_context(mcp_lifespan())
                yield
        finally:
            await health.aclose()
            await service.aclose()
            for observer in owned_observers:
                shutdown = getattr(observer, "shutdown", None)
                if shutdown is not None:
                    await run_in_thread(shutdown)  # flush what the exporter still holds

    app = Starlette(
        middleware=_middleware(config),
        routes=[
            Route("/search", SearchEndpoint(config, service), methods=["POST"]),
            Route("/healthz", _healthz(health), methods=["GET"]),
            Route("/openapi.json", _openapi, methods=["GET"]),
            *trace_routes(),
            *label_routes(),
            metrics_route(metrics),
            *ui_routes(),
            *mcp_routes,
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error},
    )
    app.state.service = service
    app.state.config = config
    app.state.refused = metrics.refused  # search/api/refusals.py
    return app
