"""Fitting the classifier priors: clusters, their sizes, and what is fitted on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from routing.fitting import prior_fit
from routing.fitting.time_fit import Question


def blobs(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Three tight groups of unit vectors (40, 30 and 20 of them) around three axes."""
    rng = np.random.default_rng(seed)
    centres = np.eye(8)[:3]
    sizes = (40, 30, 20)
    points = np.concatenate(
        [c + 0.05 * rng.standard_normal((n, 8)) for c, n in zip(centres, sizes, strict=True)]
    )
    return points / np.linalg.norm(points, axis=1, keepdims=True), np.repeat([0, 1, 2], sizes)


def test_kmeans_finds_the_groups_and_counts_their_members() -> None:
    points, group = blobs()
    centroids, counts = prior_fit.kmeans(points, 3)
    assert sorted(counts.tolist()) == [20, 30, 40]
    for centroid in centroids:  # each centroid is its group's plain mean
        nearest = np.argmax(points @ centroid)
        assert np.allclose(centroid, points[group == group[nearest]].mean(axis=0), atol=1e-6)
    again, _ = prior_fit.kmeans(points, 3)
    assert np.array_equal(centroids, again)  # seeded: the same file from the same rows


def test_no_centroid_is_the_mean_of_fewer_than_the_smallest() -> None:
    points, group = blobs()
    few = np.concatenate([points[group == g][:n] for g, n in ((0, 5), (1, 4), (2, 3))])
    _, counts = prior_fit.kmeans(few, len(few))  # as many centroids as points: one each
    assert counts.tolist() == [1] * len(few)
    _, counts = prior_fit.kmeans(few, len(few), smallest=3)
    assert counts.min() >= 3 and counts.sum() == len(few)


def test_kmeans_needs_as_many_points_as_centroids() -> None:
    with pytest.raises(ValueError, match="too few"):
        prior_fit.kmeans(np.eye(3), 4)


def test_only_situatedqas_stable_questions_are_fitted_on() -> None:
    questions = [
        Question("when was the bridge built", False, "situatedqa"),
        Question("who is the current mayor", True, "situatedqa"),
        Question("which planet is largest", False, "opentriviaqa"),
    ]
    assert [q.text for q in prior_fit.stable_questions(questions)] == ["when was the bridge built"]


def test_each_centroid_stands_for_at_least_ten_questions() -> None:
    points, _ = blobs()
    questions = [Question(f"q{i}", False, "situatedqa") for i in range(len(points))]
    probe = np.ones(8, np.float32) / np.sqrt(8)
    fitted = prior_fit.fit_prior(questions[:25], points[:25], probe)
    assert len(fitted.counts) == 2 and fitted.counts.sum() == 25
    assert fitted.label == "kiwix" and fitted.share == prior_fit.SHARE
    assert fitted.report == {"questions": 25, "centroids": 2, "source": "situatedqa"}
    with pytest.raises(ValueError, match="at least 10"):
        prior_fit.fit_prior(questions[:9], points[:9], probe)


def test_the_unserved_prior_is_fitted_from_its_staged_requests(tmp_path: Path) -> None:
    """The `none` route's prior: only the rows labelled `none`, their centroids for `none`,
    named after their source; a file with too few rows is refused by name."""
    rows = tmp_path / "staged.jsonl"
    texts = [f"request {i}" for i in range(30)]
    rows.write_text(
        "".join(json.dumps({"text": t, "route": "none"}) + "\n" for t in texts)
        + json.dumps({"text": "who wrote hamlet", "route": "kiwix"})
        + "\n"
    )
    assert prior_fit.unserved_texts(rows) == texts

    class Embedder:
        def encode_exemplars(self, batch: list[str]) -> np.ndarray:
            points, _ = blobs()
            return points[::3][: len(batch)]  # ten of each group

        def encode_one(self, text: str) -> np.ndarray:
            return np.ones(8, np.float32) / np.sqrt(8)

    fitted = prior_fit.fit_unserved(Embedder(), rows)  # type: ignore[arg-type]
    assert fitted.label == "none" and fitted.share == prior_fit.UNSERVED_SHARE
    assert fitted.report == {"questions": 30, "centroids": 3, "source": "banking77"}
    rows.write_text(json.dumps({"text": "one", "route": "none"}) + "\n")
    with pytest.raises(ValueError, match="1 rows from banking77: at least 10"):
        prior_fit.fit_unserved(Embedder(), rows)  # type: ignore[arg-type]
