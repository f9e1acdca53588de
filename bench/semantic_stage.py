"""Semantic-stage p50 and p99 inside real requests, on utterances nobody on this project wrote.

The service is built from the shipped `config.yaml` (trace store off) and started with
`start(sources=False)`, which loads the bundled MiniLM model offline exactly once. Then
`Service.search(query, dry_run=True)` resolves eval utterances (`../shared/eval/*.jsonl`,
each asked once, so neither cache answers them) one at a time, until `BENCH_SEMANTIC_CALLS`
(200) have reached the semantic stage; the semantic stage's
`decide` is wrapped with a timer, so only parts that reached the stage (the keyword rules
did not decide) are counted, with the encode in its worker thread, the matrix products
and the event. Also printed: the whole dry-run request's latency for those requests, the
model's load time and the RSS it costs. Target: p50 <= 15 ms, one torch thread.
`bench/semantic_speed.py` compares 1 and 2 threads on the stage alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import ROOT, emit, env_int, median, percentile, rss_mb  # noqa: E402

CALLS = env_int("BENCH_SEMANTIC_CALLS", 200)
WARMUP = 20
TARGET_MS = 15.0


def eval_texts() -> list[str]:
    folder = Path(os.environ.get("ROUTING_EVAL_DIR", ROOT / "../shared/eval")).resolve()
    seen: set[str] = set()
    texts = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                text = json.loads(line)["text"]
                if text not in seen:
                    seen.add(text)
                    texts.append(text)
    # Interleave the files' rows so the sample is not one file's style.
    return texts[::3] + texts[1::3] + texts[2::3]


async def main() -> None:
    from search.config import load_config
    from search.service import Service
    from search.traces.records import NullTraceSink

    texts = eval_texts()
    assert texts, "no eval utterances found (set ROUTING_EVAL_DIR)"
    config = load_config(ROOT / "config.yaml")
    assert config.routing.semantic.enabled, "config.yaml has the semantic stage off"
    before = rss_mb()
    service = Service(config, traces=NullTraceSink())
    started = time.perf_counter()
    await service.start(sources=False)
    load_s = time.perf_counter() - started
    loaded = rss_mb()
    stage: Any = service.resolver.stage("intent_semantic")
    assert stage is not None
    timings: list[float] = []
    original = stage.decide

    async def timed(query: str, context: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return await original(query, context)
        finally:
            timings.append((time.perf_counter_ns() - start) / 1e6)

    stage.decide = timed
    for text in texts[:WARMUP]:
        await service.search(text, dry_run=True)
    timings.clear()
    requests: list[float] = []
    asked = 0
    for text in texts[WARMUP:]:
        if len(timings) >= CALLS:
            break
        calls = len(timings)
        start = time.perf_counter_ns()
        await service.search(text, dry_run=True)
        elapsed = (time.perf_counter_ns() - start) / 1e6
        asked += 1
        if len(timings) > calls:
            requests.append(elapsed)
    await service.aclose()
    p50, p99 = median(timings), percentile(timings, 0.99)
    print(f"model load {load_s:.1f} s, RSS {before:.0f} -> {loaded:.0f} MiB")
    print(
        f"{asked} unseen utterances, {len(timings)} semantic-stage calls "
        f"({len(requests)} requests reached the stage)"
    )
    print(
        f"semantic stage: p50 {p50:.1f} ms, p90 {percentile(timings, 0.9):.1f} ms, "
        f"p99 {p99:.1f} ms (target p50 <= {TARGET_MS:g} ms)"
    )
    print(
        f"dry-run request that reached it: p50 {median(requests):.1f} ms, "
        f"p99 {percentile(requests, 0.99):.1f} ms"
    )
    figures = dict(
        p50_ms=p50,
        p90_ms=percentile(timings, 0.9),
        p99_ms=p99,
        calls=len(timings),
        queries=asked,
        request_p50_ms=median(requests),
        request_p99_ms=percentile(requests, 0.99),
        load_s=load_s,
        rss_before_mib=before,
        rss_loaded_mib=loaded,
        threads=config.routing.semantic.threads,
        target_ms=TARGET_MS,
        passed=p50 <= TARGET_MS,
    )
    emit("semantic_stage", **figures)
    if "--json-out" in sys.argv:
        from bench import results

        path = sys.argv[sys.argv.index("--json-out") + 1]
        command = "python bench/semantic_stage.py --json-out bench/results/semantic_stage.json"
        results.write(path, "semantic_stage", command, figures)


if __name__ == "__main__":
    asyncio.run(main())
