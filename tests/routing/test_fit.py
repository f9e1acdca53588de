"""How `search fit` chooses `min_confidence` from its held-out predictions."""

from __future__ import annotations

import numpy as np

from routing import fit


def _examples(target: list[int], corpus: list[str]) -> fit.Examples:
    rows, labels = len(target), ["kiwix", "none"]
    empty_kw = np.zeros((rows, 2, len(fit.KEYWORD_FEATURES)))  # no keyword matched
    return fit.Examples(
        labels,
        empty_kw,
        np.zeros((rows, 2, len(fit.FULL_FEATURES))),
        np.asarray(target),
        np.ones(rows),
        corpus,
    )


def _held(confidence_of_kiwix: list[float]) -> fit.HeldOut:
    p = np.asarray(confidence_of_kiwix)
    full = np.stack([p, 1 - p], axis=1)
    return fit.HeldOut(np.full_like(full, 0.5), full)


def test_the_most_accurate_threshold_that_keeps_unserved_requests_unrouted() -> None:
    # two kiwix rows at 0.9 and 0.6, two none rows at 0.3: every threshold routes no none
    examples = _examples([0, 0, 1, 1], ["a", "a", "b", "b"])
    threshold, sweep = fit.choose_threshold(examples, _held([0.9, 0.6, 0.3, 0.3]))
    assert threshold == 0.55  # keeps the 0.6 row; 0.6 and up would decline it
    assert sweep[0.55]["none_routed"] == 0.0


def test_when_no_threshold_meets_the_cap_the_most_accurate_one_is_taken() -> None:
    # a none row routed at 0.95 whatever the threshold: the cap cannot be met, and the
    # strictest threshold would only decline the kiwix rows
    examples = _examples([0, 0, 0, 1], ["a", "a", "a", "b"])
    threshold, sweep = fit.choose_threshold(examples, _held([0.6, 0.62, 0.7, 0.95]))
    assert all(v["none_routed"] > fit.NONE_ROUTED_MAX for v in sweep.values())
    assert threshold == 0.55
    assert threshold != max(fit.THRESHOLDS)


def test_no_threshold_lets_a_coin_flip_decide() -> None:
    assert min(fit.THRESHOLDS) > 0.5  # two routes tied on the same words score about 0.5
