"""bench/ece_noise.py: the ECE it scores is the binned one, and its noise floor is what a
calibrated model really scores (so the bench/README figure it prints means what it says)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import ece_noise


def test_a_model_off_by_a_constant_scores_that_constant() -> None:
    confidence = np.full(1000, 0.9)
    right = np.zeros(1000)
    right[:700] = 1.0
    assert ece_noise.ece(confidence, right) == pytest.approx(0.2)


def test_a_calibrated_model_scores_the_sampling_noise_and_no_more() -> None:
    scores = ece_noise.simulate(rows=400, mean=0.87, sd=0.12, draws=300)
    assert 0.02 < scores.mean() < 0.04
    big = ece_noise.simulate(rows=40_000, mean=0.87, sd=0.12, draws=5)
    assert big.mean() < 0.01


def test_an_impossible_spread_is_refused() -> None:
    with pytest.raises(SystemExit, match="--sd"):
        ece_noise.simulate(rows=10, mean=0.5, sd=0.6, draws=1)
