"""What the Host/Origin/Content-Type guard costs per request, measured side by side.

The same minimal ASGI app (answers 200, reads nothing) is called directly and through
`RequestGuard`, with the headers a browser's same-origin JSON POST carries, in
alternating rounds on one event loop. Printed: microseconds per request for each, their
difference (the guard's own cost), and the ratio guarded / bare. For scale, a cache-hit
`/search` through uvicorn costs a few hundred microseconds (bench/throughput.py).

    python bench/request_guard.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from search.api.request_guard import RequestGuard  # noqa: E402

ROUNDS = 7
CALLS = 20_000
SCOPE: dict[str, Any] = {
    "type": "http",
    "method": "POST",
    "path": "/search",
    "scheme": "http",
    "server": ("127.0.0.1", 8080),
    "client": ("127.0.0.1", 50000),
    "headers": [
        (b"host", b"127.0.0.1:8080"),
        (b"connection", b"keep-alive"),
        (b"content-length", b"40"),
        (b"accept", b"application/json"),
        (b"content-type", b"application/json"),
        (b"origin", b"http://127.0.0.1:8080"),
        (b"user-agent", b"Mozilla/5.0 (X11; Linux x86_64) Chrome/150.0"),
        (b"referer", b"http://127.0.0.1:8080/ui"),
        (b"accept-encoding", b"gzip, deflate"),
        (b"accept-language", b"en-US,en;q=0.9"),
    ],
}


async def bare(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})


async def receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message: Any) -> None:
    return None


async def timed(app: Any) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        await app(SCOPE, receive, send)
    return (time.perf_counter() - started) / CALLS * 1e6


async def main() -> None:
    guarded = RequestGuard(bare, bind_host="127.0.0.1", port=8080)
    times: dict[str, list[float]] = {"bare": [], "guarded": []}
    for round_ in range(ROUNDS):
        order = ("bare", "guarded") if round_ % 2 == 0 else ("guarded", "bare")
        for name in order:
            times[name].append(await timed(bare if name == "bare" else guarded))
    bare_us, guarded_us = statistics.median(times["bare"]), statistics.median(times["guarded"])
    print(f"bare ASGI call:    {bare_us:.2f} us/request (median of {ROUNDS} rounds)")
    print(f"through the guard: {guarded_us:.2f} us/request")
    print(
        f"guard's own cost:  {guarded_us - bare_us:.2f} us/request; "
        f"ratio guarded/bare {guarded_us / bare_us:.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
