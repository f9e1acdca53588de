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
answers (route named, its logprobs: every token's text and log-probability, the
alternatives only where the route's name is spelt) are kept in
bench/data/llm_answers-<model file>.jsonl, appended as they come, so a run that is stopped
goes on where it left off, and `fit` and `report` re-read it without the model (about 25 s
a call with logprobs on 2 shared cores: a collection is an hour, not part of any test).

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
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from routing.stages.confidence import load_model  # noqa: E402
from routing.stages.llm_confidence import ARTEFACT  # noqa: E402
from routing.stages.route_data import shipped_routes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIT_DATA = REPO / "routing" / "fit_data"
ROUTES = ("forecast", "ha", "kiwix", "web", "none")
SEED = 20240601
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
# What the stage stated for every answer before it measured one.
CONSTANT = 0.7
MIN_CONFIDENCE = load_model().min_confidence  # the shipped fit's routing.min_confidence


def answers_path(model_file: str = MODEL_FILE) -> Path:
    return REPO / "bench" / "data" / f"llm_answers-{model_file}.jsonl"


def compact(logprobs: Any) -> Any:
    """What `measure` reads of the logprobs: every token's text and log-probability, the
    alternatives only at the tokens that overlap the route's name (the rest is bulk)."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return logprobs
    text = "".join(str(t.get("token", "")) for t in content if isinstance(t, dict))
    value = re.search(r'"(?:source|route)"\s*:\s*"([^"]*)"', text, re.IGNORECASE)
    start, end = value.span(1) if value else (0, 0)
    kept, offset = [], 0
    for token in content:
        if not isinstance(token, dict):
            return logprobs
        first, offset = offset, offset + len(str(token.get("token", "")))
        entry = {"token": token.get("token"), "logprob": _round(token.get("logprob"))}
        if first < end and offset > start:
            entry["top_logprobs"] = [
                {"token": alt.get("token"), "logprob": _round(alt.get("logprob"))}
                for alt in token.get("top_logprobs") or []
            ]
        kept.append(entry)
    return {"content": kept}


def _round(value: Any) -> Any:
    return round(value, 5) if isinstance(value, float) else value


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
    log = Path(tempfile.mkdtemp(prefix="llm-calibration-")) / "server.log"
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
                        "logprobs": compact(answer.logprobs),
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


def scored(answers: list[dict[str, Any]]) -> list[tuple[str, float, bool]]:
    """(text, raw probability of the named route, whether it was right) per answered row."""
    from routing.stages.llm_confidence import state

    rows = []
    for entry in answers:
        if entry.get("named") is None:
            continue  # no usable answer: nothing was stated
        stated = state(entry.get("logprobs"), entry["named"], ROUTES, None)
        rows.append((entry["text"], stated.confidence, entry["named"] == entry["route"]))
    return rows


def fit_platt(raw: list[float], right: list[bool]) -> tuple[float, float]:
    """a, b of sigmoid(a * logit(p) + b) by maximum likelihood (Newton), a kept >= 0 so the
    map is monotone; a small ridge keeps a few dozen rows from an extreme slope."""
    x = np.log(np.clip(raw, 1e-6, 1 - 1e-6) / (1 - np.clip(raw, 1e-6, 1 - 1e-6)))
    y = np.asarray(right, dtype=np.float64)
    w = np.zeros(2)
    design = np.column_stack([x, np.ones_like(x)])
    ridge = np.diag([1e-2, 1e-4])
    for _ in range(100):
        p = 1 / (1 + np.exp(-(design @ w)))
        gradient = design.T @ (p - y) + ridge @ w
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + ridge
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    if w[0] < 0:  # more raw probability, less often right: the raw figure says nothing
        rate = float(np.clip(y.mean(), 1e-3, 1 - 1e-3))
        return 0.0, float(np.log(rate / (1 - rate)))
    return float(w[0]), float(w[1])


def ece(confidence: list[float], right: list[bool], bins: int = 10) -> float:
    """Expected calibration error: the rows' share-weighted |accuracy - mean confidence|
    over equal-width confidence bins."""
    total = 0.0
    for index in range(bins):
        low, high = index / bins, (index + 1) / bins
        members = [
            (c, r)
            for c, r in zip(confidence, right, strict=True)
            if low <= c < high or (index == bins - 1 and c == 1.0)
        ]
        if members:
            accuracy = sum(r for _, r in members) / len(members)
            mean = sum(c for c, _ in members) / len(members)
            total += len(members) / len(confidence) * abs(accuracy - mean)
    return total


def fit(path: Path, artefact: Path) -> dict[str, Any]:
    rows = [r for r in scored(read_answers(path)) if not held_out(r[0])]
    if len(rows) < 10:
        raise SystemExit(f"{path}: {len(rows)} fitting rows; collect more first")
    a, b = fit_platt([r[1] for r in rows], [r[2] for r in rows])
    data = json.loads(artefact.read_text("utf-8")) if artefact.exists() else {"models": {}}
    data.setdefault("models", {})[MODEL_FILE] = {
        "aliases": ["gemma-3-270m"],
        "method": "platt",
        "a": round(a, 6),
        "b": round(b, 6),
        "rows": len(rows),
        "fitted_on": "routing/fit_data, the fitting half (bench/llm_calibration.py)",
        "server": "llama-cpp-python[server] 0.3.36, json_object + schema, top_logprobs 10",
        "date": dt.date.today().isoformat(),
    }
    artefact.write_text(json.dumps(data, indent=2) + "\n", "utf-8")
    return data["models"][MODEL_FILE]


def report(path: Path, artefact: Path) -> None:
    from routing.stages.llm_confidence import calibration_for

    answers = read_answers(path)
    rows = [r for r in scored(answers) if held_out(r[0])]
    calibration = calibration_for(MODEL_FILE, artefact)
    if not rows or calibration is None:
        raise SystemExit("no held-out rows or no calibration: run collect and fit first")
    right = [r[2] for r in rows]
    raw = [r[1] for r in rows]
    calibrated = [calibration(p) for p in raw]
    failed = sum(1 for a in answers if a.get("named") is None)
    print(f"LLM stage confidence, {dt.date.today().isoformat()}, {MODEL_FILE}")
    print(
        f"held-out rows: {len(rows)} of {len(answers)} routed ({failed} without an answer); "
        f"accuracy {sum(right) / len(rows):.3f}"
    )
    print(f"calibration: platt a={calibration.a:.3f} b={calibration.b:.3f}")
    for name, values in (
        (f"before (constant {CONSTANT})", [CONSTANT] * len(rows)),
        ("raw logprob probability", raw),
        ("after (calibrated)", calibrated),
    ):
        mean = sum(values) / len(values)
        taken = [r for v, r in zip(values, right, strict=True) if v >= MIN_CONFIDENCE]
        print(
            f"  {name:<28} ECE {ece(values, right):.3f}  mean confidence {mean:.3f}  "
            f"decided at {MIN_CONFIDENCE}: {len(taken)} ({sum(taken)} right)"
        )
    times = sorted(a["elapsed_s"] for a in answers if "elapsed_s" in a)
    if times:
        print(
            f"seconds a call (with logprobs): median {times[len(times) // 2]:.1f}, "
            f"{times[0]:.1f} to {times[-1]:.1f}"
        )
    named = Counter(a.get("named") for a in answers)
    print("routes named: " + ", ".join(f"{k} {v}" for k, v in named.most_common()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="route sampled fit rows by the real model")
    c.add_argument("--rows", type=int, default=160, help="rows in all (at most 300)")
    sub.add_parser("fit", help="fit the calibration on the fitting half")
    sub.add_parser("report", help="print the ECE before and after, dated")
    args = parser.parse_args(argv)
    path = answers_path()
    if args.command == "collect":
        if not 5 <= args.rows <= 300:
            print("--rows must be between 5 and 300", file=sys.stderr)
            return 2
        asyncio.run(collect(args.rows, path))
    elif args.command == "fit":
        print(json.dumps(fit(path, ARTEFACT), indent=2))
    else:
        report(path, ARTEFACT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
