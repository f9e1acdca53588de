"""The HTTP request and response shapes, as pydantic models.

The request model validates input (strict types, no unknown fields); the response
models exist so `/openapi.json` describes exactly what the service sends.
"""

from __future__ import annotations

import unicodedata
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.responses import JSONResponse

from search.api.refusals import ErrorReply
from search.query_text import has_visible_text


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(description="The question; may hold several parts.")
    explain: bool = Field(default=False, description="Return the explanation chain.")
    dry_run: bool = Field(default=False, description="Plan only; call no source.")
    session_id: str | None = Field(
        default=None, min_length=1, max_length=128, description="Ties follow-up questions."
    )

    @field_validator("session_id")
    @classmethod
    def _listable(cls, value: str | None) -> str | None:
        """A session is looked up later (`/traces?session=`, `search trace list --session`),
        which refuses control characters: one that could not be found is refused here."""
        if value is None:
            return None
        bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
        if bad is not None:
            raise ValueError(f"contains a control character (U+{ord(bad):04X})")
        if not has_visible_text(value):
            raise ValueError("shows nothing: only spaces or invisible characters")
        return value


class Item(BaseModel):
    model_config = ConfigDict(extra="allow")
    title: str
    text: str
    url: str | None = None


class ErrorDetail(BaseModel):
    type: str
    message: str
    field: str | None = None


class PlanDetail(BaseModel):
    sources: list[str]
    unavailable: dict[str, str]


class PartResult(BaseModel):
    query: str
    source: str | None
    status: Literal["ok", "empty", "error", "planned", "unserved", "withheld"]
    items: list[Item]
    route: str | None = None
    stage: str | None = Field(default=None, description="the intent step that decided the route")
    confidence: float | None = Field(
        default=None, description="the deciding stage's calibrated confidence (0-1)"
    )
    error: ErrorDetail | None = None
    withheld: dict[str, Any] | None = Field(
        default=None,
        description="with status withheld: why the command was not carried out (reason, ...)",
    )
    condition: PartResult | None = None
    negated: bool | None = Field(
        default=None, description="on a condition: true when it reads 'unless'"
    )
    # a follow-up asked as the question it stands for (see the `rewritten` event)
    rewritten: str | None = None
    plan: PlanDetail | None = Field(
        default=None,
        description="with status planned: the sources the part would try, in order, and "
        "those that would be skipped now and why (disabled, circuit_open)",
    )
    may_be_out_of_date: bool | None = Field(
        default=None,
        description="true when a snapshot (the offline encyclopedia) answered a question "
        "meant for the live source, which gave no answer (see the snapshot_answered event)",
    )


class Event(BaseModel):
    """One recorded step; step-specific fields follow the contract's table."""

    model_config = ConfigDict(extra="allow")
    step: str
    seq: int
    t_ms: float
    part: str


class SearchResponse(BaseModel):
    query: str
    trace_id: str
    results: list[PartResult]
    cached: bool
    fallback_occurred: bool
    dropped_events: int = 0
    explanation: list[Event] | None


class FailedSearch(BaseModel):
    error: ErrorDetail
    trace_id: str
    explanation: list[Event] | None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["ok"]


def first_error(exc: ValidationError) -> ErrorDetail:
    """The first validation problem as 'field: message'."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "body"
    message = err["msg"]
    if err["type"] == "string_unicode" and not err["loc"]:
        # a key pydantic cannot read fails before it has a name to report
        message = "a key is not valid Unicode (a lone surrogate)"
    elif err["type"] == "extra_forbidden":
        message = "unknown field"
    elif err["type"] == "missing":
        message = "field required"
    return ErrorDetail(type="invalid_request", message=f"{field}: {message}", field=field)


def component_schemas(*models: type[BaseModel]) -> dict[str, Any]:
    """The JSON schemas of `models` (and the models they use), under
    `#/components/schemas/`: what each route module adds to /openapi.json."""
    schemas: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return schemas


def json_ref(ref: str, description: str) -> dict[str, Any]:
    """An OpenAPI response whose JSON body is the component `ref`."""
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }


def openapi_components() -> dict[str, Any]:
    """JSON schemas of every model of /search and /healthz."""
    return component_schemas(SearchRequest, SearchResponse, FailedSearch, ErrorResponse, Health)


def error_response(status: int, type_: str, message: str, field: str | None = None) -> JSONResponse:
    """The one error body of every route: `{"error": {"type", "message", "field"?}}`."""
    detail = ErrorDetail(type=type_, message=message, field=field)
    return ErrorReply({"error": detail.model_dump(exclude_none=True)}, status, type_)
