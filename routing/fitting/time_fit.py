"""Fit the time-sensitivity model (routing/stages/time_sensitivity.py) and say how well.

Training rows: SituatedQA's temporal identification train split (Zhang and Choi 2021,
github.com/mikejqzhang/SituatedQA, `data/id_data/temp.train.jsonl`: does the answer of a
question depend on when it is asked), read from a local copy because that repository
states no licence (no row of it is shipped; the fitted weights are), without its rows
taken from WebQuestions; and from routing/fit_data the written distinctions' `web` (yes)
and `kiwix` (no) rows and the quiz questions (no: a quiz's answers do not move). Never a
dev or test split.

The model is a logistic regression over the question's normalised MiniLM embedding,
classes weighed equally. Its decision rule (with the cue words) is chosen by five-fold
cross-validation over the same rows: a cue kind whose precision there is under
RELIABLE needs the model to agree (probability >= CONFIRM); the model alone decides from
the threshold with the best cross-validated accuracy of the whole rule.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from routing.language.time_sensitive import time_cue
from routing.stages.time_sensitivity import ARTEFACT, TimeSensitivityModel

SITUATEDQA_FILE = "data/id_data/temp.{split}.jsonl"
LEFT_OUT_SOURCES = frozenset({"webq"})  # WebQuestions: an evaluation corpus elsewhere
FIT_DATA = Path(__file__).resolve().parents[1] / "fit_data"
RELIABLE = 0.85  # a cue kind less precise than this needs the model to agree
CONFIRM = 0.5  # the model agrees: it leans towards time-sensitive
THRESHOLDS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))  # 0.5 .. 0.95
FOLDS = 5
L2 = 1e-4
ITERATIONS = 600
RATE = 5.0


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    sensitive: bool
    corpus: str


def read_situatedqa(root: Path, split: str = "train") -> list[Question]:
    """One split's questions from a checkout or a git directory of SituatedQA, without the
    rows it took from WebQuestions. Only train is fitted on; dev is for reporting."""
    if split not in ("train", "dev"):
        raise ValueError(f"split {split!r}: only train and dev are read (never test)")
    relative = SITUATEDQA_FILE.format(split=split)
    if (root / relative).is_file():
        text = (root / relative).read_text(encoding="utf-8")
    else:
        shown = subprocess.run(
            ["git", "--git-dir", str(root), "show", f"HEAD:{relative}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if shown.returncode != 0:
            raise FileNotFoundError(f"{relative} is neither in {root} nor in its git HEAD")
        text = shown.stdout
    rows = []
    for line in text.splitlines():
        if line.strip():
            data = json.loads(line)
            if data.get("source_dataset") in LEFT_OUT_SOURCES:
                continue
            rows.append(
                Question(str(data["question"]), data["is_dependent"] == "yes", "situatedqa")
            )
    return rows


def shipped_questions(directory: Path = FIT_DATA) -> list[Question]:
    """Fit rows that tell the two apart: written web/kiwix distinctions, quiz questions."""
    rows = []
    for name, routes in (("distinctions", ("web", "kiwix")), ("opentriviaqa", ("kiwix",))):
        for line in (directory / f"{name}.jsonl").read_text("utf-8").splitlines():
            if line.strip():
                data = json.loads(line)
                if data["route"] in routes:
                    rows.append(Question(data["text"], data["route"] == "web", name))
    return rows


def training_questions(situatedqa: Path) -> list[Question]:
    """Everything the model is fitted on: SituatedQA's train split and the shipped rows."""
    return read_situatedqa(situatedqa) + shipped_questions()


def fit_logistic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Class-balanced, L2-regularised logistic regression by gradient descent."""
    weight = np.where(y, 0.5 / max(y.mean(), 1e-9), 0.5 / max(1 - y.mean(), 1e-9))
    weight = (weight / weight.sum()).astype(np.float32)
    x = np.ascontiguousarray(x, dtype=np.float32)
    x_t = np.ascontiguousarray(x.T)
    w = np.zeros(x.shape[1], dtype=np.float32)
    b = np.float32(0.0)
    target = y.astype(np.float32)
    for _ in range(ITERATIONS):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        grad = (p - target) * weight
        w -= np.float32(RATE) * (x_t @ grad + np.float32(L2) * w)
        b -= np.float32(RATE) * grad.sum()
    return w, float(b)


def _probabilities(w: np.ndarray, b: float, x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(x @ w + b)))


def cross_validated(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each row's probability from a model fitted without its fold (folds by position)."""
    fold = np.arange(len(y)) % FOLDS
    out = np.zeros(len(y))
    for index in range(FOLDS):
        train = fold != index
        w, b = fit_logistic(x[train], y[train])
        out[~train] = _probabilities(w, b, x[~train])
    return out


def _counts(said: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    tp = int((said & y).sum())
    return {
        "precision": round(tp / max(int(said.sum()), 1), 4),
        "recall": round(tp / max(int(y.sum()), 1), 4),
        "accuracy": round(float((said == y).mean()), 4),
    }


def fit_time_model(questions: Sequence[Question], vectors: np.ndarray) -> TimeSensitivityModel:
    """The model fitted on every row, with its rule chosen by cross-validation; what the
    cross-validation measured is its `report`."""
    y = np.asarray([q.sensitive for q in questions])
    cues = [time_cue(q.text) for q in questions]
    said = np.asarray([c is not None for c in cues])
    by_kind: Counter[str] = Counter()
    right: Counter[str] = Counter()
    for cue, sensitive in zip(cues, y, strict=True):
        if cue is not None:
            by_kind[cue.kind] += 1
            right[cue.kind] += int(sensitive)
    confirmed = frozenset(k for k in by_kind if right[k] / by_kind[k] < RELIABLE)
    held = cross_validated(vectors, y)
    sweep = {}
    for threshold in THRESHOLDS:
        rule = TimeSensitivityModel(np.zeros(1), 0.0, threshold, CONFIRM, confirmed)
        verdicts = np.asarray(
            [rule.judge(c, float(p)).sensitive for c, p in zip(cues, held, strict=True)]
        )
        sweep[threshold] = _counts(verdicts, y)
    best = max(THRESHOLDS, key=lambda t: (sweep[t]["accuracy"], t))
    w, b = fit_logistic(vectors, y)
    report = {
        "rows": dict(sorted(Counter(q.corpus for q in questions).items())),
        "time_sensitive_rows": int(y.sum()),
        "cues_alone": _counts(said, y),
        "cross_validated": sweep[best],
        "kind_precision": {k: round(right[k] / by_kind[k], 4) for k in sorted(by_kind)},
        "threshold_sweep": {str(t): v for t, v in sweep.items()},
    }
    return TimeSensitivityModel(w, b, best, CONFIRM, confirmed, report)


def write(model: TimeSensitivityModel, path: Path = ARTEFACT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(model.to_json(), indent=1, sort_keys=True) + "\n", "utf-8")


def render(model: TimeSensitivityModel) -> str:
    report = model.report
    cues, held = report["cues_alone"], report["cross_validated"]
    return "\n".join(
        [
            f"time-sensitivity model: {sum(report['rows'].values())} questions "
            f"({', '.join(f'{k} {v}' for k, v in report['rows'].items())}), "
            f"{report['time_sensitive_rows']} time-sensitive",
            f"  cue words alone: precision {cues['precision']:.3f}, recall {cues['recall']:.3f}"
            f", accuracy {cues['accuracy']:.3f}",
            f"  with the model (5-fold cross-validated): precision {held['precision']:.3f}, "
            f"recall {held['recall']:.3f}, accuracy {held['accuracy']:.3f}",
            f"  the model alone decides at >= {model.threshold:.2f}; cue kinds it must "
            f"confirm (>= {model.confirm:.2f}): {', '.join(sorted(model.confirmed_kinds)) or '-'}",
        ]
    )
