"""Cache-hit `/search` throughput through uvicorn on loopback, against a bare Starlette endpoint.

One server process runs the real app (`create_app`, with its metrics observer and the
SQLite trace store on, as shipped; scripted sources so no backend's cost counts) under
uvicorn with the settings `search serve` uses (`uvicorn.run(app, host, port,
access_log=False)`). The same app also mounts `POST /bare`: a plain Starlette endpoint
that reads and parses the same JSON body and answers a JSON body of the same shape and
size as the search answer, without routing, recording, caching or tracing. So both
endpoints share the server, the middleware stack, the HTTP parser and the load generator:
the ratio is what the router adds over the framework. The anchor comes first in the
routing table, before `/search` (see `serve`), so it never pays for matching the app's
other routes.

Load: `wrk` (Debian package `wrk`) in its own process, one thread, `BENCH_CONNECTIONS`
keep-alive connections, a Lua script for the POST body. wrk is required: without it the
bench installs it (`apt-get install -y wrk`, when run as root with apt) or stops with a
message saying how. `BENCH_LOADGEN=httpx` runs `bench/loadgen.py` (httpx, its own process)
instead, for a labelled fallback figure only: that generator is slower than the server,
so its ratio is no verdict (`passed` is null). Rounds of `BENCH_TP_SECONDS` alternate
search/bare and bare/search; reported are the medians of the rounds' requests/s, and the
median of the per-round paired ratios (the verdict). Targets: search >= 0.85 of bare with
the trace store on (as shipped), >= 0.9 with it off (`BENCH_TP_TRACE=0`).

Wall-clock ratios on this shared 2-core machine move by about ±0.05 between runs of the
same code, so beside them the bench counts the *server process's* CPU instructions per
request with valgrind's callgrind (a second server, the same code, under
`valgrind --tool=callgrind`): `BENCH_TP_COUNTED` (300) requests to each endpoint over one
keep-alive connection, after as many to warm up, the counters zeroed before and dumped
after each side (`callgrind_control`). That ratio includes uvicorn's HTTP parsing and the
socket calls, as the wall ratio does, and does not move with the machine's load; the
trace store's writer process runs outside valgrind and is not counted (its CPU is the
store bench's). It is shown beside the verdict, not as it: instructions are not time
(interpreted Python retires fewer of them per cycle than the C of the HTTP parser).
`BENCH_INSTRUCTIONS=0` skips it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, emit, env_int, free_port, median, order, scripted_config  # noqa: E402

ROUNDS = env_int("BENCH_TP_ROUNDS", 6)
SECONDS = env_int("BENCH_TP_SECONDS", 3)
CONNECTIONS = env_int("BENCH_CONNECTIONS", 8)
TRACE = os.environ.get("BENCH_TP_TRACE", "1") != "0"  # 0: the trace store off, to see its share
TARGET = 0.85 if TRACE else 0.9
COUNTED = env_int("BENCH_TP_COUNTED", 300)
QUERY = "what is the weather today"
BODY = json.dumps({"query": QUERY})

LUA = """
wrk.method = "POST"
wrk.body = %s
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %%d, "elapsed_s": %%f, "non_2xx": %%d, "errors": %%d, '
    .. '"p50_us": %%d, "p99_us": %%d}\\n',
    summary.requests, summary.duration / 1e6, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


# --- the server process ---------------------------------------------------------------


def bare_body(query: str) -> dict[str, Any]:
    """The shape and size of the search answer for `query` (scripted forecast, 2 items)."""
    import uuid

    items = [
        {
            "title": f"forecast #{i} for {query}",
            "text": f"text {i} about {query}",
            "url": f"http://forecast/{i}",
        }
        for i in range(2)
    ]
    return {
        "query": query,
        "trace_id": uuid.uuid4().hex,
        "results": [
            {
                "query": query,
                "source": "forecast",
                "status": "ok",
                "items": items,
                "route": "forecast",
                "stage": "intent_keyword",
                "confidence": 1.0,
            }
        ],
        "cached": True,
        "fallback_occurred": False,
        "dropped_events": 0,
        "explanation": None,
    }


def add_bare_anchor(app: Any) -> Any:
    """`app` with the anchor, `POST /bare`: the same body parsed, an answer of the same
    shape and size encoded, no routing, recording, caching or tracing.

    First in the routing table: Starlette tries the routes in order, and each pattern
    that fails costs a request some 6,600 instructions. Appended after the app's twelve
    routes, the anchor paid for eleven failures that `/search` (the app's first) never
    does, about 72,000 instructions, which flattered the ratio. Here `/search` pays for
    one (the anchor's pattern), under 1% of its request: if anything, against it."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def bare(request: Request) -> JSONResponse:
        data = json.loads(await request.body())
        return JSONResponse(bare_body(data["query"]))

    app.router.routes.insert(0, Route("/bare", bare, methods=["POST"]))
    return app


def serve(port: int, trace_path: str) -> None:
    import uvicorn

    from search.api.app import create_app

    trace = {"path": trace_path} if TRACE else {"enabled": False}
    config = scripted_config({"kiwix": {}, "forecast": {}}, {"forecast": ["weather"]}, trace=trace)
    app = add_bare_anchor(create_app(config, settle=True))  # as `search serve` does
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# --- the driver -------------------------------------------------------------------------


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not start")


def process_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process `pid` so far (Linux /proc; its threads too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def load(tool: str, url: str, seconds: int, script: str) -> dict[str, float]:
    if tool == "wrk":
        cmd = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", "-s", script, url]
        marker = "WRK_JSON "
    else:
        cmd = [
            sys.executable,
            str(ROOT / "bench" / "loadgen.py"),
            url,
            BODY,
            str(CONNECTIONS),
            str(seconds),
        ]
        marker = ""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=seconds + 60)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(marker + "{"))
    result = json.loads(line[len(marker) :])
    assert result["non_2xx"] == 0 and result["errors"] == 0, (url, result, out.stdout)
    result["rps"] = result["requests"] / result["elapsed_s"]
    return result


class KeepAliveClient:
    """POSTs the bench's body over one keep-alive connection, reading each answer whole:
    the cheapest client there is, for a server slowed fifty times by valgrind."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)

    def post(self, path: str) -> None:
        body = BODY.encode()
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        data = b""
        while b"\r\n\r\n" not in data:
            data += self._recv()
        head, rest = data.split(b"\r\n\r\n", 1)
        status = head.split(b"\r\n", 1)[0]
        assert b" 200 " in status, status
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")[1:]
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += self._recv()

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def server_instructions(tmp: str) -> dict[str, float] | None:
    """Instructions per request of the server process, per endpoint (callgrind); None when
    valgrind is missing or `BENCH_INSTRUCTIONS=0`."""
    if os.environ.get("BENCH_INSTRUCTIONS", "1") == "0" or not (
        shutil.which("valgrind") and shutil.which("callgrind_control")
    ):
        return None
    port = free_port()
    out = os.path.join(tmp, "callgrind")
    os.makedirs(out)
    proc = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}/server.%p",
            sys.executable,
            __file__,
            "--serve",
            str(port),
            os.path.join(tmp, "counted.db"),
        ],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    counts: dict[str, float] = {}
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc, timeout_s=900)
        client = KeepAliveClient(port)
        for path in ("/search", "/bare"):  # the first answer fills the result cache
            for _ in range(COUNTED):
                client.post(path)
        for name in ("search", "bare"):
            zero = ["callgrind_control", "--zero", str(proc.pid)]
            subprocess.run(zero, check=True, capture_output=True)
            for _ in range(COUNTED):
                client.post(f"/{name}")
            before = set(os.listdir(out))
            dump = ["callgrind_control", "--dump", str(proc.pid)]
            subprocess.run(dump, check=True, capture_output=True)
            dumped = sorted(set(os.listdir(out)) - before)
            text = Path(out, dumped[-1]).read_text()
            found = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
            if found is None:
                raise RuntimeError(f"no instruction total in the callgrind dump {dumped[-1]}")
            counts[name] = int(found.group(1)) / COUNTED
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    return counts


def require_wrk() -> None:
    """wrk on the PATH: installed now if this process may (root, apt), else a clear stop."""
    if shutil.which("wrk"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk is missing: installing it (apt-get install -y wrk)", flush=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "wrk"],
            check=False,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            timeout=600,
        )
    if not shutil.which("wrk"):
        raise SystemExit(
            "throughput.py needs wrk (Debian: apt-get install -y wrk). "
            "BENCH_LOADGEN=httpx gives a fallback figure from an httpx generator, "
            "which is slower than the server and so is no verdict."
        )


def main() -> None:
    tool = os.environ.get("BENCH_LOADGEN", "wrk")
    if tool not in ("wrk", "httpx"):
        raise SystemExit(f"BENCH_LOADGEN: {tool!r} is neither wrk nor httpx")
    if tool == "wrk":
        require_wrk()
    with tempfile.TemporaryDirectory(prefix="bench-tp-") as tmp:
        script = os.path.join(tmp, "post.lua")
        Path(script).write_text(LUA % json.dumps(BODY))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port), os.path.join(tmp, "traces.db")],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            wait_ready(url, proc)
            import httpx

            json_body = {
                "content": BODY,
                "timeout": 10,
                "headers": {"Content-Type": "application/json"},
            }
            first = httpx.post(f"{url}/search", **json_body).json()
            hit = httpx.post(f"{url}/search", **json_body)
            bare = httpx.post(f"{url}/bare", **json_body)
            assert hit.json()["cached"] is True and not first["cached"], hit.text
            sizes = {"search": len(hit.content), "bare": len(bare.content)}
            if sizes["search"] != sizes["bare"]:  # the anchor must answer as much as search
                raise SystemExit(
                    f"the bare answer ({sizes['bare']} B) is not the size of the search "
                    f"answer ({sizes['search']} B): make bare_body match {hit.text}"
                )
            for path in ("/search", "/bare"):  # warm both paths under load
                load(tool, url + path, 1, script)
            rounds: dict[str, list[dict[str, float]]] = {"search": [], "bare": []}
            paired = []
            for r in range(ROUNDS):
                for name in order(r, ("search", "bare")):
                    before = process_cpu(proc.pid)
                    result = load(tool, f"{url}/{name}", SECONDS, script)
                    after = process_cpu(proc.pid)
                    result["user_us"] = (after[0] - before[0]) * 1e6 / result["requests"]
                    result["system_us"] = (after[1] - before[1]) * 1e6 / result["requests"]
                    rounds[name].append(result)
                paired.append(rounds["search"][-1]["rps"] / rounds["bare"][-1]["rps"])
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        instructions = server_instructions(tmp)
    rps = {name: median([r["rps"] for r in rs]) for name, rs in rounds.items()}
    p50 = {name: median([r["p50_us"] for r in rs]) for name, rs in rounds.items()}
    p99 = {name: median([r["p99_us"] for r in rs]) for name, rs in rounds.items()}
    ratio = median(paired)
    cpu = {
        name: {kind: median([r[f"{kind}_us"] for r in rs]) for kind in ("user", "system")}
        for name, rs in rounds.items()
    }
    print(
        f"load generator: {tool}, {CONNECTIONS} connections, {ROUNDS} rounds x {SECONDS} s each; "
        f"trace store {'on' if TRACE else 'off'}"
    )
    print(f"response bodies: search {sizes['search']} B, bare {sizes['bare']} B")
    for name in ("search", "bare"):
        print(
            f"{name:6}: {rps[name]:8.0f} req/s  p50 {p50[name] / 1000:6.2f} ms  "
            f"p99 {p99[name] / 1000:6.2f} ms"
        )
    print(
        "server process CPU per request (user + system, median of rounds): "
        + ", ".join(
            f"{name} {c['user'] + c['system']:.0f} µs ({c['user']:.0f} + {c['system']:.0f})"
            for name, c in cpu.items()
        )
    )
    print(
        f"ratio search/bare: {ratio:.3f} (median of per-round ratios; target >= {TARGET:g}); "
        f"ratio of medians {rps['search'] / rps['bare']:.3f}"
    )
    instructions_ratio = None
    if instructions is not None:
        instructions_ratio = instructions["bare"] / instructions["search"]
        print(
            f"server instructions per request (callgrind, {COUNTED} each): "
            f"search {instructions['search']:,.0f}, bare {instructions['bare']:,.0f}; "
            f"ratio bare/search {instructions_ratio:.3f} (the wall ratio's counterpart)"
        )
    verdict: bool | None = ratio >= TARGET
    if tool != "wrk":
        verdict = None
        print("FALLBACK FIGURE (httpx generator, slower than the server): no verdict")
    emit(
        "throughput",
        tool=tool,
        trace_store=TRACE,
        connections=CONNECTIONS,
        rounds=ROUNDS,
        seconds=SECONDS,
        search_rps=rps["search"],
        bare_rps=rps["bare"],
        ratio=ratio,
        p50_us=p50,
        p99_us=p99,
        body_bytes=sizes,
        server_cpu_us=cpu,
        instructions=instructions,
        instructions_ratio=instructions_ratio,
        target=TARGET,
        passed=verdict,
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), sys.argv[3])
    else:
        main()
