"""The OpenAPI 3.1 document of every route, built from the pydantic models."""

from __future__ import annotations

from typing import Any

from search.api.schemas import json_ref as _json
from search.api.schemas import openapi_components
from search.correction.label_routes import label_components, label_paths
from search.traces.routes import trace_components, trace_paths


def _surface_paths() -> dict[str, Any]:
    """/metrics, /ui and /mcp: read-only views of the recorded events, and the MCP tools."""
    return {
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics, counted from the recorded events",
                "operationId": "metrics",
                "responses": {
                    "200": {
                        "description": "Prometheus text format 0.0.4 (OpenMetrics on request).",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/ui": {
            "get": {
                "summary": "The trace viewer (HTML; assets under /ui/)",
                "operationId": "ui",
                "responses": {
                    "200": {
                        "description": "The page.",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/mcp": {
            "post": {
                "summary": "Model Context Protocol, streamable HTTP (stateless, JSON responses)",
                "description": "Tools `search(query, explain=false)`, `get_trace(trace_id)` and, "
                "where acting is allowed, `control(query, explain=false)`. Speak it with an MCP "
                "client; see docs/surfaces.md. Absent when mcp.enabled is false.",
                "operationId": "mcp",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"type": "object", "description": "A JSON-RPC 2.0 message."}
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The JSON-RPC response.",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "202": {"description": "A notification was accepted."},
                    "400": {
                        "description": "Not a JSON-RPC message (a JSON-RPC error object), "
                        "or not a JSON body (plain text).",
                        "content": {
                            "application/json": {"schema": {"type": "object"}},
                            "text/plain": {"schema": {"type": "string"}},
                        },
                    },
                    "403": _json("ErrorResponse", "A Host or Origin not this server's own."),
                    "415": _json("ErrorResponse", "Content-Type is not application/json."),
                    "406": {
                        "description": "`Accept` lacks application/json.",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                },
            }
        },
    }


def openapi_document(version: str) -> dict[str, Any]:
    bad = _json("ErrorResponse", "Bad input; the message names the field.")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Explainable search router",
            "version": version,
            "description": "Routes each part of a query to a source and explains why.",
        },
        "paths": {
            "/search": {
                "post": {
                    "summary": "Answer a query, optionally with its explanation chain",
                    "operationId": "search",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/SearchRequest"}
                            }
                        },
                    },
                    "responses": {
                        "200": _json("SearchResponse", "Every part answered or planned."),
                        "400": bad,
                        "403": _json(
                            "ErrorResponse",
                            "A Host or Origin not this server's own (the message names which).",
                        ),
                        "413": bad,
                        "415": _json("ErrorResponse", "Content-Type is not application/json."),
                        "422": bad,
                        "502": _json("FailedSearch", "Every part failed, or the request did."),
                        "504": _json("FailedSearch", "The request deadline passed."),
                    },
                }
            },
            "/healthz": {
                "get": {
                    "summary": "Liveness",
                    "operationId": "healthz",
                    "responses": {"200": _json("Health", "The service is up.")},
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "operationId": "openapi",
                    "responses": {"200": {"description": "The OpenAPI document."}},
                }
            },
            **trace_paths(),
            **label_paths(),
            **_surface_paths(),
        },
        "components": {
            "schemas": {**openapi_components(), **trace_components(), **label_components()}
        },
    }
