"""Precision and recall of the time-sensitivity cues on SituatedQA's temporal questions.

SituatedQA (Zhang and Choi 2021, github.com/mikejqzhang/SituatedQA) labels whether a
question's answer depends on when it is asked (`data/id_data/temp.{train,dev}.jsonl`,
`is_dependent`). Its repository states no licence, so no row of it is shipped here: the
script reads a local copy (a checkout or a git directory, e.g. the mirror `fetch` makes).

Only the train and dev splits are read; the test split is refused. The cues were
tuned by reading train errors (`--errors`, train only); dev is the figure to report.

    .venv/bin/python bench/time_sensitivity.py --situatedqa DIR [--split dev]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.sealed_quality import stamp  # noqa: E402
from routing.language.time_sensitive import time_cue  # noqa: E402

SPLITS = ("train", "dev")
FILE = "data/id_data/temp.{split}.jsonl"


def read_split(root: Path, split: str) -> list[tuple[str, bool]]:
    """(question, time-dependent) rows of one split, from a checkout or a git directory."""
    relative = FILE.format(split=split)
    if (root / relative).is_file():
        text = (root / relative).read_text(encoding="utf-8")
    else:
        shown = subprocess.run(
            ["git", "--git-dir", str(root), "show", f"HEAD:{relative}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if shown.returncode != 0:
            raise FileNotFoundError(f"{relative} is neither in {root} nor in its git HEAD")
        text = shown.stdout
    rows = []
    for line in text.splitlines():
        if line.strip():
            data = json.loads(line)
            rows.append((str(data["question"]), data["is_dependent"] == "yes"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--situatedqa", required=True, help="checkout or git dir of SituatedQA")
    parser.add_argument("--split", default="dev", help="train or dev (never test)")
    parser.add_argument("--errors", action="store_true", help="list misses (train only)")
    args = parser.parse_args(argv)
    if args.split not in SPLITS:
        print(f"--split: {args.split!r} is not one of {', '.join(SPLITS)}", file=sys.stderr)
        return 2
    if args.errors and args.split != "train":
        print("--errors: only on train (dev is the held-out figure)", file=sys.stderr)
        return 2
    try:
        rows = read_split(Path(args.situatedqa), args.split)
    except (FileNotFoundError, KeyError, json.JSONDecodeError) as exc:
        print(f"--situatedqa: {exc}", file=sys.stderr)
        return 2
    counts: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    right_kinds: Counter[str] = Counter()
    for question, dependent in rows:
        cue = time_cue(question)
        said = cue is not None
        counts[("t" if said == dependent else "f") + ("p" if said else "n")] += 1
        if cue is not None:
            kinds[cue.kind] += 1
            right_kinds[cue.kind] += dependent
        if args.errors and said != dependent:
            print(f"{'FP' if said else 'FN'}\t{cue.cue if cue else ''}\t{question}")
    tp, fp, fn = counts["tp"], counts["fp"], counts["fn"]
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    when = stamp()
    print(
        f"{when} SituatedQA temp {args.split}: rows {len(rows)}, time-dependent {tp + fn}; "
        f"cue precision {precision:.3f} ({tp}/{tp + fp}), recall {recall:.3f} ({tp}/{tp + fn})"
    )
    by_kind = ", ".join(
        f"{kind} {right_kinds[kind]}/{kinds[kind]}" for kind in sorted(kinds, key=kinds.get)
    )
    print(f"{when} SituatedQA temp {args.split}: right/said by kind: {by_kind}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
