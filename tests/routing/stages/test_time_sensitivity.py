"""The time-sensitivity model (routing/stages/time_sensitivity.py): its rule with the cue
words, and the shipped artefact read over real MiniLM embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from routing.language.time_sensitive import TimeCue, time_cue
from routing.stages.embedder import load_embedder
from routing.stages.time_sensitivity import (
    MODEL_KIND,
    Network,
    TimeSensitivityModel,
    load_time_model,
)

RULE = TimeSensitivityModel.rule(0.7, 0.5, frozenset({"superlative"}))


def test_a_reliable_cue_holds_whatever_the_model_says() -> None:
    verdict = RULE.judge(TimeCue("the current", "present"), 0.01)
    assert verdict.sensitive and verdict.kind == "present"


def test_a_cue_of_a_kind_that_needs_confirming_holds_only_when_the_model_agrees() -> None:
    cue = TimeCue("the largest", "superlative")
    assert not RULE.judge(cue, 0.49).sensitive
    agreed = RULE.judge(cue, 0.5)
    assert agreed.sensitive and agreed.kind == "superlative"


def test_without_a_cue_the_model_alone_decides_at_its_threshold() -> None:
    assert not RULE.judge(None, 0.69).sensitive
    alone = RULE.judge(None, 0.7)
    assert alone.sensitive and alone.kind == MODEL_KIND and alone.cue is None


def _two_units() -> TimeSensitivityModel:
    hidden = np.asarray([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)  # unit i reads input i
    return TimeSensitivityModel(
        Network(
            hidden,
            np.asarray([0.5, 0.0], dtype=np.float32),
            np.asarray([2.0, -1.0], dtype=np.float32),
            -0.5,
        ),
        0.7,
        0.5,
        frozenset({"superlative"}),
        {"rows": {"test": 2}},
    )


def test_the_probability_is_a_logistic_of_the_hidden_layer() -> None:
    model = _two_units()

    def gelu(x: float) -> float:  # the tanh form, written out
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    logit = 2.0 * gelu(1.0 + 0.5) - 1.0 * gelu(0.0) - 0.5
    assert model.probability(np.asarray([1.0, 0.0])) == pytest.approx(1 / (1 + np.exp(-logit)))
    assert model.probability(np.asarray([-100.0, 100.0])) == pytest.approx(0.0)  # no overflow


def test_the_model_is_saved_and_read_back_whole(tmp_path: Path) -> None:
    model = _two_units()
    path = tmp_path / "time.npz"
    model.save(path)
    read = TimeSensitivityModel.load(path)
    probe = np.asarray([0.3, 0.8])
    assert read.probability(probe) == pytest.approx(model.probability(probe), abs=1e-6)
    assert (read.threshold, read.confirm, read.confirmed_kinds, dict(read.report)) == (
        0.7,
        0.5,
        frozenset({"superlative"}),
        {"rows": {"test": 2}},
    )
    assert read.dimension == 2


def test_a_malformed_model_file_is_refused_naming_it(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="garbage.npz: unreadable"):
        TimeSensitivityModel.load(garbage)
    model = _two_units()
    mismatched = tmp_path / "mismatched.npz"
    layers = model.network
    wrong = Network(layers.hidden, np.zeros(3, dtype=np.float32), layers.weights, 0.0)
    TimeSensitivityModel(wrong, 0.7, 0.5, frozenset()).save(mismatched)
    with pytest.raises(ValueError, match="do not fit together"):
        TimeSensitivityModel.load(mismatched)


def test_the_shipped_model_reads_the_bundled_embeddings() -> None:
    model = load_time_model()
    assert model is not None and model.dimension == 384
    assert 0.5 <= model.threshold <= 0.95 and model.confirm == 0.5
    report = model.report
    assert report["rows"]["situatedqa"] > 3000  # fitted on the train split
    assert report["cross_validated"]["accuracy"] > report["cues_alone"]["accuracy"]
    embedder = load_embedder(None)

    def sensitive(text: str) -> bool:
        return model.judge(time_cue(text), model.probability(embedder.encode_one(text))).sensitive

    # no cue word, yet the answer moves; and fixed facts, with and without a cue word
    assert time_cue("who won the last world cup") is None
    assert sensitive("who won the last world cup")
    assert not sensitive("who wrote hamlet")
    assert not sensitive("how many legs do ants have")  # a count, of something that stays
