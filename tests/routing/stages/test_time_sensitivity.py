"""The time-sensitivity model (routing/stages/time_sensitivity.py): its rule with the cue
words, and the shipped artefact read over real MiniLM embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from routing.language.time_sensitive import TimeCue, time_cue
from routing.stages.embedder import load_embedder
from routing.stages.time_sensitivity import (
    MODEL_KIND,
    TimeSensitivityModel,
    load_time_model,
)

RULE = TimeSensitivityModel(np.zeros(2), 0.0, 0.7, 0.5, frozenset({"superlative"}))


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


def test_the_probability_is_a_logistic_of_the_embedding() -> None:
    model = TimeSensitivityModel(np.asarray([2.0, -1.0]), -0.5, 0.7, 0.5, frozenset())
    assert model.probability(np.asarray([1.0, 0.0])) == pytest.approx(1 / (1 + np.exp(-1.5)))
    assert model.probability(np.asarray([-100.0, 100.0])) == pytest.approx(0.0)  # no overflow
    assert TimeSensitivityModel.from_json(model.to_json()).probability(
        np.asarray([0.5, 0.5])
    ) == pytest.approx(model.probability(np.asarray([0.5, 0.5])), abs=1e-6)


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
