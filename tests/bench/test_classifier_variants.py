"""bench/classifier_variants.py: its `shipped` row is the classifier the service trains, and
no set is judged by a fit that saw its own corpus (else its figures would flatter)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.classifier_variants import (
    accuracy,
    fit_rows_without,
    judged_sets,
    main,
    word_half,
)
from routing.fitting.fit import Labelled
from routing.stages.word_classifier import WordClassifier

EVAL = Path(__file__).resolve().parents[3] / "shared" / "eval"

GROUPS = {
    "forecast": ["will it rain tomorrow", "is it sunny today", "weekend weather"],
    "ha": ["turn on the kitchen light", "lock the front door", "set the heating to 20"],
    "none": ["set an alarm for seven", "play some jazz", "order a pizza"],
}
UNSERVED = ["my card was declined", "transfer money to my savings", "why was i charged twice"]


def test_the_word_half_it_trains_is_the_one_the_service_trains() -> None:
    texts = ["is it going to rain", "switch the light off", "my card is blocked", "zzz"]
    found = word_half(GROUPS, {"none": [(UNSERVED, 0.5)]})(texts)
    service = WordClassifier.fit(GROUPS, {"none": [(UNSERVED, 0.5)]})
    expected = np.array([[service.probabilities(t)[label] for label in GROUPS] for t in texts])
    np.testing.assert_allclose(found, expected, atol=1e-5)
    two = {label: GROUPS[label] for label in ("forecast", "ha")}
    found = word_half(two, {})(texts)
    service = WordClassifier.fit(two)
    expected = np.array([[service.probabilities(t)[label] for label in two] for t in texts])
    np.testing.assert_allclose(found, expected, atol=1e-5)


def test_a_set_is_never_judged_by_its_own_corpus_rows() -> None:
    rows = [
        Labelled("a", "ha", "slurp+hwu64"),
        Labelled("b", "web", "snips"),
        Labelled("c", "kiwix", "opentriviaqa"),
    ]
    assert [r.text for r in fit_rows_without(rows, "slurp+hwu64")] == ["b", "c"]
    assert [r.text for r in fit_rows_without(rows, None)] == ["a", "b", "c"]
    corpora = {s.name: s.corpus for s in judged_sets(EVAL, None)}
    # SLURP and HWU64 are one fit corpus: judging either leaves both out
    assert corpora["slurp"] == corpora["hwu64"] == "slurp+hwu64"
    assert corpora["banking77"] is None


def test_accuracy_is_the_share_whose_most_probable_label_is_their_route() -> None:
    probabilities = np.array([[0.7, 0.3], [0.4, 0.6], [0.9, 0.1]])
    rows = [("x", "a"), ("y", "b"), ("z", "b")]
    assert accuracy(probabilities, ["a", "b"], rows) == pytest.approx(2 / 3)


def test_bad_usage_exits_2_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--contrastive", "-1"]) == 2
    assert "--contrastive" in capsys.readouterr().err
    assert main(["--eval-dir", str(tmp_path / "missing")]) == 2
    assert "--eval-dir" in capsys.readouterr().err
    assert main(["--save-model", str(tmp_path / "model")]) == 2  # nothing fine-tuned to save
    assert "--save-model" in capsys.readouterr().err
    assert not (tmp_path / "model").exists()
