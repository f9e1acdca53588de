"""How `search fit` chooses `min_confidence` from its held-out predictions."""

from __future__ import annotations

import numpy as np
import pytest

from routing.fitting import fit


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


def test_each_corpus_and_then_each_route_weighs_the_same() -> None:
    # corpus "a": three kiwix rows, two none rows (one of them weighted 3, as a household
    # label is); corpus "b": one none row
    examples = _examples([0, 0, 0, 1, 1, 1], ["a", "a", "a", "a", "a", "b"])
    examples.weight = np.asarray([1.0, 1.0, 1.0, 3.0, 1.0, 1.0])
    weight = fit.balanced_weights(examples)
    kiwix, none = weight[:3].sum(), weight[3:].sum()
    assert kiwix == pytest.approx(none)  # the routes, whatever the corpora asked about
    assert weight[3] == pytest.approx(3 * weight[4])  # a row's own weight, within its corpus
    assert weight[5] > weight[4]  # corpus "b" has one row; it counts as much as all of "a"'s
    assert weight.sum() == pytest.approx(len(weight))
    # computed on the rows a fit has: leaving "b" out balances what is left
    rest = fit.balanced_weights(examples.subset(np.asarray([True] * 5 + [False])))
    assert rest[:3].sum() == pytest.approx(rest[3:].sum())


def test_evidence_for_a_route_never_gets_a_negative_weight() -> None:
    """Two collinear features (as similarity and its z-score are over the shipped
    exemplars): unconstrained, the fit may give one a negative weight; as evidence it is
    held at 0 and the other carries it."""
    rng = np.random.default_rng(0)
    rows, labels = 400, 2
    signal = rng.normal(size=(rows, labels))
    x = np.stack([signal, 2 * signal + 0.05 * rng.normal(size=(rows, labels))], axis=2)
    target = (signal + 0.5 * rng.normal(size=(rows, labels))).argmax(axis=1)
    x[:, :, 0] -= 0.3 * (np.arange(labels) == target[:, None])  # the first misleads a little
    free = fit.fit_weights(x, target, np.ones(rows))
    assert free.min() < 0
    held = fit.fit_nonnegative(x, target, np.ones(rows), [0, 1])
    assert held.min() >= 0 and held[1] > 0


def test_the_report_names_the_evidence_held_at_zero() -> None:
    rng = np.random.default_rng(1)
    rows, labels = 120, ["kiwix", "none"]
    x = rng.normal(size=(rows, 2, len(fit.FULL_FEATURES)))
    target = rng.integers(0, 2, rows)
    examples = fit.Examples(
        labels,
        np.zeros((rows, 2, len(fit.KEYWORD_FEATURES))),
        x,
        target,
        np.ones(rows),
        ["a"] * 60 + ["b"] * 60,
    )
    model, report = fit.fit_described(examples)
    held = [
        f
        for f, w in zip(fit.FULL_FEATURES, model.full_weights, strict=True)
        if f in fit.EVIDENCE and w == 0
    ]
    assert all(
        w >= 0
        for f, w in zip(fit.FULL_FEATURES, model.full_weights, strict=True)
        if f in fit.EVIDENCE
    )
    text = fit.render(model, report)
    assert held  # noise features: most would weigh against their route
    assert f"held at 0 (fitted, they would weigh against their route): {', '.join(held)}" in text


def _one_signal(signal: np.ndarray, target: np.ndarray) -> fit.Examples:
    """Two routes told apart by one measured feature (the classifier's log-probability)."""
    examples = _examples(list(target), ["a"] * len(target))
    examples.full[:, :, fit.FULL_FEATURES.index("log_probability")] = signal
    return examples


def test_a_label_the_evidence_contradicts_pulls_the_fit_less(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A few rows filed under the wrong route, against strong evidence (a relabelled public
    corpus has some): a plain likelihood lowers the weight of that evidence for every row;
    allowing for label noise, the fit stays nearer the one the clean rows alone give."""
    rng = np.random.default_rng(2)
    rows = 400
    signal = rng.normal(scale=2.0, size=(rows, 2))
    clean = (signal + rng.normal(size=(rows, 2))).argmax(axis=1)
    dirty = clean.copy()
    strongest = np.argsort(-np.abs(signal[:, 0] - signal[:, 1]))[:12]
    dirty[strongest] = 1 - dirty[strongest]  # 3% mislabelled, each against clear evidence
    evidence = fit.FULL_FEATURES.index("log_probability")

    def weight(target: np.ndarray, noise: float) -> float:
        monkeypatch.setattr(fit, "LABEL_NOISE", noise)
        return float(fit.fit_examples(_one_signal(signal, target))[evidence])

    truth, plain, allowing = weight(clean, 0.0), weight(dirty, 0.0), weight(dirty, 0.01)
    assert plain < allowing < truth * 1.05
    assert truth - allowing < (truth - plain) / 2


def test_a_households_own_labels_are_taken_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """A correction is the user's word, and a label the evidence contradicts: the noise
    allowance never weighs it down."""
    rng = np.random.default_rng(3)
    signal = rng.normal(scale=2.0, size=(200, 2))
    target = signal.argmax(axis=1)
    target[:6] = 1 - target[:6]  # six corrections against what the evidence says
    examples = _one_signal(signal, target)
    examples.corpus = ["a"] * 200
    public = fit.fit_examples(examples)  # the same rows from a public corpus: weighed down
    examples.corpus = [fit.HOUSEHOLD] * 200
    given = fit.fit_examples(examples)
    monkeypatch.setattr(fit, "LABEL_NOISE", 0.0)
    np.testing.assert_allclose(given, fit.fit_examples(examples))
    assert not np.allclose(given, public)
