"""The one way a test says it needs a real service (Home Assistant, kiwix-serve, Redis,
Chromium) that this machine may lack; and `missing_data` for the evaluation sets.

On a developer's machine a missing service skips the tests that need it. Under `CI=true`
it fails them instead: a green CI run must mean those tests really ran, not that the
runner quietly lacked the service.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

_TRUE = frozenset({"1", "true", "yes", "on"})


def ci_strict() -> bool:
    """Whether this run is a CI run (`CI=true`, as CI systems set it)."""
    return os.environ.get("CI", "").strip().lower() in _TRUE


def require_service(name: str, available: bool, why: str) -> None:
    """Go on when `available`; otherwise skip, or fail under `CI=true`, naming `name`."""
    if not available:
        missing_service(name, why)


def missing_service(name: str, why: str) -> NoReturn:
    """`name` is not there: skip the test, or fail it under `CI=true`."""
    message = f"{name} unavailable: {why}"
    if ci_strict():
        pytest.fail(f"{message} (CI=true: a missing service fails the run)", pytrace=False)
    pytest.skip(message)


def missing_data(name: str, why: str) -> NoReturn:
    """Labelled evaluation data is not here: skip, even under `CI=true`.

    Not a service: the evaluation sets live outside the repository on purpose (rules must
    never be written from them), so a fresh clone has none unless `ROUTING_EVAL_DIR` points
    at them. Their absence is reported as a skip naming the directory, not hidden.
    """
    pytest.skip(f"{name} unavailable: {why}")
