"""A small closed-loop HTTP load generator, used only when `wrk` is not installed.

Runs in its own process (so it never shares the server's GIL): `connections` tasks, each
POSTing the same JSON body over a kept-alive httpx connection until `duration_s` passes.
Prints one JSON line: requests, non-2xx count, errors, elapsed seconds, p50/p99 latency.
It is far slower than wrk per request (httpx is Python), so with it the server may not be
saturated; `bench/throughput.py` says which generator it used.

    python bench/loadgen.py URL BODY_JSON CONNECTIONS DURATION_S
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time

import httpx


async def run(url: str, body: bytes, connections: int, duration_s: float) -> dict[str, float]:
    latencies: list[float] = []
    bad = 0
    errors = 0
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(limits=limits, timeout=10.0) as client:
        deadline = time.perf_counter() + duration_s

        async def worker() -> None:
            nonlocal bad, errors
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                try:
                    response = await client.post(url, content=body, headers=headers)
                except httpx.HTTPError:
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - start) * 1e6)
                if response.status_code >= 300:
                    bad += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    latencies.sort()

    def at(q: float) -> float:
        return latencies[max(0, math.ceil(q * len(latencies)) - 1)] if latencies else 0.0

    return {
        "requests": len(latencies),
        "non_2xx": bad,
        "errors": errors,
        "elapsed_s": elapsed,
        "p50_us": at(0.5),
        "p99_us": at(0.99),
    }


def main() -> None:
    url, body, connections, duration = sys.argv[1:5]
    result = asyncio.run(run(url, body.encode(), int(connections), float(duration)))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
