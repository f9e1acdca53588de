"""What the LLM stage costs apart from the model: its time minus the chat server's own.

By default the model is the test suite's chat-completions server
(`tests/support/chat_server.py`, the OpenAI wire format) answering `{"source": "web"}` at
once (one ask per decision: `bias_check` off, its probe is once per server anyway), in its own process (so it never shares this process's GIL). The server times its
own handler (from the whole body received to the response built) and hands those times
back afterwards. Measured, one call at a time, on distinct queries, rounds interleaved:

- the stage: `LLMStage.decide` as the service built it (prompt, pooled httpx POST,
  parse, validation, event, decision-cache entry) minus the server's handler time: the
  stage's overhead apart from the model;
- a bare httpx POST of the body the stage sends, on a pooled client, minus the server's
  time: the HTTP floor (client, loopback, the server's own HTTP parsing), part of the above;
- the same bytes written on a plain asyncio socket: the floor of loopback plus the
  server's HTTP handling, without an HTTP client library;
- a whole `Service.search(dry_run=True)` request decided by the LLM, minus the server's time.

A real local model server (llama.cpp, Ollama) adds its inference time on top; this is
what the router adds to it.

`--real` measures the same against a real llama.cpp server (llama-cpp-python's, over
Gemma 3 270M, started from the suite's cached venv by `tests/support/llama_server.py`):
the server is wrapped (`tests/support/llama_timed.py`) so it times its own handling of
each request (body received to last byte sent: queueing, inference, serialising), and the
stage's time minus that is what the router adds to a real model. A bare httpx POST of the
same body (its request for logprobs too, which costs the server most of its time),
interleaved, gives the HTTP floor beside it. `BENCH_LLM_REAL_CALLS` (20) calls
of each, on distinct queries, after a warm-up that also negotiates the response format.
`--real --json-out PATH` also writes its figures, dated (docs/llm.md renders them).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit, env_int, median, order, percentile, scripted_config  # noqa: E402

ROUNDS = env_int("BENCH_LLM_ROUNDS", 20)
REAL_CALLS = env_int("BENCH_LLM_REAL_CALLS", 20)
PER_ROUND = env_int("BENCH_LLM_PER_ROUND", 20)


# --- the chat server process ------------------------------------------------------------


def serve() -> None:
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from tests.support.chat_server import ChatServer

    class TimedChatServer(ChatServer):
        """ChatServer that keeps its handler's own time per request."""

        def __init__(self) -> None:
            super().__init__(reply='{"source": "web"}')
            self.handler_us: list[float] = []

        def routes(self) -> list[Route]:
            return [
                Route("/v1/chat/completions", self._timed, methods=["POST"]),
                Route("/bench/timings", self._timings, methods=["GET"]),
            ]

        async def _timed(self, request: Request) -> Response:
            await request.body()  # cached by Starlette: the clock starts once it has all
            start = time.perf_counter_ns()
            response = await self._completions(request)
            self.handler_us.append((time.perf_counter_ns() - start) / 1000)
            self.bodies.clear()  # keep the server's memory flat
            self.requests.clear()
            return response

        async def _timings(self, request: Request) -> Response:
            times, self.handler_us = self.handler_us, []
            return JSONResponse(times)

    server = TimedChatServer()
    server.start()
    print(f"URL {server.url}", flush=True)
    try:
        sys.stdin.read()  # until the driver closes our stdin
    finally:
        server.stop()


# --- the driver -------------------------------------------------------------------------


async def server_times(client: Any, url: str) -> list[float]:
    return list((await client.get(f"{url}/bench/timings")).json())


async def measure(url: str) -> None:
    import httpx

    from routing.chain.events import route_log
    from routing.stages.llm import build_messages
    from routing.types import ResolveContext
    from search.service import Service

    config = scripted_config(
        {
            "kiwix": {"description": "an offline encyclopedia"},
            "web": {"description": "web search: news, prices, places"},
            "forecast": {"description": "the weather forecast"},
            "ha": {"description": "the smart home: lights, switches, sensors"},
        },
        {},
        llm={"base_url": f"{url}/v1", "model": "bench", "timeout_s": 5, "bias_check": False},
    )
    service = Service(config)
    await service.start(sources=False)
    stage = service.resolver.stage("intent_llm")
    assert stage is not None
    # The floors send the very body the stage sends for a query.
    body = json.dumps(
        {
            "model": "bench",
            "temperature": 0,
            "messages": build_messages(stage.routes, "unseen question 0"),
        }
    )
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=8)
    async with (
        httpx.AsyncClient(limits=limits, timeout=5) as raw,
        httpx.AsyncClient(timeout=5) as control,
    ):
        counter = iter(range(10**9))

        async def run_stage() -> float:
            with route_log():
                start = time.perf_counter_ns()
                decision = await stage.decide(f"unseen question {next(counter)}", ResolveContext())
                elapsed = (time.perf_counter_ns() - start) / 1000
            assert decision is not None and decision.route == "web", decision
            return elapsed

        async def run_raw() -> float:
            start = time.perf_counter_ns()
            response = await raw.post(
                f"{url}/v1/chat/completions",
                content=body,
                headers={"content-type": "application/json"},
            )
            elapsed = (time.perf_counter_ns() - start) / 1000
            assert response.status_code == 200, response.text
            return elapsed

        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        wire = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            f"{body}"
        ).encode()

        async def run_socket() -> float:
            """The floor: one write, read the answer; no HTTP library on this side."""
            start = time.perf_counter_ns()
            writer.write(wire)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(h.split(b":")[1])
                for h in head.split(b"\r\n")
                if h.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            elapsed = (time.perf_counter_ns() - start) / 1000
            assert head.startswith(b"HTTP/1.1 200"), head
            return elapsed

        async def run_request() -> float:
            start = time.perf_counter_ns()
            outcome = await service.search(f"another unseen question {next(counter)}", dry_run=True)
            elapsed = (time.perf_counter_ns() - start) / 1000
            assert outcome.results[0].stage == "intent_llm", outcome.chain
            return elapsed

        runners = {"stage": run_stage, "raw": run_raw, "socket": run_socket, "request": run_request}
        for runner in runners.values():  # warm up the connections and code paths
            for _ in range(10):
                await runner()
        await server_times(control, url)
        totals: dict[str, list[float]] = {name: [] for name in runners}
        overheads: dict[str, list[float]] = {name: [] for name in runners}
        server: dict[str, list[float]] = {name: [] for name in runners}
        round_medians: dict[str, float] = {}
        own: list[float] = []  # per round: stage minus bare POST, both minus the server
        for r in range(ROUNDS):
            for name in (*order(r, ("stage", "raw")), "socket", "request"):
                times = [await runners[name]() for _ in range(PER_ROUND)]
                handler = await server_times(control, url)
                assert len(handler) == len(times), (len(handler), len(times))
                totals[name].extend(times)
                server[name].extend(handler)
                overheads[name].extend(t - h for t, h in zip(times, handler, strict=True))
                round_medians[name] = median([t - h for t, h in zip(times, handler, strict=False)])
            own.append(round_medians["stage"] - round_medians["raw"])
        writer.close()
    await service.aclose()
    summary = {
        name: {
            "total_p50_us": median(totals[name]),
            "server_p50_us": median(server[name]),
            "overhead_p50_us": median(overheads[name]),
            "overhead_p99_us": percentile(overheads[name], 0.99),
        }
        for name in runners
    }
    labels = {
        "stage": "LLM stage (decide)",
        "raw": "bare httpx POST",
        "socket": "raw socket POST (floor)",
        "request": "dry-run request via LLM",
    }
    n = ROUNDS * PER_ROUND
    print(f"{'':26} {'total p50':>10} {'server p50':>11} {'minus server p50':>17} {'p99':>8}")
    for name, row in summary.items():
        print(
            f"{labels[name]:26} {row['total_p50_us'] / 1000:8.2f} ms "
            f"{row['server_p50_us'] / 1000:8.2f} ms {row['overhead_p50_us'] / 1000:14.2f} ms "
            f"{row['overhead_p99_us'] / 1000:6.2f} ms"
        )
    stage_own = median(own)
    print(
        "LLM-stage overhead apart from the model: "
        f"{summary['stage']['overhead_p50_us'] / 1000:.2f} ms p50 ({n} calls); "
        "of which the HTTP floor "
        f"{summary['raw']['overhead_p50_us'] / 1000:.2f} ms (an httpx POST; a raw socket: "
        f"{summary['socket']['overhead_p50_us'] / 1000:.2f} ms), the stage's own code "
        f"(median of per-round differences) "
        f"~{stage_own / 1000:.2f} ms"
    )
    emit("llm_overhead", calls=n, stage_own_us=stage_own, **summary)


# --- against a real llama.cpp server -----------------------------------------------------

REAL_QUERIES = (
    "who built the first steam engine",
    "how deep is the pacific ocean",
    "will it hail this afternoon",
    "switch off the porch light",
    "price of a used bicycle",
    "what does photosynthesis mean",
    "is the back door locked",
    "news about the election",
    "how cold will it be at dawn",
    "when did the berlin wall fall",
)


async def measure_real(url: str, model: str) -> dict[str, Any]:
    import httpx

    from routing.chain.events import route_log
    from routing.stages.llm import NONE, build_messages
    from routing.stages.llm_format import answer_schema
    from routing.types import ResolveContext
    from search.service import Service

    def service_for() -> Service:
        return Service(
            scripted_config(
                {
                    "kiwix": {"description": "an offline encyclopedia"},
                    "web": {"description": "web search: news, prices, places"},
                    "forecast": {"description": "the weather forecast"},
                    "ha": {"description": "the smart home: lights, switches, sensors"},
                },
                {},
                llm={
                    "base_url": f"{url}/v1",
                    "model": model,
                    "timeout_s": 120,
                    "bias_check": False,
                },
                decision_cache_max_entries=0,
            )
        )

    services = {"stage": service_for()}
    stages = {}
    for name, service in services.items():
        await service.start(sources=False)
        stages[name] = service.resolver.stage("intent_llm")
        assert stages[name] is not None
    one = stages["stage"]
    queries = (f"{q} ({n})" for n in range(10**6) for q in REAL_QUERIES)

    async with httpx.AsyncClient(timeout=120) as control, httpx.AsyncClient(timeout=120) as raw:

        async def server_span() -> tuple[float, int]:
            """The span (ms) the server spent on the requests since the last call."""
            spans = (await control.get(f"{url}/bench/timings")).json()
            return (max(e for _, e in spans) - min(s for s, _ in spans)) * 1000.0, len(spans)

        async def run_stage(name: str) -> tuple[float, float]:
            with route_log():
                start = time.perf_counter_ns()
                await stages[name].decide(next(queries), ResolveContext())
                elapsed = (time.perf_counter_ns() - start) / 1e6
            span, count = await server_span()
            assert count == 1, count
            return elapsed, span

        async def run_raw() -> tuple[float, float]:
            body = one.request_body(  # what the stage posts for a decision
                build_messages(one.routes, next(queries)),
                one.forms.first(one.base_url),
                answer_schema([*one.routes, NONE]),
            )
            start = time.perf_counter_ns()
            response = await raw.post(f"{url}/v1/chat/completions", json=body)
            elapsed = (time.perf_counter_ns() - start) / 1e6
            assert response.status_code == 200, response.text[:300]
            span, _ = await server_span()
            return elapsed, span

        runners = {"stage": lambda: run_stage("stage"), "raw": run_raw}
        for stage in stages.values():  # warm up; the first call negotiates the form
            for _ in range(2):
                with route_log():
                    await stage.decide(next(queries), ResolveContext())
        await control.get(f"{url}/bench/timings")
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
        for r in range(REAL_CALLS):
            for name in order(r, ("stage", "raw")):
                rows[name].append(await runners[name]())
    for service in services.values():
        await service.aclose()
    summary = {}
    for name, pairs in rows.items():
        over = [t - s for t, s in pairs]
        summary[name] = {
            "total_p50_ms": median([t for t, _ in pairs]),
            "server_p50_ms": median([s for _, s in pairs]),
            "overhead_p50_ms": median(over),
            "overhead_p99_ms": percentile(over, 0.99),
        }
    labels = {"stage": "LLM stage (decide)", "raw": "bare httpx POST"}
    form = one.forms.known(one.base_url)
    print(f"real llama.cpp server ({model}, form {form}), {REAL_CALLS} calls each, interleaved")
    print(f"{'':24} {'total p50':>11} {'server p50':>11} {'minus server p50':>17} {'p99':>9}")
    for name, row in summary.items():
        print(
            f"{labels[name]:24} {row['total_p50_ms']:8.1f} ms {row['server_p50_ms']:8.1f} ms "
            f"{row['overhead_p50_ms']:14.2f} ms {row['overhead_p99_ms']:6.2f} ms"
        )
    stage_row = summary["stage"]
    share = stage_row["overhead_p50_ms"] / stage_row["total_p50_ms"]
    print(
        f"the stage adds {stage_row['overhead_p50_ms']:.2f} ms p50 to the server's "
        f"{stage_row['server_p50_ms']:.0f} ms ({share:.2%} of the decision's time); "
        f"a bare POST adds {summary['raw']['overhead_p50_ms']:.2f} ms"
    )
    emit("llm_overhead_real", calls=REAL_CALLS, model=model, form=form, **summary)
    return {
        "calls": REAL_CALLS,
        "model": model,
        "stage_p50_ms": round(stage_row["overhead_p50_ms"], 3),
        "stage_p99_ms": round(stage_row["overhead_p99_ms"], 3),
        "server_ms": round(stage_row["server_p50_ms"]),
        "bare_post_ms": round(summary["raw"]["overhead_p50_ms"], 3),
    }


def main_real(json_out: str | None = None) -> None:
    """Start a real llama.cpp server (timed), measure against it, stop it by PID; with
    `json_out`, write the figures there, dated (bench/results/llm_overhead_real.json)."""
    import tempfile

    from bench import results
    from tests.support import llama_server as harness

    with tempfile.TemporaryDirectory() as tmp:
        server = harness.start(Path(tmp) / "server.log", timed=True)
        try:
            figures = asyncio.run(measure_real(server.url, server.model))
        finally:
            harness.stop(server.pid)
    if json_out:
        command = "python bench/llm_overhead.py --real"
        results.write(json_out, "llm_overhead --real", command, figures)


def main() -> None:
    """Start the chat server process, measure against it, stop it (closing its stdin)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("URL "), line
        asyncio.run(measure(line.split()[1]))
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=30)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve()
    elif len(sys.argv) > 1 and sys.argv[1] == "--real":
        if sys.argv[2:3] == ["--json-out"] and len(sys.argv) == 4:
            main_real(sys.argv[3])
        elif len(sys.argv) == 2:
            main_real()
        else:
            print("usage: bench/llm_overhead.py --real [--json-out PATH]", file=sys.stderr)
            raise SystemExit(2)
    else:
        main()
