"""What the HTTP layer refuses (a 4xx before, or instead of, routing), counted.

A refused request never reaches the router, so no chain records it and
`search_requests_total` cannot count it. Yet a run of refusals is what an operator looks
for: a page on another origin probing the router (`forbidden_origin`), a rebound DNS name
(`forbidden_host`), a client with a stale token (`unauthorized`), a script sending bad
bodies. Every refusal goes through `note_refusal`, which hands it to the app's counter
(`app.state.refused`, set by `create_app` to `MetricsObserver.refused`): the guards
outside the router call it where they answer, and every route's error body is an
`ErrorReply`, which calls it as it is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from search.json_codec import FastJSONResponse

Refused = Callable[[int, str], None]  # (status, error type)


def note_refusal(scope: Scope, status: int, kind: str) -> None:
    """Count a 4xx answer of kind `kind` with the app's counter, if it has one (Starlette
    puts the app in the scope before its middleware runs)."""
    if not 400 <= status < 500:
        return
    state = getattr(scope.get("app"), "state", None)
    refused: Refused | None = getattr(state, "refused", None)
    if refused is not None:
        refused(status, kind)


class ErrorReply(FastJSONResponse):
    """The JSON error body of every route (`search.api.schemas.error_response`); a 4xx one
    is counted as a refusal when it is sent."""

    def __init__(self, content: Any, status_code: int, kind: str) -> None:
        super().__init__(content, status_code=status_code)
        self.kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        note_refusal(scope, self.status_code, self.kind)
        await super().__call__(scope, receive, send)
