"""Does fitting a household's labels change decisions for unrelated queries?

Routes every utterance of `../shared/eval` (dry run, no LLM, the shipped config with its
sources swapped for the scripted kind, as bench/routing_quality.py does) twice, side by
side: under the shipped config, and with 50 household labels fitted the way `search fit`
fits them (the weights refitted with the labels in, and the labels added to the routes'
data, `search.correction.label_fit.with_labels`). Prints the accuracy of each file before and after,
the difference in points, the utterances whose outcome flipped, and the accuracy on the
labelled set itself. The labels are corrections a household might make about its own
places and habits, written for this bench (none is an evaluation sentence).

    .venv/bin/python bench/label_fit.py [--config config.yaml] [--eval-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import routing_quality as rq  # noqa: E402
from search.correction.label_fit import (  # noqa: E402
    TrainingRow,
    dry_run_router,
    label_accuracy,
    with_labels,
)

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


async def accuracy_by_file(
    config: object, files: dict[str, list[rq.Row]]
) -> dict[str, list[rq.Outcome]]:
    return await rq.evaluate(config, files)


async def main_async(config_path: Path, eval_dir: Path) -> int:
    files = rq.load_rows(eval_dir)
    if not files:
        print(f"no evaluation sets in {eval_dir}", file=sys.stderr)
        return 2
    config = rq.isolated_config(config_path)
    rows = [TrainingRow(text, route, 3.0) for text, route in HOUSEHOLD]
    # As `search fit` does: refit the weights with the labels in, and add them as route data.
    from routing.fitting import fit

    extra = [fit.Labelled(r.text, r.route, corpus="household", weight=r.weight) for r in rows]
    model, _ = await fit.fit(config, extra=extra)
    workdir = tempfile.mkdtemp()
    weights = Path(workdir) / "routing-confidence.json"
    fit.write(model, weights)
    fitted = rq.with_confidence(with_labels(config, rows), weights)

    started = time.perf_counter()
    before = await rq.evaluate(config, files)
    mid = time.perf_counter()
    after = await rq.evaluate(fitted, files)
    done = time.perf_counter()
    async with dry_run_router(config) as router:
        labelled_before = await label_accuracy(rows, router)
    async with dry_run_router(fitted) as router:
        labelled_after = await label_accuracy(rows, router)

    total_before = total_after = count = 0
    print(f"{'file':<30} {'rows':>5} {'before':>8} {'after':>8} {'points':>7}")
    for name in files:
        b, a = rq.score(before[name]), rq.score(after[name])
        total_before += b.correct
        total_after += a.correct
        count += b.rows
        print(
            f"{name:<30} {b.rows:>5} {b.accuracy:>8.1%} {a.accuracy:>8.1%} "
            f"{100 * (a.accuracy - b.accuracy):>+7.2f}"
        )
    overall_b, overall_a = total_before / count, total_after / count
    print(
        f"{'all':<30} {count:>5} {overall_b:>8.1%} {overall_a:>8.1%} "
        f"{100 * (overall_a - overall_b):>+7.2f}"
    )
    flipped = [
        (o_b, o_a)
        for name in files
        for o_b, o_a in zip(before[name], after[name], strict=True)
        if o_b.correct != o_a.correct
    ]
    print(
        f"\nutterances whose outcome flipped: {len(flipped)} "
        f"({sum(o_a.correct for _, o_a in flipped)} now right, "
        f"{sum(o_b.correct for o_b, _ in flipped)} now wrong)"
    )
    for o_b, o_a in flipped[:20]:
        print(
            f"  {o_b.row.text!r}: {o_b.predicted} -> {o_a.predicted} (expected {o_b.row.expected})"
        )
    print(
        f"\nlabelled set ({len(rows)} labels): before {labelled_before:.1%}, "
        f"after {labelled_after:.1%}"
    )
    print(f"routing time: shipped {mid - started:.1f} s, with labels {done - mid:.1f} s")
    within = abs(overall_a - overall_b) <= 0.01
    print("within one point: " + ("yes" if within else "NO"))
    return 0 if within else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--eval-dir", default=str(rq.default_eval_dir()))
    args = parser.parse_args(argv)
    return asyncio.run(main_async(Path(args.config), Path(args.eval_dir)))


if __name__ == "__main__":
    sys.exit(main())
