"""The exemplar classifier's word reading (routing/stages/word_classifier.py): what it
learns from the exemplars' words, that numpy reads what scikit-learn fitted, how it is
mixed with the embedding's reading, and that the shipped stage trains it."""

from __future__ import annotations

import numpy as np
import pytest

from routing.stages.classifier_prior import unserved_texts
from routing.stages.semantic import ExemplarIndex, LabelClassifier, word_classifier
from routing.stages.word_classifier import WORD_SHARE, WordClassifier, mixed

TEXTS = {
    "ha": ["turn on the kitchen lights", "switch off the fan", "turn the heating up"],
    "kiwix": ["who wrote hamlet", "who painted the mona lisa", "what is a volcano"],
    "none": ["set an alarm for six", "remind me to call mum", "set a timer"],
}


def test_a_query_goes_to_the_label_whose_words_it_shares() -> None:
    words = WordClassifier.fit(TEXTS)
    assert words.labels == ("ha", "kiwix", "none")
    for text, label in (
        ("turn on the lights", "ha"),
        ("who wrote the odyssey", "kiwix"),
        ("set an alarm", "none"),
    ):
        found = words.probabilities(text)
        assert sum(found.values()) == pytest.approx(1.0)
        assert max(found, key=found.__getitem__) == label, (text, found)
    # no known word: the biases alone, nobody's in particular
    unknown = words.probabilities("zzz qqq")
    assert max(unknown.values()) < 0.5


def test_numpy_reads_what_scikit_learn_fitted_weights_included() -> None:
    """The probabilities are scikit-learn's, the extra rows weighed as documented: each
    label the same in all, the extra rows `share` of their label's exemplars."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    extra = ["my card was declined", "top up my account", "where is my card"]
    words = WordClassifier.fit(TEXTS, {"none": [(extra, 0.5)]})
    rows = [*TEXTS["ha"], *TEXTS["kiwix"], *TEXTS["none"], *extra]
    y = np.asarray([0] * 3 + [1] * 3 + [2] * 6)
    w = np.asarray([1.0] * 9 + [0.5] * 3)  # 0.5 x 3 exemplars over 3 rows
    w = w / np.bincount(y, weights=w)[y] * len(y) / 3
    vectoriser = TfidfVectorizer(
        ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\b\w+\b"
    )
    regression = LogisticRegression(C=4.0, max_iter=5000)
    regression.fit(vectoriser.fit_transform(rows), y, sample_weight=w)
    for text in ("my card", "turn on the fan, my card", "who wrote this", "nothing known"):
        expected = regression.predict_proba(vectoriser.transform([text]))[0]
        found = words.probabilities(text)
        assert [found[label] for label in words.labels] == pytest.approx(expected, abs=1e-5)
    assert (
        words.probabilities("my card")["none"]
        > WordClassifier.fit(TEXTS).probabilities("my card")["none"]
    )


def test_two_labels_read_as_one_logit() -> None:
    two = {"ha": TEXTS["ha"], "kiwix": TEXTS["kiwix"]}
    words = WordClassifier.fit(two)
    found = words.probabilities("turn the lights on")
    assert found["ha"] > 0.5 > found["kiwix"] and sum(found.values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two labels"):
        WordClassifier.fit({"ha": TEXTS["ha"], "kiwix": []})


def test_the_label_classifier_mixes_the_words_in_given_the_text() -> None:
    groups = {label: TEXTS[label] for label in ("ha", "kiwix", "none")}
    draw = np.random.default_rng(3)
    vectors = draw.normal(size=(9, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = ExemplarIndex(groups, vectors)
    words = WordClassifier.fit(groups)
    plain = LabelClassifier(index)
    both = LabelClassifier(index, words=words)
    query, text = vectors[0], "who wrote hamlet"
    assert both.probabilities(query) == pytest.approx(plain.probabilities(query))  # no text
    expected = {
        label: (1 - WORD_SHARE) * p + WORD_SHARE * words.probabilities(text)[label]
        for label, p in plain.probabilities(query).items()
    }
    assert both.probabilities(query, text) == pytest.approx(expected)
    assert mixed(plain.probabilities(query), words.probabilities(text)) == pytest.approx(expected)
    other = WordClassifier.fit({"ha": TEXTS["ha"], "kiwix": TEXTS["kiwix"]})
    with pytest.raises(ValueError, match="labels"):
        LabelClassifier(index, words=other)


def test_the_none_prior_brings_its_requests_words() -> None:
    """With the `none` prior in use, the word reading learns from the committed Banking77
    requests too; without it, from the exemplars alone."""
    from routing.stages.classifier_prior import load_priors

    priors = [p for p in load_priors() if p.label == "none"]
    assert priors and len(unserved_texts()) >= 300
    groups = dict(TEXTS)
    with_requests = word_classifier(groups, priors)
    alone = word_classifier(groups, [])
    assert with_requests is not None and alone is not None
    banking = "i was charged twice for my card payment"
    assert with_requests.probabilities(banking)["none"] > alone.probabilities(banking)["none"]
    assert word_classifier({"ha": TEXTS["ha"]}, priors) is None  # one label: no classifier


async def test_the_started_stage_reads_words_and_the_chain_shows_the_mix() -> None:
    """The shipped stage trains the word reading at start-up, and the classifier
    probability an event shows is the mix of the two readings."""
    from pathlib import Path

    from search.config import load_config
    from search.service import Service
    from search.traces.records import NullTraceSink

    root = Path(__file__).resolve().parents[3]
    service = Service(load_config(root / "config.yaml"), traces=NullTraceSink(), household=None)
    await service.start(sources=False)
    try:
        stage = service.resolver.stage("intent_semantic")
        classifier = getattr(stage, "classifier", None)
        assert classifier is not None and classifier.words is not None
        assert list(classifier.words.labels) == classifier.labels
        query = "when did the bridge open"
        outcome = await service.search(query, dry_run=True, explain=True)
        (event,) = [e for e in outcome.chain if e["step"] == "intent_semantic"]
        vector = stage.embedder.encode_one(query)  # type: ignore[union-attr]
        both = classifier.probabilities(vector, query)
        for candidate in event["candidates"]:
            assert candidate["classifier"] == pytest.approx(both[candidate["route"]], abs=1e-4)
        assert both != pytest.approx(classifier.probabilities(vector))  # the words count
    finally:
        await service.aclose()
