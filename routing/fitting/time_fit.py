"""Fit the time-sensitivity model (routing/stages/time_sensitivity.py) and say how well.

Training rows: SituatedQA's temporal identification train split (Zhang and Choi 2021,
github.com/mikejqzhang/SituatedQA, `data/id_data/temp.train.jsonl`: does the answer of a
question depend on when it is asked), read from a local copy because that repository
states no licence (no row of it is shipped; the fitted weights are), without its rows
taken from WebQuestions; and from routing/fit_data the written distinctions' `web` (yes)
and `kiwix` (no) rows and the quiz questions (no: a quiz's answers do not move). Never a
dev or test split.

The model is a network of one hidden layer (UNITS, GELU, dropout) over the question's
normalised MiniLM embedding, classes weighed equally, trained with torch (which the
embedding model needs anyway) and read with numpy; beside it, a logistic regression over
the question's words and word pairs (TF-IDF; scikit-learn, which sentence-transformers
installs, fits it; numpy reads it), terms found in at least WORD_MIN_QUESTIONS questions,
classes weighed equally. The probability is their mean, WORD_SHARE of it the words'. Its
decision rule (with the cue words) is chosen by five-fold cross-validation over the same
rows: a cue kind whose precision there is under RELIABLE needs the model to agree
(probability >= CONFIRM); the model alone decides from the threshold with the best
cross-validated accuracy of the whole rule.

Why this size (bench/time_model_choice.py; bench/README.md, "Time-sensitivity with a
hidden layer"): five-fold cross-validation on these rows put a logistic regression at
0.897 and networks of 128 to 512 units trained 40 to 200 epochs at 0.910 to 0.929, rising
with the epochs, and with them how much the probability overstates; 80 epochs (0.923)
overstates least of the best three and costs a third of 200's fit time. The words beside
it (bench/README.md, "Time-sensitivity read from words too"): over the same folds, 18
variants (words and word pairs in 2 or 3 questions, C 2 to 8, the words' share 0.3 to
0.7) put the whole rule at 0.926 to 0.932 against the network's 0.923 alone;
this one (0.932) is within 0.001 of the best with about half its terms.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from routing.language.time_sensitive import TimeCue, time_cue
from routing.stages.time_sensitivity import Network, TimeSensitivityModel, WordModel
from routing.stages.word_terms import mix, reader_of, vectoriser

SITUATEDQA_FILE = "data/id_data/temp.{split}.jsonl"
LEFT_OUT_SOURCES = frozenset({"webq"})  # WebQuestions: an evaluation corpus elsewhere
FIT_DATA = Path(__file__).resolve().parents[1] / "fit_data"
RELIABLE = 0.85  # a cue kind less precise than this needs the model to agree
CONFIRM = 0.5  # the model agrees: it leans towards time-sensitive
THRESHOLDS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))  # 0.5 .. 0.95
FOLDS = 5
UNITS = 256
EPOCHS = 80
DROPOUT = 0.2
RATE = 1e-3
WEIGHT_DECAY = 1e-3
BATCH = 64
SEED = 0
WORD_MIN_QUESTIONS = 3  # a term in fewer training questions is not read
WORD_C = 8.0  # the logistic regression's inverse L2 strength
WORD_SHARE = 0.5  # the words' part of the probability


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


def fit_network(x: np.ndarray, y: np.ndarray, units: int = UNITS, epochs: int = EPOCHS) -> Network:
    """Class-balanced binary cross-entropy, AdamW, minibatches in a seeded order."""
    import torch

    with torch.random.fork_rng():  # the caller's random state stays as it was
        torch.manual_seed(SEED)
        return _trained(torch, x, y, units, epochs)


def _trained(torch: Any, x: np.ndarray, y: np.ndarray, units: int, epochs: int) -> Network:
    order = torch.Generator().manual_seed(SEED)
    inputs = torch.tensor(np.asarray(x, dtype=np.float32))
    target = torch.tensor(np.asarray(y, dtype=np.float32))
    share = float(target.mean().clamp(1e-6, 1 - 1e-6))
    weight = torch.where(target > 0, 0.5 / share, 0.5 / (1.0 - share))
    first = torch.nn.Linear(inputs.shape[1], units)
    last = torch.nn.Linear(units, 1)
    model = torch.nn.Sequential(
        torch.nn.Dropout(DROPOUT),
        first,
        torch.nn.GELU(approximate="tanh"),
        torch.nn.Dropout(DROPOUT),
        last,
    )
    optimiser = torch.optim.AdamW(model.parameters(), lr=RATE, weight_decay=WEIGHT_DECAY)
    loss = torch.nn.functional.binary_cross_entropy_with_logits
    for _ in range(epochs):
        for batch in torch.randperm(len(target), generator=order).split(BATCH):
            logits = model(inputs[batch]).squeeze(1)
            optimiser.zero_grad()
            (loss(logits, target[batch], reduction="none") * weight[batch]).mean().backward()
            optimiser.step()
    with torch.no_grad():
        return Network(
            first.weight.T.contiguous().numpy().astype(np.float32),
            first.bias.numpy().astype(np.float32),
            last.weight[0].numpy().astype(np.float32),
            float(last.bias[0]),
        )


def fit_words(
    texts: Sequence[str],
    y: np.ndarray,
    min_questions: int = WORD_MIN_QUESTIONS,
    c: float = WORD_C,
) -> WordModel:
    """The logistic regression over TF-IDF words and word pairs, classes weighed equally.
    The other values are for bench/time_model_choice.py."""
    from sklearn.linear_model import LogisticRegression

    fitted = vectoriser(min_questions)
    matrix = fitted.fit_transform(list(texts))
    regression = LogisticRegression(C=c, class_weight="balanced", max_iter=5000)
    regression.fit(matrix, np.asarray(y, dtype=bool))
    return WordModel(
        reader_of(fitted),
        regression.coef_[0].astype(np.float32),
        float(regression.intercept_[0]),
    )


def cross_validated_words(
    texts: Sequence[str], y: np.ndarray, fit: Callable[..., WordModel] = fit_words
) -> np.ndarray:
    """Each row's word-model probability, read as routing reads it, from a fit without its
    fold (the same folds as `cross_validated`). `fit(texts, y)` returns a WordModel."""
    fold = [row % FOLDS for row in range(len(y))]
    out = np.zeros(len(y))
    for index in range(FOLDS):
        train = [row for row, k in enumerate(fold) if k != index]
        held = [row for row, k in enumerate(fold) if k == index]
        model = fit([texts[row] for row in train], y[train])
        out[held] = [model.probability(texts[row]) for row in held]
    return out


def cross_validated(
    x: np.ndarray, y: np.ndarray, fit: Callable[[np.ndarray, np.ndarray], Any] = fit_network
) -> np.ndarray:
    """Each row's probability from a model fitted without its fold (folds by position).
    `fit(x, y)` returns something with `probabilities(x)`."""
    fold = np.arange(len(y)) % FOLDS
    out = np.zeros(len(y))
    for index in range(FOLDS):
        train = fold != index
        out[~train] = fit(x[train], y[train]).probabilities(x[~train])
    return out


def rule_counts(
    cues: Sequence[TimeCue | None],
    probabilities: np.ndarray,
    y: np.ndarray,
    threshold: float,
    confirmed: frozenset[str],
) -> dict[str, Any]:
    """Precision, recall, accuracy and balanced accuracy of the whole rule (cue words with
    the model)."""
    rule = TimeSensitivityModel.rule(threshold, CONFIRM, confirmed)
    verdicts = np.asarray(
        [rule.judge(c, float(p)).sensitive for c, p in zip(cues, probabilities, strict=True)]
    )
    return _counts(verdicts, y)


def confirmed_kinds(cues: Sequence[TimeCue | None], y: np.ndarray) -> frozenset[str]:
    """The cue kinds less precise than RELIABLE over these rows: they need the model."""
    said: Counter[str] = Counter()
    right: Counter[str] = Counter()
    for cue, sensitive in zip(cues, y, strict=True):
        if cue is not None:
            said[cue.kind] += 1
            right[cue.kind] += int(sensitive)
    return frozenset(k for k in said if right[k] / said[k] < RELIABLE)


def _counts(said: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    said, y = np.asarray(said, dtype=bool), np.asarray(y, dtype=bool)
    tp = int((said & y).sum())
    recall = tp / max(int(y.sum()), 1)
    specificity = int((~said & ~y).sum()) / max(int((~y).sum()), 1)
    return {
        "precision": round(tp / max(int(said.sum()), 1), 4),
        "recall": round(recall, 4),
        "accuracy": round(float((said == y).mean()), 4),
        "balanced_accuracy": round((recall + specificity) / 2, 4),
    }


def best_threshold(
    cues: Sequence[TimeCue | None], held: np.ndarray, y: np.ndarray, confirmed: frozenset[str]
) -> tuple[float, dict[float, dict[str, Any]]]:
    """The threshold whose whole rule has the best balanced accuracy over `held` (the higher
    on a tie), and the sweep it was chosen from.

    Balanced, not plain, accuracy: the reading picks between two routes, the live one and
    the snapshot, and each is held to its own accuracy, whatever share of the fit rows asks
    about changing facts (a third of SituatedQA's). Plain accuracy would let the larger
    class set the threshold, and leave changing facts with the encyclopedia's stale answer
    more often than it sends fixed ones to the web, which can answer those too."""
    sweep = {t: rule_counts(cues, held, y, t, confirmed) for t in THRESHOLDS}
    return max(THRESHOLDS, key=lambda t: (sweep[t]["balanced_accuracy"], t)), sweep


def fit_time_model(questions: Sequence[Question], vectors: np.ndarray) -> TimeSensitivityModel:
    """The model fitted on every row, with its rule chosen by cross-validation; what the
    cross-validation measured is its `report`."""
    y = np.asarray([q.sensitive for q in questions])
    texts = [q.text for q in questions]
    cues = [time_cue(text) for text in texts]
    said = np.asarray([c is not None for c in cues])
    confirmed = confirmed_kinds(cues, y)
    network_held = cross_validated(vectors, y)
    alone, alone_sweep = best_threshold(cues, network_held, y, confirmed)
    held = mix(network_held, cross_validated_words(texts, y), WORD_SHARE)
    best, sweep = best_threshold(cues, held, y, confirmed)
    network = fit_network(vectors, y)
    words = fit_words(texts, y)
    marked: Counter[str] = Counter(c.kind for c in cues if c is not None)
    right: Counter[str] = Counter(c.kind for c, s in zip(cues, y, strict=True) if c and s)
    report = {
        "rows": dict(sorted(Counter(q.corpus for q in questions).items())),
        "time_sensitive_rows": int(y.sum()),
        "cues_alone": _counts(said, y),
        "cross_validated": sweep[best],
        "kind_precision": {k: round(right[k] / marked[k], 4) for k in sorted(marked)},
        "threshold_sweep": {str(t): v for t, v in sweep.items()},
        "network": {"units": UNITS, "epochs": EPOCHS, "dropout": DROPOUT},
        "network_alone": {"threshold": alone, **alone_sweep[alone]},
        "words": {
            "terms": len(words.vocabulary),
            "min_questions": WORD_MIN_QUESTIONS,
            "C": WORD_C,
            "share": WORD_SHARE,
        },
    }
    return TimeSensitivityModel(network, best, CONFIRM, confirmed, report, words, WORD_SHARE)


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
            f"recall {held['recall']:.3f}, accuracy {held['accuracy']:.3f}, balanced "
            f"{held['balanced_accuracy']:.3f}",
            f"  the model alone decides at >= {model.threshold:.2f} (the best balanced "
            f"accuracy); cue kinds it must "
            f"confirm (>= {model.confirm:.2f}): {', '.join(sorted(model.confirmed_kinds)) or '-'}",
            *_sweep_lines(report),
            *_words_lines(report),
        ]
    )


def _sweep_lines(report: Mapping[str, Any]) -> list[str]:
    """The cross-validated rule at each threshold the choice was made from."""
    sweep = report.get("threshold_sweep") or {}
    cells = [
        f"{float(t):.2f} {v['balanced_accuracy']:.3f}/{v['precision']:.3f}/{v['recall']:.3f}"
        for t, v in sweep.items()
    ]
    if not cells:
        return []
    return [f"  threshold sweep (balanced accuracy/precision/recall): {', '.join(cells)}"]


def _words_lines(report: Mapping[str, Any]) -> list[str]:
    words, alone = report.get("words"), report.get("network_alone")
    if not words or not alone:
        return []
    return [
        f"  read from its words too: {words['terms']} words and word pairs (each in >= "
        f"{words['min_questions']} questions), {words['share']:g} of the probability; the "
        f"network alone: accuracy {alone['accuracy']:.3f} (cross-validated)"
    ]
