"""`python -m llama_cpp.server`, unchanged, with its own request handling timed.

Run by the llama.cpp venv's Python (it imports nothing from this project) with the same
arguments as the server. llama-cpp-python's server reports no timings in its answers, so
this wraps its ASGI app: for each `POST /v1/chat/completions`, the time from the whole
request body received to the last byte of the response handed to uvicorn, which is the
server's parsing, queueing, inference and serialising. `GET /bench/timings` returns the
`[start, end]` of each (seconds on `time.perf_counter()`, which on Linux is the
system-wide monotonic clock, so the caller can compare them with its own) recorded since
the last call, in order, and forgets them. The benchmark subtracts the span they cover
from the LLM stage's own time to get what the router adds.
"""

from __future__ import annotations

import json
import runpy
import sys
import time
from typing import Any

import uvicorn

_times: list[tuple[float, float]] = []


class Timed:
    """ASGI wrapper: times chat completions, serves `/bench/timings`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/bench/timings":
            body = json.dumps(_times).encode()
            _times.clear()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        started: list[float] = []

        async def timed_receive() -> dict[str, Any]:
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                started.append(time.perf_counter())
            return message

        async def timed_send(message: dict[str, Any]) -> None:
            await send(message)
            if (
                message["type"] == "http.response.body"
                and not message.get("more_body", False)
                and started
            ):
                _times.append((started[0], time.perf_counter()))

        await self.app(scope, timed_receive, timed_send)


def main() -> None:
    real_run = uvicorn.run

    def run(app: Any, **kwargs: Any) -> None:
        real_run(Timed(app), **kwargs)

    uvicorn.run = run  # type: ignore[assignment]
    sys.argv = ["llama_cpp.server", *sys.argv[1:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
