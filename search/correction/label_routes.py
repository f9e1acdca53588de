"""`POST /traces/{id}/labels`: store a user's correction of one part's routing decision.

Body `{"part": "0", "route": name}` (`"none"`: no source serves this). 201 with the label
as stored; 404 for an unknown trace (or no trace store); 422 for an unknown part or route,
or a body of the wrong shape. The request guard in front has already required
`Content-Type: application/json` and this server's own Host/Origin, so a foreign page
cannot label a trace. Storing a label changes no routing by itself: `search fit` reads
the labels (search/correction/labels.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from routing.chain.events import run_in_thread
from routing.stages.build import route_descriptions
from search.api.authority import may_act
from search.api.body import BodyTooLarge, DuplicateKey, loads_json, read_body
from search.api.schemas import component_schemas, error_response, first_error
from search.api.schemas import json_ref as _json
from search.correction.labels import LabelError
from search.trace_ids import NOT_A_TRACE_ID, TRACE_ID_PATTERN, is_trace_id

MAX_LABEL_BODY = 4096


class LabelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    part: StrictStr = Field(description='The part path, as in the events: "0", "1", "1.0".')
    route: StrictStr = Field(
        description='The route the part should have had; "none" for "no source serves this".'
    )


class StoredLabel(BaseModel):
    model_config = ConfigDict(extra="allow")

    label_id: int
    trace_id: str
    part: str
    route: str
    query: str = Field(description="The part's query as stored (a pseudonym when redacted).")
    decision: str | None = Field(description="The route the part had.")
    time: str


def _parse(raw: bytes) -> LabelRequest | JSONResponse:
    try:
        data: Any = loads_json(raw)
    except DuplicateKey as exc:
        return exc.response()
    except (ValueError, RecursionError):
        return error_response(400, "invalid_json", "body: not valid JSON", "body")
    if not isinstance(data, dict):
        return error_response(422, "invalid_request", "body: must be a JSON object", "body")
    try:
        return LabelRequest.model_validate(data)
    except ValidationError as exc:
        detail = first_error(exc)
        return error_response(422, detail.type, detail.message, detail.field)


async def add_label(request: Request) -> Response:
    service = request.app.state.service
    if not may_act(request.scope, service.config):
        return error_response(
            403,
            "not_authorized",
            "a label changes future routing: it needs server.api_token, or a request from "
            "this machine not relayed by a proxy",
        )
    store: Any = getattr(service, "traces", None)
    trace_id = request.path_params["trace_id"]
    if not all(hasattr(store, name) for name in ("add_label", "get_trace", "flush")):
        return error_response(
            404, "not_found", "no persistent trace store: it is switched off (trace.enabled: false)"
        )
    try:
        raw = await read_body(request, MAX_LABEL_BODY)
    except BodyTooLarge:
        return error_response(
            413, "body_too_large", f"body: larger than {MAX_LABEL_BODY} bytes", "body"
        )
    parsed = _parse(raw)
    if isinstance(parsed, JSONResponse):
        return parsed
    if not is_trace_id(trace_id):
        return error_response(422, "invalid_request", NOT_A_TRACE_ID, "trace_id")
    if await run_in_thread(store.get_trace, trace_id) is None:
        await store.flush()  # it may still be on its way to the file
    routes = list(route_descriptions(service.config))
    try:
        label = await run_in_thread(store.add_label, trace_id, parsed.part, parsed.route, routes)
    except KeyError:
        return error_response(404, "not_found", f"trace {trace_id}: no such trace")
    except LabelError as exc:
        return error_response(422, "invalid_label", str(exc), exc.field)
    return JSONResponse(label.to_dict(), status_code=201)


def label_routes() -> list[Route]:
    return [Route("/traces/{trace_id}/labels", add_label, methods=["POST"])]


# --- OpenAPI -------------------------------------------------------------------------


def label_components() -> dict[str, Any]:
    return component_schemas(LabelRequest, StoredLabel)


def label_paths() -> dict[str, Any]:
    return {
        "/traces/{trace_id}/labels": {
            "post": {
                "summary": "Label a part of a stored trace with the route it should have had",
                "operationId": "addLabel",
                "parameters": [
                    {
                        "name": "trace_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "pattern": TRACE_ID_PATTERN},
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/LabelRequest"}
                        }
                    },
                },
                "responses": {
                    "201": _json("StoredLabel", "Stored beside the trace."),
                    "400": _json("ErrorResponse", "Not JSON."),
                    "403": _json(
                        "ErrorResponse",
                        "A Host or Origin not this server's own, or (with no API token) a client not on this machine.",
                    ),
                    "404": _json("ErrorResponse", "No such trace, or no trace store."),
                    "413": _json("ErrorResponse", "Body too large."),
                    "415": _json("ErrorResponse", "Content-Type is not application/json."),
                    "422": _json(
                        "ErrorResponse",
                        "Not a trace id, or an unknown part or route; the message says which, and lists the known ones.",
                    ),
                },
            }
        }
    }
