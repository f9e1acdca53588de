"""Random, seeded faults on the loopback wire servers, and what each fault must look like.

`tests.support.wire_servers` arms faults by hand (`set_fault`). The reliability suite
needs faults drawn at random per request, reproducibly (a seeded RNG), and a record of
which fault each request really got, so every explanation chain can be checked against
what the server actually did. `FaultySearxng` / `FaultyOpenMeteo` add that, plus a count
of requests in flight (to check the per-source concurrency bound from the server's side).

`EXPECTED` maps each fault name to the `(outcome, reason)` the dispatcher must record in
`source_invoked` (and, as `reason`, in the following `fallback`). The mapping is the
contract of `sources.base`'s typed failures; the tests compare against it, never against
whatever the code happens to produce.

`ServerProcess` runs `python -m search serve` in a subprocess on a free loopback port, so
load tests measure a real server process (its RSS, its stderr) while the wire servers and
the load generator run in the test process. `HomeAssistantApi` is HA's REST API behind a
bearer token, for the secrets test (the real HA fixture is far heavier than that needs).
"""

from __future__ import annotations

import contextvars
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.support.ports import free_port
from tests.support.wire_servers import Fault, OpenMeteoServer, SearxngServer, WireServer

REPO_ROOT = Path(__file__).resolve().parents[2]

# name -> the fault the server injects (None: answer normally).
FAULTS: dict[str, Fault | None] = {
    "ok": None,
    "timeout": Fault.delay(6.0),  # far past the sources' timeout_s
    "401": Fault.status(401),
    "403": Fault.status(403),
    "429": Fault.status(429),
    "500": Fault.status(500),
    "502": Fault.status(502),
    "503": Fault.status(503),
    "not_json": Fault.not_json(),
    "wrong_shape": Fault.wrong_shape(),
    "empty": Fault.empty(),
}

# name -> (source_invoked.outcome, reason) the dispatcher must record for it.
EXPECTED: dict[str, tuple[str, str]] = {
    "ok": ("ok", ""),
    "timeout": ("timeout", "timeout"),
    "401": ("error", "unauthorized"),
    "403": ("error", "unauthorized"),
    "429": ("error", "rate_limited"),
    "500": ("error", "server_error"),
    "502": ("error", "server_error"),
    "503": ("error", "server_error"),
    "not_json": ("error", "malformed_response"),
    "wrong_shape": ("error", "malformed_response"),
    "empty": ("empty", "empty"),
}

# HTTP sources retry an idempotent GET once on these (sources.http.request).
RETRIED = frozenset({"502", "503"})

# A realistic mix: mostly healthy, every fault present.
DEFAULT_WEIGHTS: dict[str, float] = {
    "ok": 40,
    "timeout": 3,
    "401": 4,
    "403": 4,
    "429": 6,
    "500": 6,
    "502": 6,
    "503": 4,
    "not_json": 5,
    "wrong_shape": 5,
    "empty": 6,
}


@dataclass(frozen=True, slots=True)
class Injected:
    """One request a faulty server received and the fault it answered with."""

    key: str | None  # SearXNG: the `q` parameter; Open-Meteo: None (its URL never varies)
    fault: str  # a key of FAULTS, or "armed" for a fault set by hand with set_fault()


_drawn: contextvars.ContextVar[Fault | None] = contextvars.ContextVar("drawn", default=None)


class RandomFaults(WireServer):
    """A wire server that draws a fault per request from a seeded RNG and records it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.injected: list[Injected] = []
        self._by_key: dict[str | None, list[str]] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self._rng: random.Random | None = None
        self._names: list[str] = []
        self._weights: list[float] = []
        self._count_lock = threading.Lock()

    def arm_random(self, seed: int, weights: dict[str, float] | None = None) -> None:
        """From now on, every request gets a fault drawn with these weights."""
        chosen = weights or DEFAULT_WEIGHTS
        with self._count_lock:
            self._rng = random.Random(seed)
            self._names = list(chosen)
            self._weights = [chosen[n] for n in self._names]

    def disarm_random(self) -> None:
        with self._count_lock:
            self._rng = None

    def reset_counts(self) -> None:
        with self._count_lock:
            self.injected.clear()
            self._by_key.clear()
            self.max_in_flight = self.in_flight

    def key_of(self, request: Request) -> str | None:
        return None

    def _take_fault(self) -> Fault | None:
        return _drawn.get()

    async def serve(
        self,
        request: Request,
        answer: Callable[[Request, Literal["ok", "empty", "wrong_shape"]], Response],
    ) -> Response:
        armed = WireServer._take_fault(self)  # a fault set by hand wins over the dice
        with self._count_lock:
            if armed is not None:
                name, fault = "armed", armed
            elif self._rng is not None:
                name = self._rng.choices(self._names, self._weights)[0]
                fault = FAULTS[name]
            else:
                name, fault = "ok", None
            key = self.key_of(request)
            self.injected.append(Injected(key, name))
            self._by_key.setdefault(key, []).append(name)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        token = _drawn.set(fault)
        try:
            return await super().serve(request, answer)
        finally:
            _drawn.reset(token)
            with self._count_lock:
                self.in_flight -= 1

    def faults_for(self, key: str) -> list[str]:
        """The faults, in arrival order, of every request carrying `key`."""
        with self._count_lock:
            return list(self._by_key.get(key, ()))

    def fault_counts(self) -> Counter[str]:
        with self._count_lock:
            return Counter(i.fault for i in self.injected)


class FaultySearxng(RandomFaults, SearxngServer):
    """SearXNG's JSON API with random faults; requests are told apart by their `q`."""

    def key_of(self, request: Request) -> str | None:
        return request.query_params.get("q")


class FaultyOpenMeteo(RandomFaults, OpenMeteoServer):
    """Open-Meteo's forecast API with random faults (every request looks the same)."""


def expected_call(faults: Sequence[str]) -> tuple[str, str]:
    """The `(outcome, reason)` of one source call that saw these server answers in order.

    A retried fault (502/503) must be followed by the retry; anything else ends the call.
    """
    assert faults, "the source was invoked but the server saw no request"
    for earlier in faults[:-1]:
        assert earlier in RETRIED, f"only 502/503 are retried, but the server saw {faults}"
    assert len(faults) <= 2, f"one retry at most, but the server saw {faults}"
    return EXPECTED[faults[-1]]


# --- a server process ------------------------------------------------------------------


class ServerProcess:
    """`python -m search serve --config <file>` on a free loopback port, stopped by PID."""

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        *,
        env: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
        port: int | None = None,
    ) -> None:
        self.config_path = workdir / "server-config.yaml"
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.stderr_path = workdir / "server-stderr.log"
        self.port = port or free_port()
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
        self.args = [
            sys.executable,
            "-m",
            "search",
            "serve",
            "--config",
            str(self.config_path),
            "--port",
            str(self.port),
            *extra_args,
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, ready_url: str | None = None, timeout_s: float = 60.0) -> None:
        with self.stderr_path.open("wb") as stderr:
            self.proc = subprocess.Popen(
                self.args,
                cwd=REPO_ROOT,
                env=self.env,
                stdout=stderr,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
            )
        probe = ready_url or f"{self.url}/healthz"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}:\n{self.stderr()}")
            try:
                if httpx.get(probe, timeout=1.0).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not start in {timeout_s}s:\n{self.stderr()}")

    def rss_kib(self) -> int:
        """The server process's resident set size, from /proc/<pid>/status."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS line")

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (uvicorn shuts down gracefully, the trace store flushes), then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=5)

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --- checking chains against what the servers did ---------------------------------------


@dataclass
class ChainAudit:
    """Checks explanation chains against the faults the wire servers really injected.

    `keyed`: sources backed by a `FaultySearxng`, whose requests carry the part's text, so
    each call is matched to its own server requests. `unkeyed`: sources whose requests
    all look alike (Open-Meteo); their calls are checked in aggregate by `check_unkeyed`.
    `refused`: sources pointing at a closed port. `timeouts`: each source's `timeout_s`.

    A call under heavy load may take longer than its source's timeout although the server
    answered normally; that is a real timeout (the chain is right to say so), so it is
    accepted only when the recorded `elapsed_ms` really reached the timeout, and counted
    in `load_timeouts` for the test to bound.
    """

    keyed: dict[str, RandomFaults]
    timeouts: dict[str, float]
    unkeyed: dict[str, RandomFaults] = field(default_factory=dict)
    refused: frozenset[str] = frozenset()
    cooldowns: dict[str, float] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    load_timeouts: int = 0
    skipped: int = 0
    unkeyed_outcomes: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)

    def _is_load_timeout(self, event: dict[str, Any]) -> bool:
        """A call the load cut off, not a fault: it ran to its own timeout, or the request's
        deadline ended it (`reason: cancelled`) while the starved server was still on it.
        Either way it counts against the same budget of load timeouts."""
        if event["outcome"] != "timeout":
            return False
        limit_ms = self.timeouts[event["source"]] * 1000.0
        return event.get("reason") == "cancelled" or event["elapsed_ms"] >= 0.95 * limit_ms

    def _call_reason(self, event: dict[str, Any]) -> str:
        """The reason the chain gives for leaving this source (what `fallback` must say)."""
        if event["step"] == "source_skipped":
            return str(event["reason"])
        if event["outcome"] == "empty":
            return "empty"
        return str(event.get("reason", ""))

    def check_event(self, event: dict[str, Any]) -> None:
        source = event.get("source")
        if event["step"] == "source_skipped":
            assert event["reason"] == "circuit_open", event
            assert 0.0 <= event["time_left_s"] <= self.cooldowns.get(source, 1e9), event
            if source in self.keyed:
                seen = self.keyed[source].faults_for(event["query"])
                assert seen == [], f"{source} was skipped, but its server saw {seen}: {event}"
            self.skipped += 1
            return
        if event["step"] != "source_invoked":
            return
        self.calls[source] += 1
        got = (
            event["outcome"],
            event.get("reason", "") if event["outcome"] != "empty" else "empty",
        )
        if source in self.refused:
            assert got == ("error", "connection_refused"), event
        elif source in self.keyed:
            seen = self.keyed[source].faults_for(event["query"])
            if not seen or got != expected_call(seen):
                assert self._is_load_timeout(event), (
                    f"{source} answered {got} but its server injected {seen}: {event}"
                )
                self.load_timeouts += 1
        elif source in self.unkeyed:
            self.unkeyed_outcomes.setdefault(source, Counter())[got] += 1

    def check_chain(self, chain: list[dict[str, Any]]) -> None:
        """Every source event matches its fault; every `fallback` names the reason of the
        source it leaves, and goes to the next source the chain reached in that part."""
        last_by_part: dict[str, dict[str, Any]] = {}
        pending: dict[str, dict[str, Any]] = {}
        for event in chain:
            self.check_event(event)
            part = event["part"]
            if event["step"] in ("source_invoked", "source_skipped", "result_cache_hit"):
                if part in pending:
                    jump = pending.pop(part)
                    assert event["source"] == jump["to_source"], (jump, event)
                last_by_part[part] = event
            elif event["step"] == "fallback":
                left = last_by_part.get(part)
                assert left is not None and left["source"] == event["from_source"], (left, event)
                assert event["reason"] == self._call_reason(left), (left, event)
                assert event["query"] == left["query"], (left, event)
                pending[part] = event
        assert not pending, f"a fallback led nowhere: {pending}"

    def check_unkeyed(self, source: str, max_load_timeouts: int = 0) -> int:
        """The multiset of `(outcome, reason)` the chains recorded for `source` equals the
        one its server's injected faults imply (retried 502/503 answers removed).

        Returns how many calls timed out under load beyond what the faults explain."""
        server = self.unkeyed[source]
        observed = self.unkeyed_outcomes.get(source, Counter())
        calls = sum(observed.values())
        injected = server.fault_counts()
        retried = sum(injected.values()) - calls
        retryable = sum(injected[name] for name in RETRIED)
        expected: Counter[tuple[str, str]] = Counter()
        for name, count in injected.items():
            expected[EXPECTED[name]] += count
        expected[("error", "server_error")] -= max(0, retried)
        extra = observed[("timeout", "timeout")] - expected[("timeout", "timeout")]
        if observed == +expected and 0 <= retried <= retryable:
            return 0
        # Only load timeouts may explain a difference: each one turns an expected outcome
        # into a timeout (and may leave the server with one request fewer or more).
        shortfall = sum(
            max(0, expected[k] - observed[k]) for k in expected if k != ("timeout", "timeout")
        )
        surplus = sum(
            max(0, observed[k] - expected[k]) for k in observed if k != ("timeout", "timeout")
        )
        assert surplus == 0 and extra >= 0 and shortfall <= extra <= max_load_timeouts, (
            f"{source}: chains recorded {dict(observed)}, the server's faults imply "
            f"{dict(+expected)} (injected {dict(injected)}, {calls} calls)"
        )
        return extra


# --- Home Assistant's REST API, for the secrets test -------------------------------------


class HomeAssistantApi(WireServer):
    """Home Assistant's REST API as the `homeassistant` source uses it: `GET /api/states`,
    `GET /api/config`, `POST /api/template`, behind `Authorization: Bearer <token>`.

    A wrong token gets HA's `401: Unauthorized`, here followed by the token it was sent (a
    hostile echo; real HA does not echo). The states are a few demo-like entities.
    """

    STATES: list[dict[str, Any]] = [
        {
            "entity_id": "light.kitchen_lights",
            "state": "on",
            "attributes": {"friendly_name": "Kitchen Lights", "brightness": 180},
        },
        {
            "entity_id": "light.bed_light",
            "state": "off",
            "attributes": {"friendly_name": "Bed Light"},
        },
        {
            "entity_id": "cover.garage_door",
            "state": "closed",
            "attributes": {"friendly_name": "Garage Door", "device_class": "garage"},
        },
    ]

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def routes(self) -> list[Route]:
        def guarded(build: Callable[[], Response]) -> Callable[[Request], Any]:
            async def endpoint(request: Request) -> Response:
                presented = request.headers.get("authorization", "")
                if presented != f"Bearer {self.token}":
                    return PlainTextResponse(f"401: Unauthorized ({presented})", status_code=401)
                return await self.serve(request, lambda _r, _s: build())

            return endpoint

        return [
            Route("/api/states", guarded(lambda: JSONResponse(self.STATES))),
            Route(
                "/api/config",
                guarded(
                    lambda: JSONResponse(
                        {
                            "version": "2024.3.3",
                            "state": "RUNNING",
                            "unit_system": {"temperature": "°C"},
                        }
                    )
                ),
            ),
            Route("/api/template", guarded(lambda: PlainTextResponse("[]")), methods=["POST"]),
        ]
