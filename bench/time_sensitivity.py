"""Precision and recall of the time-sensitivity cues on SituatedQA's temporal questions.

SituatedQA (Zhang and Choi 2021, github.com/mikejqzhang/SituatedQA) labels whether a
question's answer depends on when it is asked (`data/id_data/temp.{train,dev}.jsonl`,
`is_dependent`). Its repository states no licence, so no row of it is shipped here: the
script reads a local copy (a checkout or a git directory, e.g. the mirror `fetch` makes).

Only the train and dev splits are read, without their rows taken from WebQuestions; the
test split is refused. The cues were tuned by reading train errors (`--errors`, train
only), and the time-sensitivity model (routing/stages/time_sensitivity.py) was fitted on
train (`search fit --shipped --situatedqa DIR`); dev is the figure to report, for the cue
words alone and for the rule routing applies (cue words with the model).

    .venv/bin/python bench/time_sensitivity.py --situatedqa DIR [--split dev]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.sealed_quality import stamp  # noqa: E402
from routing.fitting.time_fit import read_situatedqa  # noqa: E402
from routing.language.text import normalise  # noqa: E402
from routing.language.time_sensitive import time_cue  # noqa: E402
from routing.stages.time_sensitivity import load_time_model  # noqa: E402

SPLITS = ("train", "dev")


def read_split(root: Path, split: str) -> list[tuple[str, bool]]:
    """(question, time-dependent) rows of one split, without those from WebQuestions."""
    return [(q.text, q.sensitive) for q in read_situatedqa(root, split)]


def model_verdicts(questions: list[str]) -> list[bool] | None:
    """The shipped model's rule (cue words and the model) per question; None without it."""
    model = load_time_model()
    if model is None:
        return None
    from routing.stages.embedder import load_embedder

    vectors = load_embedder(None).encode_exemplars(questions)
    return [
        model.judge(time_cue(q), model.probability(v, normalise(q))).sensitive
        for q, v in zip(questions, vectors, strict=True)
    ]


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
    except (FileNotFoundError, KeyError, ValueError) as exc:
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
    verdicts = model_verdicts([q for q, _ in rows])
    if verdicts is not None:
        tp = sum(v and d for v, (_, d) in zip(verdicts, rows, strict=True))
        said, dependent = sum(verdicts), sum(d for _, d in rows)
        right = sum(v == d for v, (_, d) in zip(verdicts, rows, strict=True))
        print(
            f"{when} SituatedQA temp {args.split}: cues with the model (as routing reads them): "
            f"precision {tp / max(said, 1):.3f} ({tp}/{said}), recall "
            f"{tp / max(dependent, 1):.3f} ({tp}/{dependent}); accuracy {right / len(rows):.3f}, "
            f"cues alone {(counts['tp'] + counts['tn']) / len(rows):.3f}"
            + (" (train: the model was fitted on these rows)" if args.split == "train" else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
