"""Property-based fuzzing of every route in /openapi.json, with schemathesis, over uvicorn.

The app is the real one: the libzim source over the demo ZIM, the SQLite trace store
(so `/traces` and `/traces/{id}` read real rows), metrics, MCP. The schema is loaded from
the running server's `/openapi.json`; for each operation, schemathesis generates valid
(positive) and invalid (negative) requests from it and checks every response: never a
5xx, a status code the schema lists, the content type and body the schema gives for that
status, and invalid input rejected with a 4xx.

(The schemathesis pytest plugin's lazy loader does not run on pytest 9, so each
operation's strategy is driven by a plain hypothesis `@given` here.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from search import __version__
from search.api.openapi import openapi_document
from search.config import parse_config
from tests.support.app import build_app, uvicorn_server

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
OPERATIONS = [
    (method.upper(), path)
    for path, methods in openapi_document(__version__)["paths"].items()
    for method in methods
]
# Operations with inputs a request can get wrong. (A path parameter typed `string` has no
# invalid value: everything in a path is a string.)
NEGATABLE = {
    ("POST", "/search"),
    ("GET", "/traces"),
    ("POST", "/mcp"),
    ("POST", "/traces/{trace_id}/labels"),
}
CASES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode.value}")
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or (method, path) in NEGATABLE
]


@pytest.fixture(scope="module")
def base_url(demo_zim: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = parse_config(
        {
            "server": {"max_query_chars": 200, "max_body_bytes": 4096},
            "routing": {
                "default_source": "kiwix",
                "semantic": {"enabled": False},
                "request_deadline_s": 10,
            },
            "trace": {"enabled": True, "path": str(tmp_path_factory.mktemp("st") / "traces.db")},
            "sources": {"kiwix": {"type": "zim", "paths": [str(demo_zim)]}},
        }
    )
    with uvicorn_server(build_app(config)) as base:
        yield base


@pytest.fixture(scope="module")
def api_schema(base_url: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json")


def test_the_served_schema_lists_every_operation(api_schema: schemathesis.BaseSchema) -> None:
    served = sorted(
        (result.ok().method.upper(), result.ok().path) for result in api_schema.get_all_operations()
    )
    # schemathesis leaves out the schema's own URL; it is fuzzed below all the same.
    assert served == sorted(op for op in OPERATIONS if op != ("GET", "/openapi.json"))
    assert {("POST", "/search"), ("GET", "/traces"), ("GET", "/traces/{trace_id}")} <= set(served)


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_every_operation_conforms_to_its_schema(
    api_schema: schemathesis.BaseSchema,
    base_url: str,
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    operation = api_schema[path][method]
    checks = CHECKS + ([negative_data_rejection] if mode is GenerationMode.NEGATIVE else [])

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture,
        ],
    )
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=base_url, checks=checks)

    run()
