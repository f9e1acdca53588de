"""Fit the exemplar classifier's priors (routing/stages/classifier_prior.py).

The encyclopedia route's, from SituatedQA. Rows: the questions of SituatedQA's temporal
train split whose answer does not depend on when they are asked (read as
routing/fitting/time_fit.py reads them: from a local copy, without the rows taken from
WebQuestions, never a dev or test split). Each is embedded by the configured model, and
k-means (CENTROIDS clusters, fewer for a small corpus so that each stands for PER_CENTROID
questions on average and none for fewer than SMALLEST; assigned by cosine similarity;
seeded) reduces them to weighted centroids: the same rows and model give the same file.

SHARE, the centroids' total weight against the encyclopedia route's exemplars, was chosen
on the leave-one-corpus-out figures of bench/routing_quality.py and SituatedQA's dev split
(bench/situatedqa_routing.py), never on a sealed corpus.

The `none` route's, from the requests of routing/fit_data/staged/banking77.jsonl (banking:
a service nobody here offers; committed, so `search fit --shipped` refits it with no
download). UNSERVED_SHARE was chosen on the same leave-one-corpus-out figures and on other
Banking77 train rows (`bench/routing_quality.py`'s unserved check), never on a sealed corpus.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from routing.fitting.time_fit import Question
from routing.stages.classifier_prior import PROBE, UNSERVED_ROWS, ClassifierPrior, unserved_texts

if TYPE_CHECKING:
    from routing.stages.embedder import Embedder

LABEL = "kiwix"  # the route that answers questions whose answer does not change
UNSERVED_LABEL = "none"
UNSERVED_SHARE = 0.5
CENTROIDS = 128
# A centroid stands for at least this many questions (fewer centroids for a small corpus):
# a mean of one question's embedding would be that question, which is not shipped.
PER_CENTROID = 10
SMALLEST = 5  # and none is the mean of fewer questions than this
SHARE = 1.0
ROUNDS = 50
SEED = 0


def stable_questions(questions: Sequence[Question]) -> list[Question]:
    """SituatedQA's questions whose answer does not change (not the shipped fit rows)."""
    return [q for q in questions if q.corpus == "situatedqa" and not q.sensitive]


def kmeans(
    vectors: np.ndarray, k: int, rounds: int = ROUNDS, seed: int = SEED, smallest: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Centroids (plain means of their members, not renormalised) and member counts.

    Members are assigned by cosine similarity to the renormalised centroids. A cluster of
    fewer than `smallest` members is dissolved into the others, smallest first (so every
    centroid is the mean of at least that many). Deterministic for a given input and seed.
    """
    if len(vectors) < k:
        raise ValueError(f"{len(vectors)} questions is too few for {k} centroids")
    x = np.asarray(vectors, dtype=np.float64)
    rng = np.random.default_rng(seed)
    centroids = x[rng.choice(len(x), size=k, replace=False)].copy()
    assigned = np.full(len(x), -1)
    for _ in range(rounds):
        new = _nearest(x, centroids)
        if np.array_equal(new, assigned):
            break
        assigned = new
        centroids = _means(x, assigned, centroids)
    while True:
        counts = np.bincount(assigned, minlength=len(centroids))
        live = np.flatnonzero(counts)
        small = [j for j in live if counts[j] < smallest]
        if not small or len(live) == 1:
            break
        dropped = min(small, key=lambda j: (counts[j], j))
        keep = np.asarray([j for j in range(len(centroids)) if j != dropped])
        centroids = centroids[keep]
        assigned = _nearest(x, centroids)
        centroids = _means(x, assigned, centroids)
    counts = np.bincount(assigned, minlength=len(centroids))
    kept = np.flatnonzero(counts)
    means = np.stack([x[assigned == j].mean(axis=0) for j in kept])
    return means.astype(np.float32), counts[kept]


def _nearest(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    norms = np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    return np.argmax(x @ (centroids / norms).T, axis=1)


def _means(x: np.ndarray, assigned: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Each centroid moved to its members' mean (left where it is without members)."""
    moved = centroids.copy()
    for j in range(len(centroids)):
        members = assigned == j
        if members.any():
            moved[j] = x[members].mean(axis=0)
    return moved


def fit_prior(
    questions: Sequence[Question], vectors: np.ndarray, probe_vector: np.ndarray
) -> ClassifierPrior:
    """The prior from `questions` (SituatedQA's stable ones) and their embeddings."""
    if len(questions) != len(vectors):
        raise ValueError("one vector per question")
    return fit_points(vectors, probe_vector, LABEL, SHARE, "situatedqa")


def fit_points(
    vectors: np.ndarray, probe_vector: np.ndarray, label: str, share: float, source: str
) -> ClassifierPrior:
    """`label`'s prior: weighted k-means centroids of `vectors` (embedded rows)."""
    if len(vectors) < PER_CENTROID:
        raise ValueError(f"{len(vectors)} rows from {source}: at least {PER_CENTROID} needed")
    centroids, counts = kmeans(
        vectors, min(CENTROIDS, len(vectors) // PER_CENTROID), smallest=SMALLEST
    )
    report = {"questions": len(vectors), "centroids": len(counts), "source": source}
    return ClassifierPrior(label, centroids, counts, share, probe_vector, report)


def fit_unserved(embedder: Embedder, path: Path = UNSERVED_ROWS) -> ClassifierPrior:
    """The `none` route's prior from the staged requests no source here serves."""
    vectors = embedder.encode_exemplars(unserved_texts(path))
    return fit_points(
        vectors, embedder.encode_one(PROBE), UNSERVED_LABEL, UNSERVED_SHARE, "banking77"
    )


def fit_with(embedder: Embedder, questions: Sequence[Question]) -> ClassifierPrior:
    """The prior from SituatedQA's `questions` (stable ones are picked out), embedded by
    `embedder`, whose embedding of the probe sentence goes with it."""
    stable = stable_questions(questions)
    vectors = embedder.encode_exemplars([q.text for q in stable])
    return fit_prior(stable, vectors, embedder.encode_one(PROBE))


def render(prior: ClassifierPrior) -> str:
    counts = prior.counts
    return (
        f"classifier prior: {len(counts)} centroids of {int(counts.sum())} "
        f"{prior.report.get('source', '')} rows for `{prior.label}` (median "
        f"{int(np.median(counts))} rows each, at most {int(counts.max())}), weighing "
        f"{prior.share:g}x its exemplars"
    )
