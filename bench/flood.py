"""A flood of parts from one client, and what the other clients see meanwhile.

Eight concurrent 1000-character queries of 200 `;`-separated parts that no rule decides
(each part is a real embedding by the bundled model, then a call to the real ZIM source),
while another client asks encyclopedia questions that the keyword rules send straight to
kiwix. Measured side by side, in interleaved rounds:

- `separate`: the shipped worker pools (`sources.workers`): source calls and inference
  each have their own;
- `shared`: both kinds in one pool of 6 workers, the size asyncio's default pool has on
  this 2-core machine (what the router used before the pools were split).

Printed: the unrelated questions' latency (median, max) in both, and the ratio. Also: how
long one such query takes when the parts cap lets it through, against how long the
shipped cap (`routing.max_parts: 8`) takes to refuse it.

Kiwix's timeout is lifted to 60 s here so the shared pool's queueing shows as latency
instead of timeouts (with the shipped 5 s they time out and open the breaker: see
tests/reliability/test_dos.py).
"""

from __future__ import annotations

import asyncio
import string
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, emit, env_int, median, order  # noqa: E402
from routing.stages.embedder import load_embedder  # noqa: E402
from search.config import parse_config  # noqa: E402
from search.service import Service  # noqa: E402
from sources import workers  # noqa: E402
from tests.support.zim import build_demo_zim  # noqa: E402

ROUNDS = env_int("BENCH_FLOOD_ROUNDS", 4)
CLIENTS = 8
QUESTIONS = ["who wrote romeo and juliet", "who painted the mona lisa", "who discovered penicillin"]
LETTERS = string.ascii_lowercase


def flood_query(round_index: int, client: int) -> str:
    """1000 characters, 200 four-letter parts, distinct per round and client (no cache)."""
    head = LETTERS[round_index % 26] + LETTERS[client]
    parts = [f"{head}{LETTERS[i // 26 % 26]}{LETTERS[i % 26]}" for i in range(200)]
    return ";".join(parts)[:1000]


def config(zim: Path, max_parts: int) -> Any:
    data = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    data["routing"]["max_parts"] = max_parts
    data["sources"]["kiwix"] = {"type": "zim", "paths": [str(zim)], "timeout_s": 60}
    data["cache"] = {"result_ttl_s": 0}
    data["trace"] = {"enabled": False}
    return parse_config(data)


class Encodes:
    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()
        embedder = load_embedder()
        real = embedder.encode_one

        def counted(text: str) -> Any:
            vector = real(text)
            with self.lock:
                self.count += 1
            return vector

        embedder.encode_one = counted  # type: ignore[method-assign]


def use_pools(mode: str, separate: dict[str, workers.WorkerPool]) -> None:
    # The pools are process-wide; a bench may swap them (the old layout: one queue).
    if mode == "shared":
        shared = workers.WorkerPool("shared", 6)
        workers._POOLS[workers.SOURCES] = workers._POOLS[workers.INFERENCE] = shared
    else:
        workers._POOLS.update(separate)


async def one_round(service: Service, encodes: Encodes, round_index: int) -> list[float]:
    """Latencies (ms) of the unrelated questions asked during one flood."""
    started = encodes.count
    flood = [
        asyncio.ensure_future(service.search(flood_query(round_index, n))) for n in range(CLIENTS)
    ]
    while encodes.count - started < 50:
        await asyncio.sleep(0.01)
    latencies: list[float] = []
    for question in QUESTIONS:
        begun = time.perf_counter()
        outcome = await service.search(question)
        latencies.append((time.perf_counter() - begun) * 1000.0)
        assert outcome.status_code == 200, outcome.body
        assert outcome.body["results"][0]["status"] == "ok", outcome.body
    await asyncio.gather(*flood)
    return latencies


async def refusal(zim: Path) -> tuple[float, float]:
    """(ms to answer one 1000-character 200-part query, median ms to refuse one at the cap,
    decomposition included)."""
    query = flood_query(25, 25)
    lifted, capped = Service(config(zim, 1000)), Service(config(zim, 8))
    for service in (lifted, capped):
        await service.start()
    try:
        begun = time.perf_counter()
        answered = await lifted.search(query)
        answered_ms = (time.perf_counter() - begun) * 1000.0
        assert answered.status_code == 200
        refused_ms: list[float] = []
        for n in range(20):  # distinct queries: the decomposition is not remembered yet
            begun = time.perf_counter()
            try:
                capped.router.check_parts(flood_query(24, n))
            except Exception:  # noqa: BLE001 - TooManyParts, what the surfaces catch
                refused_ms.append((time.perf_counter() - begun) * 1000.0)
        assert len(refused_ms) == 20
        return answered_ms, median(refused_ms)
    finally:
        for service in (lifted, capped):
            await service.aclose()


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        zim = build_demo_zim(Path(tmp))
        service = Service(config(zim, 1000))
        await service.start()
        encodes = Encodes()
        separate = {name: workers.pool(name) for name in (workers.SOURCES, workers.INFERENCE)}
        samples: dict[str, list[float]] = {"separate": [], "shared": []}
        try:
            await one_round(service, encodes, 0)  # warm-up
            for r in range(ROUNDS):
                for mode in order(r, ("separate", "shared")):
                    use_pools(mode, separate)
                    samples[mode].extend(
                        await one_round(service, encodes, 1 + 2 * r + (mode == "shared"))
                    )
        finally:
            use_pools("separate", separate)
            await service.aclose()
        answered_ms, refused_ms = await refusal(zim)
    sep, sha = samples["separate"], samples["shared"]
    print(
        f"unrelated kiwix questions during a flood of {CLIENTS} x 200 parts "
        f"({len(sep)} questions per side, {ROUNDS} rounds)"
    )
    print(f"  separate pools: median {median(sep):8.1f} ms   max {max(sep):8.1f} ms")
    print(f"  one shared pool: median {median(sha):7.1f} ms   max {max(sha):8.1f} ms")
    print(
        f"  shared / separate: median {median(sha) / median(sep):.1f}x, "
        f"max {max(sha) / max(sep):.1f}x"
    )
    print(
        f"one 1000-character query of 200 parts: answered in {answered_ms:.0f} ms with the "
        f"cap lifted, refused in {refused_ms:.3f} ms at the cap "
        f"({answered_ms / refused_ms:,.0f}x)"
    )
    emit(
        "flood",
        **{
            "separate_median_ms": median(sep),
            "separate_max_ms": max(sep),
            "shared_median_ms": median(sha),
            "shared_max_ms": max(sha),
            "median_ratio": median(sha) / median(sep),
            "answered_ms": answered_ms,
            "refused_ms": refused_ms,
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
