"""The OpenAPI 3.1 document of every route, built from the pydantic models."""

from __future__ import annotations

from typing import Any

from search.schemas import openapi_components


def _json(ref: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
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
                        "413": bad,
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
        },
        "components": {"schemas": openapi_components()},
    }
