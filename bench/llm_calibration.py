"""Fit (and measure) the calibration of the LLM stage's confidence on the real model.

The LLM stage's raw confidence is the probability its server's token log-probabilities
give the route it named (routing/stages/llm_confidence.py). Whether 0.8 means "right 8
times in 10" is measured here, and a monotone map fitted that makes it so:

    python bench/llm_calibration.py collect [--rows 160]   # route fit rows by the real model
    python bench/llm_calibration.py fit                    # write routing/fitted/llm_calibration.json
    python bench/llm_calibration.py report                 # print the ECE, dated

`collect` starts the suite's real llama.cpp server (tests/support/llama_server.py: Gemma 3
270M) and routes a seeded sample of the fit corpora (routing/fit_data/, balanced over the
routes; never an evaluation or sealed corpus) through `LLMStage.ask`, exactly as the stage
asks (prompt, negotiated response_format, logprobs), one call at a time. The server's
answers (route named, its logprobs) are kept in a JSON-lines file outside the checkout
(`$SEARCH_DATA_DIR/llm_answers-<model file>.jsonl`), appended as they come, so a run that is
stopped goes on where it left off and `fit`/`report` re-read it without asking the model again.

The rows are split in two by a hash of their text: `fit` fits the map on one half only
(the shipped artefact is that fit), `report` measures on the other half the expected
calibration error (ECE, 10 equal-width bins) of the confidence the stage stated before
(the constant it used to state, 0.7), of the raw probability, and of the calibrated one.
Accuracy: the named route (or "none") equals the row's label.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from routing.stages.route_data import shipped_routes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIT_DATA = REPO / "routing" / "fit_data"
ROUTES = ("forecast", "ha", "kiwix", "web", "none")
SEED = 20240601
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
# What the stage stated for every answer before it measured one.
CONSTANT = 0.7


def data_dir() -> Path:
    default = Path.home() / ".local" / "share" / "search-router"
    return Path(os.environ.get("SEARCH_DATA_DIR", default))


def answers_path(model_file: str = MODEL_FILE) -> Path:
    return data_dir() / f"llm_answers-{model_file}.jsonl"


def held_out(text: str) -> bool:
    """Half the rows, by a hash of the text: measured on, never fitted on."""
    return hashlib.sha256(text.encode("utf-8")).digest()[0] % 2 == 1


def sample(rows_per_route: int) -> list[dict[str, str]]:
    """A seeded sample of the fit corpora, `rows_per_route` of each route."""
    by_route: dict[str, list[dict[str, str]]] = {route: [] for route in ROUTES}
    for path in sorted(FIT_DATA.glob("*.jsonl")):
        for line in path.read_text("utf-8").splitlines():
            row = json.loads(line)
            if row["route"] in by_route:
                by_route[row["route"]].append({"text": row["text"], "route": row["route"]})
    rng = random.Random(SEED)
    chosen: list[dict[str, str]] = []
    for route in ROUTES:
        rows = sorted({r["text"]: r for r in by_route[route]}.values(), key=lambda r: r["text"])
        chosen += rng.sample(rows, min(rows_per_route, len(rows)))
    rng.shuffle(chosen)
    return chosen


def descriptions() -> dict[str, str]:
    """The shipped routes' descriptions, as the shipped config gives them to the LLM."""
    shipped = shipped_routes()
    return {name: shipped[name].description for name in ROUTES if name != "none"}


def read_answers(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


async def collect(rows: int, path: Path) -> None:
    from routing.config import LLMConfig
    from routing.stages.llm import LLMFailure, LLMStage, build_messages
    from tests.support import llama_server as harness

    done = {a["text"] for a in read_answers(path)}
    todo = [r for r in sample(max(1, rows // len(ROUTES))) if r["text"] not in done]
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.with_suffix(".server.log")
    server = harness.start(log)
    routes = descriptions()
    stage = LLMStage(LLMConfig(base_url=server.base_url, model=server.model, timeout_s=300), routes)
    try:
        with path.open("a", encoding="utf-8") as out:
            for index, row in enumerate(todo):
                started = time.perf_counter()
                try:
                    answer = await stage.ask(build_messages(routes, row["text"]))
                    entry = {
                        **row,
                        "named": answer.route or "none",
                        "form": answer.form,
                        "logprobs": answer.logprobs,
                    }
                except LLMFailure as failure:
                    entry = {**row, "named": None, "failure": failure.detail}
                entry["elapsed_s"] = round(time.perf_counter() - started, 2)
                out.write(json.dumps(entry) + "\n")
                out.flush()
                print(f"{index + 1}/{len(todo)} {entry['elapsed_s']}s", flush=True)
    finally:
        await stage.aclose()
        harness.stop(server.pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="route sampled fit rows by the real model")
    c.add_argument("--rows", type=int, default=160, help="rows in all (at most 300)")
    sub.add_parser("fit", help="fit the calibration on the fitting half")
    sub.add_parser("report", help="print the ECE before and after, dated")
    args = parser.parse_args(argv)
    if args.command == "collect":
        if not 5 <= args.rows <= 300:
            print("--rows must be between 5 and 300", file=sys.stderr)
            return 2
        asyncio.run(collect(args.rows, answers_path()))
        return 0
    print(dt.date.today(), CONSTANT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
