"""`GET /traces` and `GET /traces/{id}`: the trace store over HTTP.

Both read through the service's own store (`request.app.state.service.traces`), in a
worker thread. Traces are written a few milliseconds after their response, so a read
first flushes what is pending: a `trace_id` just returned by `/search` is found at once.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from routing.chain.events import run_in_thread
from routing.stages.build import route_descriptions
from search.api.schemas import component_schemas, error_response
from search.api.schemas import json_ref as _json
from search.trace_ids import NOT_A_TRACE_ID, TRACE_ID_PATTERN, is_trace_id
from search.traces.narrative import narrative
from search.traces.store import (
    MAX_TEXT_FILTER,
    OUTCOMES,
    FilterError,
    TraceReader,
    parse_filters,
)


def _reader(request: Request) -> TraceReader | None:
    store = getattr(request.app.state.service, "traces", None)
    needed = ("list_traces", "get_trace", "flush")
    return store if all(hasattr(store, name) for name in needed) else None  # type: ignore[return-value]


_DISABLED = "no persistent trace store: it is switched off (trace.enabled: false)"


async def list_traces(request: Request) -> Response:
    reader = _reader(request)
    if reader is None:
        return error_response(404, "not_found", _DISABLED)
    params: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name in params:
            return error_response(422, "invalid_request", f"{name}: given more than once", name)
        params[name] = value
    try:
        filters = parse_filters(params)
    except FilterError as exc:
        return error_response(422, "invalid_request", str(exc), exc.field)
    await reader.flush()
    page = await run_in_thread(reader.list_traces, filters)
    return JSONResponse(page)


async def show_trace(request: Request) -> Response:
    reader = _reader(request)
    trace_id = request.path_params["trace_id"]
    if reader is None:
        return error_response(404, "not_found", _DISABLED)
    if not is_trace_id(trace_id):
        return error_response(422, "invalid_request", NOT_A_TRACE_ID, "trace_id")
    trace = await run_in_thread(reader.get_trace, trace_id)
    if trace is None:
        await reader.flush()  # it may still be on its way to the file
        trace = await run_in_thread(reader.get_trace, trace_id)
    if trace is None:
        return error_response(404, "not_found", f"trace {trace_id}: no such trace")
    config = getattr(request.app.state.service, "config", None)
    if config is not None:  # what the /ui label control offers
        trace["label_routes"] = [*route_descriptions(config), "none"]
    trace["narrative"] = narrative(
        trace["chain"],
        with_text=not trace["redacted"],
        dropped_events=trace["dropped_events"],
        labels=trace.get("labels", []),
    )
    return JSONResponse(trace)


def trace_routes() -> list[Route]:
    return [
        Route("/traces", list_traces, methods=["GET"]),
        Route("/traces/{trace_id}", show_trace, methods=["GET"]),
    ]


# --- OpenAPI -------------------------------------------------------------------------


class TraceSummary(BaseModel):
    model_config = ConfigDict(extra="allow")
    trace_id: str
    started_at: float = Field(description="Unix seconds.")
    time: str = Field(description="ISO 8601, UTC.")
    query: str = Field(
        description="The request; its keyed pseudonym 'hmac-sha256:...' when stored redacted."
    )
    status_code: int
    duration_ms: float
    failed: bool
    fallback: bool
    cached: bool
    dry_run: bool
    redacted: bool
    captured: bool = Field(description="Source answers were captured for replay.")
    replay_of: str | None
    part_count: int
    sources: list[str]
    parts: list[dict[str, str | None]] = Field(
        default_factory=list,
        description="Each part's `route` and `status` (ok, empty, error, unserved, "
        "withheld, planned), in part order.",
    )


class TracePage(BaseModel):
    traces: list[TraceSummary]
    total: int = Field(description="Traces matching the filters, over all pages.")
    limit: int
    offset: int
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


class TraceDetail(TraceSummary):
    dropped_events: int
    error: dict[str, Any] | None
    chain: list[dict[str, Any]] = Field(description="The recorded events, in seq order.")
    results: list[dict[str, Any]] = Field(description="Part results, without source content.")
    captures: list[dict[str, Any]] | None = Field(
        description="Source answers, when `trace.capture_results` was on."
    )
    narrative: list[str] = Field(description="A diagnosis per part, read off the events.")
    labels: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The user's labels of its parts (POST /traces/{id}/labels), oldest first.",
    )
    label_routes: list[str] = Field(
        default_factory=list, description="The routes a label may name (and none)."
    )


def trace_components() -> dict[str, Any]:
    return component_schemas(TracePage, TraceDetail)


def _param(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def trace_paths() -> dict[str, Any]:
    when = {"type": "string"}
    flag = {"type": "boolean"}
    text = {"type": "string"}
    return {
        "/traces": {
            "get": {
                "summary": "Stored traces, newest first, filtered and paged",
                "operationId": "listTraces",
                "parameters": [
                    _param("step", "Has an event with this step.", text),
                    _param("source", "Involves this source.", text),
                    _param("outcome", "A source call ended so.", {"enum": list(OUTCOMES)}),
                    _param("failed", "Only failed requests or parts.", flag),
                    _param("fallback", "Only requests where a fallback fired.", flag),
                    _param("since", "Unix seconds, ISO 8601, or an age (2h, 7d).", when),
                    _param("until", "Same forms as since.", when),
                    _param(
                        "q",
                        "The query text contains this.",
                        {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_FILTER},
                    ),
                    _param(
                        "session",
                        "The turns of this session_id.",
                        {"type": "string", "minLength": 1, "maxLength": 200},
                    ),
                    _param("replays", "List replays too (left out by default).", flag),
                    _param(
                        "limit",
                        "Page size.",
                        {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50},
                    ),
                    _param("offset", "Skip this many.", {"type": "integer", "minimum": 0}),
                    _param("cursor", "next_cursor of the previous page.", text),
                ],
                "responses": {
                    "200": _json("TracePage", "One page of trace summaries."),
                    "404": _json("ErrorResponse", "The trace store is switched off."),
                    "422": _json("ErrorResponse", "A bad filter; the message names it."),
                },
            }
        },
        "/traces/{trace_id}": {
            "get": {
                "summary": "One stored trace: its chain, results and a diagnosis",
                "operationId": "getTrace",
                "parameters": [
                    {
                        "name": "trace_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "pattern": TRACE_ID_PATTERN},
                    }
                ],
                "responses": {
                    "200": _json("TraceDetail", "The stored trace."),
                    "404": _json("ErrorResponse", "No trace with this id."),
                    "422": _json("ErrorResponse", "Not a trace id."),
                },
            }
        },
    }
