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
    WordModel,
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
    assert model.probability(np.asarray([1.0, 0.0]), "q") == pytest.approx(1 / (1 + np.exp(-logit)))
    assert model.probability(np.asarray([-100.0, 100.0]), "q") == pytest.approx(0.0)  # no overflow


def test_the_model_is_saved_and_read_back_whole(tmp_path: Path) -> None:
    model = _two_units()
    path = tmp_path / "time.npz"
    model.save(path)
    read = TimeSensitivityModel.load(path)
    probe = np.asarray([0.3, 0.8])
    assert read.probability(probe, "q") == pytest.approx(model.probability(probe, "q"), abs=1e-6)
    assert read.words is None
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
    assert model.words is not None and 0 < model.word_share < 1
    assert len(model.words.vocabulary) == report["words"]["terms"] > 1000
    # the words add to the network: cross-validated, the whole rule is right more often
    assert report["cross_validated"]["accuracy"] > report["network_alone"]["accuracy"]
    assert report["cross_validated"]["accuracy"] > report["cues_alone"]["accuracy"]
    embedder = load_embedder(None)

    def sensitive(text: str) -> bool:
        vector = embedder.encode_one(text)
        return model.judge(time_cue(text), model.probability(vector, text)).sensitive

    # no cue word, yet the answer moves; and fixed facts, with and without a cue word
    assert time_cue("who won the last world cup") is None
    assert sensitive("who won the last world cup")
    assert not sensitive("who wrote hamlet")
    assert not sensitive("how many legs do ants have")  # a count, of something that stays


def _words() -> WordModel:
    terms = ["who", "won", "who won", "the", "cup"]
    idf = np.asarray([1.0, 2.0, 3.0, 1.0, 1.5], dtype=np.float32)
    weights = np.asarray([0.5, 1.0, 2.0, -0.5, 0.0], dtype=np.float32)
    return WordModel.of(terms, idf, weights, -0.25)


def test_the_words_are_read_as_tf_idf_of_words_and_word_pairs() -> None:
    words = _words()
    # "Who won the cup, who?": who x2, won, the, cup, "who won" (pairs across the comma too)
    tf = {"who": 1 + np.log(2), "won": 1.0, "the": 1.0, "cup": 1.0, "who won": 1.0}
    idf = {"who": 1.0, "won": 2.0, "who won": 3.0, "the": 1.0, "cup": 1.5}
    weight = {"who": 0.5, "won": 1.0, "who won": 2.0, "the": -0.5, "cup": 0.0}
    vector = {t: tf[t] * idf[t] for t in tf}
    norm = np.sqrt(sum(v * v for v in vector.values()))
    logit = sum(vector[t] * weight[t] for t in vector) / norm - 0.25
    assert words.probability("Who won the cup, who?") == pytest.approx(1 / (1 + np.exp(-logit)))
    # no known term: the bias alone
    assert words.probability("quelle heure") == pytest.approx(1 / (1 + np.exp(0.25)))
    assert words.probability("") == pytest.approx(1 / (1 + np.exp(0.25)))


def test_the_words_match_the_vectoriser_they_were_fitted_with() -> None:
    """What routing reads is what scikit-learn fitted: the numpy reading of a fitted
    TfidfVectorizer and LogisticRegression gives their probability."""
    from routing.fitting.time_fit import fit_words

    texts = [
        "who won the cup last year",
        "who won the election",
        "who is the current mayor",
        "who is the mayor now",
        "who wrote hamlet",
        "who wrote the odyssey",
        "when was the bridge built",
        "when was the tower built",
    ] * 3
    y = np.asarray([True, True, True, True, False, False, False, False] * 3)
    words = fit_words(texts, y)
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectoriser = TfidfVectorizer(
        ngram_range=(1, 2), min_df=3, sublinear_tf=True, token_pattern=r"(?u)\b\w+\b"
    )
    matrix = vectoriser.fit_transform(texts)
    regression = LogisticRegression(C=8.0, class_weight="balanced", max_iter=5000).fit(matrix, y)
    for text in ("Who won the mayor's cup?", "when was hamlet written", "nothing known here"):
        expected = regression.predict_proba(vectoriser.transform([text]))[0, 1]
        assert words.probability(text) == pytest.approx(expected, abs=1e-5)
    assert words.probability("who won the election") > 0.5 > words.probability("who wrote hamlet")


def test_the_words_are_saved_with_the_network_and_mixed_by_their_share(tmp_path: Path) -> None:
    network = _two_units()
    model = TimeSensitivityModel(
        network.network, 0.7, 0.5, frozenset(), {}, words=_words(), word_share=0.25
    )
    probe = np.asarray([0.3, 0.8])
    text = "who won the cup"
    mixed = 0.75 * network.probability(probe, text) + 0.25 * _words().probability(text)
    assert model.probability(probe, text) == pytest.approx(mixed)
    path = tmp_path / "time.npz"
    model.save(path)
    read = TimeSensitivityModel.load(path)
    assert read.words is not None and read.words.terms == ["who", "won", "who won", "the", "cup"]
    assert read.word_share == 0.25
    assert read.probability(probe, text) == pytest.approx(mixed, abs=1e-6)


def test_a_word_model_that_does_not_fit_its_terms_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="3 terms but"):
        WordModel.of(["a", "b", "c"], np.zeros(2), np.zeros(3), 0.0)
    with pytest.raises(ValueError, match="twice"):
        WordModel.of(["a", "a"], np.zeros(2), np.zeros(2), 0.0)
    network = _two_units().network
    for share in (1.5, -0.1):
        path = tmp_path / f"share{share}.npz"
        TimeSensitivityModel(network, 0.7, 0.5, frozenset(), {}, _words(), share).save(path)
        with pytest.raises(ValueError, match="unreadable.*share"):
            TimeSensitivityModel.load(path)
