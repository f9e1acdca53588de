"""bench/llm_calibration.py's arithmetic: the calibration error, the Platt fit, the split,
and the compact form of the answers it keeps (no model runs here: the answers are built)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from bench import llm_calibration as lc
from routing.stages.llm_confidence import measure


def test_ece_is_zero_when_confidence_matches_accuracy_and_the_gap_for_a_constant() -> None:
    right = [True] * 7 + [False] * 3
    assert lc.ece([0.7] * 10, right) == pytest.approx(0.0)
    assert lc.ece([0.9] * 10, right) == pytest.approx(0.2)
    # Two bins, each exact: 0.95 right 1 of 1... and 0.15 right 0 of 1 -> |1-.95|, |0-.15|
    assert lc.ece([0.95, 0.15], [True, False]) == pytest.approx((0.05 + 0.15) / 2)


def test_the_platt_fit_recovers_a_known_map_and_stays_monotone() -> None:
    rng = random.Random(7)
    raw, right = [], []
    for _ in range(4000):
        p = rng.uniform(0.05, 0.95)
        truth = 1 / (1 + math.exp(-(2.0 * math.log(p / (1 - p)) - 1.0)))
        raw.append(p)
        right.append(rng.random() < truth)
    a, b = lc.fit_platt(raw, right)
    assert a == pytest.approx(2.0, abs=0.25) and b == pytest.approx(-1.0, abs=0.25)
    # Right less often the surer the raw figure: the map says the base rate, flat.
    a, b = lc.fit_platt([0.9, 0.8, 0.2, 0.1] * 10, [False, False, True, True] * 10)
    assert a == 0.0 and b == pytest.approx(0.0, abs=1e-6)


def test_the_split_is_by_text_and_about_half() -> None:
    texts = [f"utterance {i}" for i in range(400)]
    held = [t for t in texts if lc.held_out(t)]
    assert 150 < len(held) < 250
    assert all(lc.held_out(t) for t in held)  # the same text, the same half, every run


def test_the_sample_draws_only_from_the_fit_corpora_balanced() -> None:
    rows = lc.sample(4)
    assert sorted(r["route"] for r in rows) == sorted([*lc.ROUTES] * 4)
    corpus = {
        json.loads(line)["text"]
        for path in lc.FIT_DATA.glob("*.jsonl")
        for line in path.read_text("utf-8").splitlines()
    }
    assert {r["text"] for r in rows} <= corpus
    assert lc.sample(4) == rows  # seeded


def test_the_compact_answers_measure_as_the_full_ones(tmp_path: Path) -> None:
    def tok(token: str, lp: float, *alts: tuple[str, float]) -> dict[str, object]:
        top = [{"token": t, "logprob": q, "bytes": [1, 2]} for t, q in alts]
        return {"token": token, "logprob": lp, "bytes": [0], "top_logprobs": top}

    full = {
        "content": [
            tok("{", -6.0, ("You", -1.0), ("{", -6.0)),
            tok(' "source": "', -0.5, ("x", -2.0)),
            tok("ki", -1.2, ("ki", -1.2), ("forecast", -2.5), ("https", -0.9)),
            tok("wix", -0.01, ("wix", -0.01), ("w", -5.0)),
            tok('"}', -0.3, ('",', -0.2)),
        ]
    }
    small = lc.compact(full)
    assert "top_logprobs" not in small["content"][0] and "bytes" not in small["content"][2]
    assert [len(t.get("top_logprobs", [])) for t in small["content"]] == [0, 0, 3, 2, 0]
    one = measure(full, "kiwix", lc.ROUTES)
    other = measure(small, "kiwix", lc.ROUTES)
    assert other.probabilities == pytest.approx(one.probabilities)
