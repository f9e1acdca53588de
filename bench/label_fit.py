"""A few labels help and never hurt: `search fit` with 0, 1, 5 and 50 household labels.

For each count, the labels are fitted as `search fit` fits them (the weights chosen by
`search.correction.label_fit.household_weights`, the labels applied by the label stage)
and every utterance of `../shared/eval` and of the OpenTriviaQA fit corpus (quiz
questions) is routed by the dry-run pipeline `search route` runs (no LLM, the shipped
config with scripted sources, as bench/routing_quality.py does). Printed side by side:
the threshold in use, accuracy on the evaluation sets, the calibration error (ECE) of the
decided parts' stated confidence, accuracy on the quiz questions, and how many labels
hold. An utterance that is itself a labelled query is left out of the scores (the label
is about it) and counted. The weights' own held-out figures (leave one corpus out) are
the fit's: the labels never enter that fit, so they are the same for every count.

The labels are corrections a household might make about its own places and habits,
written for this bench (none is an evaluation sentence); the 50 include a contradictory
pair (the same words labelled twice: the latest counts) and adversarial ones (commands
labelled as questions for the encyclopedia or as unserved).

    .venv/bin/python bench/label_fit.py [--config config.yaml] [--eval-dir DIR] [--json-out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import results as results_files  # noqa: E402
from bench import routing_quality as rq  # noqa: E402
from routing.language.text import normalise  # noqa: E402
from routing.stages.labels import HouseholdRouting  # noqa: E402
from search.correction.label_fit import household_weights  # noqa: E402

HOUSEHOLD: list[tuple[str, str]] = [
    ("how are things at the cottage", "forecast"),
    ("is it nice out at the lake house", "forecast"),
    ("will the allotment need watering", "forecast"),
    ("should i bring the washing in", "forecast"),
    ("is it a good day for the boat", "forecast"),
    ("can we have the barbecue later", "forecast"),
    ("do the kids need wellies", "forecast"),
    ("will the roads be icy for the school run", "forecast"),
    ("is it drying weather", "forecast"),
    ("can i cycle to the office without getting soaked", "forecast"),
    ("is the greenhouse warm enough", "ha"),
    ("has the garage been left open", "ha"),
    ("is granny's room comfortable", "ha"),
    ("did anyone leave the iron plugged in", "ha"),
    ("is the boiler running", "ha"),
    ("make the den cosy", "ha"),
    ("is the shed locked", "ha"),
    ("get the nursery ready for bedtime", "ha"),
    ("is the pond pump going", "ha"),
    ("how damp is the cellar", "ha"),
    ("movie night mode", "ha"),
    ("is the dishwasher finished", "ha"),
    ("are the chickens' door shut", "ha"),
    ("is the workshop heater off", "ha"),
    ("who built the old mill by the river", "kiwix"),
    ("what is a lintel", "kiwix"),
    ("how does a heat pump work", "kiwix"),
    ("why do cats purr", "kiwix"),
    ("what is sourdough starter made of", "kiwix"),
    ("when was the railway viaduct finished", "kiwix"),
    ("what does a sump pump do", "kiwix"),
    ("how tall do sunflowers grow", "kiwix"),
    ("what is the story of the green knight", "kiwix"),
    ("how do bees make wax", "kiwix"),
    ("what time does the tip open on sunday", "web"),
    ("is the farm shop open today", "web"),
    ("any roadworks on the bypass", "web"),
    ("what is on at the village hall", "web"),
    ("did the parish council meeting get moved", "web"),
    ("best price for heating oil this week", "web"),
    ("is the ferry running late", "web"),
    ("reviews of the new pizza place in town", "web"),
    ("what bin goes out this week", "web"),
    ("any power cuts reported nearby", "web"),
    ("order more dog food", "none"),
    ("ring my sister", "none"),
    ("book the car in for a service", "none"),
    ("put the kettle song on", "none"),
    ("pay the window cleaner", "none"),
    ("tell grandad we are running late", "none"),
]
ADVERSARIAL: list[tuple[str, str]] = [
    ("switch the landing light off", "kiwix"),  # a command, labelled a question
    ("lock up the back door", "none"),
    ("how are things at the cottage", "web"),  # contradicts the earlier label; latest wins
]
COUNTS = (0, 1, 5, 50)
QUIZ = "opentriviaqa (quiz)"  # the quiz questions, scored beside the evaluation sets
BINS = 10


def label_sets() -> dict[int, list[tuple[str, str]]]:
    """The first n labels (the 50 end with the adversarial and contradictory ones)."""
    every = HOUSEHOLD[: 50 - len(ADVERSARIAL)] + ADVERSARIAL
    return {n: every[:n] if n < 50 else every for n in COUNTS}


def ece(confidence: list[float], right: list[bool]) -> float:
    c, r = np.asarray(confidence), np.asarray(right, dtype=float)
    total = 0.0
    for low in np.linspace(0, 1, BINS, endpoint=False):
        inside = (c > low) & (c <= low + 1 / BINS)
        if inside.any():
            total += inside.sum() * abs(c[inside].mean() - r[inside].mean())
    return float(total / max(len(c), 1))


async def measure(
    config: Any, files: dict[str, list[rq.Row]], labels: list[tuple[str, str]]
) -> dict[str, Any]:
    from search.service import Service
    from search.traces.records import NullTraceSink

    weights, _ = await household_weights(config)
    household = (
        HouseholdRouting.of(dict(labels), weights, f"bench:{len(labels)}") if labels else None
    )
    labelled = {normalise(text) for text, _ in labels}
    service = Service(config, traces=NullTraceSink(), household=household)
    await service.start(sources=False)
    per_file: dict[str, tuple[int, int]] = {}
    confidence: list[float] = []
    correct: list[bool] = []
    skipped = 0
    try:
        for name, rows in files.items():
            right = total = 0
            for row in rows:
                if normalise(row.text) in labelled:
                    skipped += 1
                    continue
                outcome = await service.search(row.text, dry_run=True)
                flat = [
                    p
                    for r in outcome.results
                    for p in ((r.condition,) if r.condition else ()) + (r,)
                ]
                got = tuple(sorted({rq.part_label(r.route, r.stage) for r in flat}))
                want = tuple(sorted(row.expected)) if row.compound else (row.expected,)
                ok = got == want
                right += ok
                total += 1
                if (
                    not row.compound
                    and len(flat) == 1
                    and flat[0].stage not in (None, "intent_default")
                ):
                    events = [
                        e
                        for e in outcome.chain
                        if str(e["step"]).startswith("intent_")
                        and isinstance(e.get("confidence"), float | int)
                    ]
                    if events:
                        confidence.append(float(events[-1]["confidence"]))
                        correct.append(ok)
            per_file[name] = (right, total)
        holding = 0
        for text, route in dict(labels).items():
            outcome = await service.search(text, dry_run=True)
            routes = {"none" if r.route is None else r.route for r in outcome.results}
            holding += routes == {route}
        threshold = service.resolver.min_confidence
    finally:
        await service.aclose()
    return {
        "per_file": per_file,
        "ece": ece(confidence, correct),
        "decided": len(confidence),
        "skipped": skipped,
        "holding": holding,
        "labels": len(dict(labels)),
        "threshold": threshold,
    }


async def main_async(config_path: Path, eval_dir: Path, json_out: str = "") -> int:
    files = rq.load_rows(eval_dir)
    if not files:
        print(f"no evaluation sets in {eval_dir}", file=sys.stderr)
        return 2
    from routing.fitting import fit

    quiz = [
        rq.Row("opentriviaqa", r.text, r.route, "opentriviaqa")
        for r in fit.shipped_rows()
        if r.corpus == "opentriviaqa"
    ]
    files[QUIZ] = quiz
    config = rq.isolated_config(config_path)
    started = time.perf_counter()
    results = {n: await measure(config, files, labels) for n, labels in label_sets().items()}
    stamp = f"{datetime.date.today().isoformat()} {results_files.head_commit()}"
    print(
        f"{stamp} bench/label_fit.py: the labels never enter the weight fit (held-out ECE of the weights: "
        f"{fit.ARTEFACT.name} {load_report()})"
    )
    header = f"{'labels':>6} {'threshold':>9} {'eval sets':>10} {'ECE':>6} {'quiz':>6} {'holding':>8} {'left out':>8}"
    print(header)
    base, _ = _shares(results[0])
    worst = 0.0
    for n, r in results.items():
        acc, quiz_share = _shares(r)
        if n:
            worst = max(worst, base - acc)
        print(
            f"{n:>6} {r['threshold']:>9.2f} {acc:>10.3f} {r['ece']:>6.3f} {quiz_share:>6.3f} "
            f"{r['holding']:>4}/{r['labels']:<3} {r['skipped']:>8}"
        )
    for name in files:
        cells = "  ".join(
            f"{n}: {r['per_file'][name][0] / max(r['per_file'][name][1], 1):.3f}"
            for n, r in results.items()
        )
        print(f"  {name:<28} {cells}")
    if json_out:
        eval_rows = sum(len(rows) for name, rows in files.items() if name != QUIZ)
        results_files.write(
            json_out,
            "label_fit",
            "python bench/label_fit.py --eval-dir ../shared/eval --json-out "
            "bench/results/label_fit.json",
            {
                "eval_rows": eval_rows,
                "quiz_rows": len(quiz),
                "rows": [_row(n, r) for n, r in results.items()],
            },
        )
    same_threshold = len({r["threshold"] for r in results.values()}) == 1
    ok = same_threshold and worst <= 0.005
    print(
        f"threshold unchanged: {'yes' if same_threshold else 'NO'}; "
        f"largest drop on the evaluation sets: {100 * worst:.2f} points "
        f"({'within noise' if worst <= 0.005 else 'MORE than noise'}); "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0 if ok else 1


def _shares(measured: dict[str, Any]) -> tuple[float, float]:
    """The share right over the evaluation sets together, and over the quiz questions."""
    evals = [v for k, v in measured["per_file"].items() if k != QUIZ]
    right, rows = sum(a for a, _ in evals), max(sum(t for _, t in evals), 1)
    quiz_right, quiz_rows = measured["per_file"][QUIZ]
    return right / rows, quiz_right / max(quiz_rows, 1)


def _row(count: int, measured: dict[str, Any]) -> dict[str, Any]:
    """One line of the printed table, as bench/figures.py renders it."""
    evals, quiz = _shares(measured)
    return {
        "labels": count,
        "min_confidence": measured["threshold"],
        "eval": round(evals, 3),
        "ece": round(measured["ece"], 3),
        "quiz": round(quiz, 3),
        "holding": [measured["holding"], measured["labels"]] if count else None,
    }


def load_report() -> str:
    from routing.stages.confidence import load_model

    report = load_model().report
    return f"{report.get('ece_held_out')}, min_confidence {load_model().min_confidence}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--eval-dir", default=str(rq.default_eval_dir()))
    parser.add_argument("--json-out", default="", help="also write the figures, dated, here")
    args = parser.parse_args(argv)
    return asyncio.run(main_async(Path(args.config), Path(args.eval_dir), args.json_out))


if __name__ == "__main__":
    sys.exit(main())
