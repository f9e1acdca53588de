"""`search route --input` over 1,000 queries, as a user runs it: a fresh process, model load included.

    .venv/bin/python bench/route_batch.py [--config config.yaml] [--queries 1000] [--json-out PATH]

The queries are distinct utterances from the eval sets (`../shared/eval/*.jsonl`, single and
compound, in a fixed order), written to a temporary file. Two runs of the real CLI, side
by side: the batch, and one query alone (the same start-up and model load with nothing to
route), so the report separates what loading costs from what routing 1,000 queries costs.
Target: the batch in under 30 s including model load.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402
from bench.common import JSON_PREFIX, run_search  # noqa: E402
from bench.routing_quality import default_eval_dir, load_rows  # noqa: E402

TARGET_S = 30.0


def eval_queries(count: int) -> list[str]:
    """`count` distinct eval utterances in a fixed, mixed order (by a hash of the text)."""
    texts = {row.text for rows in load_rows(default_eval_dir()).values() for row in rows}
    ordered = sorted(texts, key=lambda t: hashlib.md5(t.encode("utf-8")).digest())
    if len(ordered) < count:
        raise SystemExit(f"only {len(ordered)} eval utterances, asked for {count}")
    return ordered[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument(
        "--json-out", help="also write the figures, dated, here (bench/results/route_batch.json)"
    )
    args = parser.parse_args(argv)

    queries = eval_queries(args.queries)
    load_avg = os.getloadavg()[0]  # the shared machine's load: it moves these timings a lot
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "queries.txt"
        path.write_text("\n".join(queries) + "\n", encoding="utf-8")
        # one alone first, then the batch, then one alone again: the load figure is their mean
        alone_a, _ = run_search(
            ["route", queries[0], "--json", "--local", "--config", args.config], timeout_s=600
        )
        batch_s, out = run_search(
            ["route", "--input", str(path), "--config", args.config], timeout_s=600
        )
        alone_b, _ = run_search(
            ["route", queries[0], "--json", "--local", "--config", args.config], timeout_s=600
        )
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    if len(lines) != len(queries):
        raise SystemExit(f"expected {len(queries)} plans, got {len(lines)}")
    load_s = (alone_a + alone_b) / 2
    routing_ms = max(0.0, batch_s - load_s) * 1000 / len(queries)
    print(
        f"search route --input, {len(queries)} queries: {batch_s:.1f} s "
        f"(target < {TARGET_S:.0f} s, model load included)"
    )
    print(
        f"one query alone (start-up and model load): {load_s:.1f} s "
        f"({alone_a:.1f} s, {alone_b:.1f} s)"
    )
    print(f"routing alone: ~{routing_ms:.1f} ms per query")
    result = {
        "bench": "route_batch",
        "queries": len(queries),
        "batch_s": batch_s,
        "load_s": load_s,
        "routing_ms_per_query": routing_ms,
        "target_s": TARGET_S,
        "passed": batch_s < TARGET_S,
    }
    print(JSON_PREFIX + json.dumps(result))
    if args.json_out:
        figures = {key: value for key, value in result.items() if key != "bench"}
        figures["load_avg_at_start"] = round(load_avg, 2)
        results.write(args.json_out, "route_batch", "python bench/route_batch.py", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
