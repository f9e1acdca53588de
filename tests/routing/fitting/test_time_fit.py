"""Fitting the time-sensitivity model (routing/fitting/time_fit.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from routing.fitting import time_fit
from routing.stages.time_sensitivity import TimeSensitivityModel


def write_split(root: Path, split: str, rows: list[dict[str, str]]) -> None:
    path = root / time_fit.SITUATEDQA_FILE.format(split=split)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_situatedqa_is_read_without_webquestions_and_never_its_test_split(tmp_path: Path) -> None:
    write_split(
        tmp_path,
        "train",
        [
            {
                "question": "who is the mayor",
                "is_dependent": "yes",
                "source_dataset": "nq_table.open",
            },
            {"question": "who wrote hamlet", "is_dependent": "no", "source_dataset": "tydi"},
            {"question": "what is a q", "is_dependent": "no", "source_dataset": "webq"},
        ],
    )
    rows = time_fit.read_situatedqa(tmp_path)
    assert [(r.text, r.sensitive) for r in rows] == [
        ("who is the mayor", True),
        ("who wrote hamlet", False),
    ]
    with pytest.raises(ValueError, match="never test"):
        time_fit.read_situatedqa(tmp_path, "test")
    with pytest.raises(FileNotFoundError):
        time_fit.read_situatedqa(tmp_path, "dev")


def test_the_rule_is_chosen_by_cross_validation() -> None:
    """Two clusters of vectors; a cue kind that fires on both needs the model's word, one
    that fires only on the time-sensitive cluster does not."""
    draw = np.random.default_rng(7)
    n = 200
    sensitive = np.arange(n) % 2 == 0
    vectors = draw.normal(0, 0.3, (n, 8)) + np.where(sensitive[:, None], 1.0, -1.0)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts = []
    for i in range(n):
        if i % 4 == 0:
            texts.append("who is the current mayor")  # a present cue, on sensitive rows only
        elif i % 5 == 0:
            texts.append("what is the largest lake")  # a superlative, on either
        else:
            texts.append(f"question {i}")
    questions = [
        time_fit.Question(t, bool(y), "test") for t, y in zip(texts, sensitive, strict=True)
    ]
    model = time_fit.fit_time_model(questions, vectors.astype(np.float32))
    report = model.report
    assert isinstance(model, TimeSensitivityModel)
    assert model.confirmed_kinds == frozenset({"superlative"})
    assert model.threshold in time_fit.THRESHOLDS
    assert report["cross_validated"]["accuracy"] > 0.95  # the clusters are apart
    assert report["cues_alone"]["recall"] == 0.6  # 60 of the 100 sensitive rows have a cue
    assert model.probability(vectors[0], texts[0]) > 0.8
    assert model.probability(vectors[1], texts[1]) < 0.2
    # the words were fitted beside the network, and the report says what each measured
    assert model.words is not None and model.word_share == time_fit.WORD_SHARE
    assert "current mayor" in model.words.vocabulary  # in 50 questions
    assert "question 1" not in model.words.vocabulary  # in one question: not read
    assert report["words"]["terms"] == len(model.words.vocabulary)
    assert report["network_alone"]["accuracy"] > 0.95


# Ten changing facts among a hundred questions: the model is unsure of half of them (0.52),
# and of six fixed ones (0.53).
UNSURE_HELD = np.asarray([0.9] * 5 + [0.52] * 5 + [0.1] * 84 + [0.53] * 6)
UNSURE_SENSITIVE = np.asarray([True] * 10 + [False] * 90)


def test_the_threshold_weighs_both_routes_alike_not_the_larger_class() -> None:
    """Plain accuracy would take the high threshold (five changing facts left to the
    snapshot, 95 right); the threshold is the one that serves both routes (all ten to the
    live source, six fixed ones with them)."""
    y = UNSURE_SENSITIVE
    threshold, sweep = time_fit.best_threshold([None] * len(y), UNSURE_HELD, y, frozenset())
    assert threshold == 0.5
    assert sweep[0.5]["recall"] == 1.0 and sweep[0.5]["accuracy"] == 0.94
    assert sweep[0.5]["balanced_accuracy"] == round((1.0 + 84 / 90) / 2, 4)
    assert sweep[0.9]["accuracy"] == 0.95 > sweep[0.5]["accuracy"]  # what plain accuracy picks
    assert sweep[0.9]["balanced_accuracy"] == 0.75


def test_the_fit_prints_the_sweep_it_chose_from() -> None:
    """What `search fit --situatedqa` prints: every threshold's balanced accuracy, so the
    choice can be checked against its neighbours."""
    y = UNSURE_SENSITIVE
    _, sweep = time_fit.best_threshold([None] * len(y), UNSURE_HELD, y, frozenset())
    lines = time_fit._sweep_lines({"threshold_sweep": {str(t): v for t, v in sweep.items()}})
    assert len(lines) == 1 and "0.50 0.967/0.625/1.000" in lines[0]
    assert "0.90 0.750/1.000/0.500" in lines[0]
    assert time_fit._sweep_lines({}) == []
