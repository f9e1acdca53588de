"""Which time-sensitivity model: a logistic regression or a hidden layer, and how big.

    .venv/bin/python bench/time_model_choice.py --situatedqa DIR [--json-out PATH]

Each variant is fitted the way `search fit --shipped --situatedqa DIR` fits the shipped
one (routing/fitting/time_fit.py: the same rows, the same cue-word rule, its threshold
chosen by five-fold cross-validation over the fit rows), and reported twice:
- cross-validated over the fit rows (SituatedQA's temporal train split and the written
  distinctions): what the choice is made on;
- on SituatedQA's dev split, which no variant was fitted on: precision, recall and
  accuracy of the whole rule, and how honest the probability is where routing states it
  (the questions the model alone calls time-sensitive: mean probability against the share
  that is; and the ECE over every dev question, 10 bins).
The logistic regression is the model shipped before 2026-12-06 (L2 1e-4, 600 steps of
gradient descent). Then the words beside the network: the shipped network's probability
averaged with a logistic regression over the question's TF-IDF words and word pairs
(terms in at least 2 or 3 questions; C 2, 4 or 8), the words' share 0.3, 0.5 or 0.7: 18
variants, each reported as above, and the network alone beside them. SituatedQA's repository states no licence: DIR is a local copy
(a checkout or the git directory `fetch` makes); its test split is never read.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.sealed_quality import stamp  # noqa: E402
from routing.fitting import time_fit  # noqa: E402
from routing.fitting.fit import calibration_error  # noqa: E402
from routing.language.text import normalise  # noqa: E402
from routing.language.time_sensitive import time_cue  # noqa: E402
from routing.stages.word_terms import mix  # noqa: E402


@dataclass(frozen=True, slots=True)
class Logistic:
    """The former model: a plane through the embedding."""

    weights: np.ndarray
    bias: float

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-np.clip(x @ self.weights + self.bias, -50.0, 50.0)))


def fit_logistic(x: np.ndarray, y: np.ndarray) -> Logistic:
    """Class-balanced, L2-regularised (1e-4) logistic regression, 600 steps of rate 5."""
    weight = np.where(y, 0.5 / max(y.mean(), 1e-9), 0.5 / max(1 - y.mean(), 1e-9))
    weight = (weight / weight.sum()).astype(np.float32)
    x = np.ascontiguousarray(x, dtype=np.float32)
    w = np.zeros(x.shape[1], dtype=np.float32)
    b = np.float32(0.0)
    for _ in range(600):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        grad = (p - y.astype(np.float32)) * weight
        w -= np.float32(5.0) * (x.T @ grad + np.float32(1e-4) * w)
        b -= np.float32(5.0) * grad.sum()
    return Logistic(w, float(b))


def network(units: int, epochs: int) -> Callable[[np.ndarray, np.ndarray], Any]:
    return lambda x, y: time_fit.fit_network(x, y, units=units, epochs=epochs)


VARIANTS: dict[str, Callable[[np.ndarray, np.ndarray], Any]] = {
    "logistic regression": fit_logistic,
    "128 units, 40 epochs": network(128, 40),
    "256 units, 40 epochs": network(256, 40),
    "256 units, 80 epochs": network(256, 80),
    "256 units, 200 epochs": network(256, 200),
    "512 units, 120 epochs": network(512, 120),
}


def calibration(probability: np.ndarray, y: np.ndarray, alone: np.ndarray) -> dict[str, float]:
    """Where the model alone said so: its mean probability and the share right; and the
    ECE of the probability over every row (as the weights' fit measures its own)."""
    ece = calibration_error(probability, y.astype(float))
    return {
        "alone": int(alone.sum()),
        "alone_stated": round(float(probability[alone].mean()), 4) if alone.any() else 0.0,
        "alone_right": round(float(y[alone].mean()), 4) if alone.any() else 0.0,
        "ece": round(float(ece), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--situatedqa", required=True, type=Path)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    from routing.stages.embedder import load_embedder

    fit_rows = time_fit.training_questions(args.situatedqa)
    dev_rows = time_fit.read_situatedqa(args.situatedqa, "dev")
    embedder = load_embedder(None, threads=2)
    x = embedder.encode_exemplars([q.text for q in fit_rows])
    x_dev = embedder.encode_exemplars([q.text for q in dev_rows])
    y = np.asarray([q.sensitive for q in fit_rows])
    y_dev = np.asarray([q.sensitive for q in dev_rows])
    cues = [time_cue(q.text) for q in fit_rows]
    cues_dev = [time_cue(q.text) for q in dev_rows]
    no_cue_dev = np.asarray([c is None for c in cues_dev])
    confirmed = time_fit.confirmed_kinds(cues, y)
    when = stamp()
    print(f"{when} fit rows {len(y)} ({int(y.sum())} time-sensitive), dev {len(y_dev)}")
    results: dict[str, Any] = {}
    for name, fit in VARIANTS.items():
        started = time.perf_counter()
        threshold, sweep = time_fit.best_threshold(
            cues, time_fit.cross_validated(x, y, fit), y, confirmed
        )
        held = sweep[threshold]
        on_dev = fit(x, y).probabilities(x_dev)
        dev = time_fit.rule_counts(cues_dev, on_dev, y_dev, threshold, confirmed)
        honest = calibration(on_dev, y_dev, no_cue_dev & (on_dev >= threshold))
        seconds = time.perf_counter() - started
        results[name] = {
            "threshold": threshold,
            "cross_validated": held,
            "dev": dev,
            "dev_calibration": honest,
            "seconds": round(seconds, 1),
        }
        print(
            f"{when} {name:22s} threshold {threshold:.2f}; cross-validated accuracy "
            f"{held['accuracy']:.3f}; dev precision {dev['precision']:.3f} recall "
            f"{dev['recall']:.3f} accuracy {dev['accuracy']:.3f}; the model alone said so "
            f"{honest['alone']} times at {honest['alone_stated']:.3f}, right "
            f"{honest['alone_right']:.3f}; dev ECE {honest['ece']:.3f}; {seconds:.0f} s",
            flush=True,
        )
    results.update(with_words(x, y, x_dev, y_dev, fit_rows, dev_rows, cues, cues_dev, when))
    if args.json_out:
        args.json_out.write_text(json.dumps({"date": when, "variants": results}, indent=1))


WORD_MIN_QUESTIONS = (2, 3)
WORD_C = (2.0, 4.0, 8.0)
WORD_SHARES = (0.3, 0.5, 0.7)


def with_words(
    x: np.ndarray,
    y: np.ndarray,
    x_dev: np.ndarray,
    y_dev: np.ndarray,
    fit_rows: list[time_fit.Question],
    dev_rows: list[time_fit.Question],
    cues: list[Any],
    cues_dev: list[Any],
    when: str,
) -> dict[str, Any]:
    """The shipped network alone, and averaged with each word model (every terms' minimum,
    C and share above)."""
    confirmed = time_fit.confirmed_kinds(cues, y)
    texts = [q.text for q in fit_rows]
    dev_texts = [normalise(q.text) for q in dev_rows]
    network_held = time_fit.cross_validated(x, y)
    network_dev = time_fit.fit_network(x, y).probabilities(x_dev)
    results: dict[str, Any] = {}

    def report(name: str, held: np.ndarray, on_dev: np.ndarray, terms: int | None) -> None:
        threshold, sweep = time_fit.best_threshold(cues, held, y, confirmed)
        dev = time_fit.rule_counts(cues_dev, on_dev, y_dev, threshold, confirmed)
        shipped = " (shipped)" if name == SHIPPED_WORDS else ""
        results[name] = {
            "threshold": threshold,
            "cross_validated": sweep[threshold],
            "dev": dev,
            "terms": terms,
        }
        print(
            f"{when} {name:34s} threshold {threshold:.2f}; cross-validated accuracy "
            f"{sweep[threshold]['accuracy']:.4f}; dev accuracy {dev['accuracy']:.4f}"
            + (f"; {terms} terms" if terms is not None else "")
            + shipped,
            flush=True,
        )

    report("network alone (256 units, 80 epochs)", network_held, network_dev, None)
    for questions, c in itertools.product(WORD_MIN_QUESTIONS, WORD_C):
        fit = functools.partial(time_fit.fit_words, min_questions=questions, c=c)
        words_held = time_fit.cross_validated_words(texts, y, fit)
        words = fit(texts, y)
        words_dev = np.asarray([words.probability(t) for t in dev_texts])
        for share in WORD_SHARES:
            name = f"+ words 1-2, in >= {questions}, C {c:g}, share {share:g}"
            held, on_dev = mix(network_held, words_held, share), mix(network_dev, words_dev, share)
            report(name, held, on_dev, len(words.vocabulary))
    return results


SHIPPED_WORDS = (
    f"+ words 1-2, in >= {time_fit.WORD_MIN_QUESTIONS}, "
    f"C {time_fit.WORD_C:g}, share {time_fit.WORD_SHARE:g}"
)


if __name__ == "__main__":
    main()
