"""The exemplar classifier's prior: its file, its model check, and what it does to training."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from routing.config import SemanticConfig
from routing.stages.classifier_prior import PROBE, ClassifierPrior, load_prior, load_priors
from routing.stages.embedder import load_embedder
from routing.stages.semantic import ExemplarIndex, LabelClassifier, SemanticStage


def unit(vector: np.ndarray) -> np.ndarray:
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def prior(label: str = "kiwix", dimension: int = 4, share: float = 1.0) -> ClassifierPrior:
    centroids = np.asarray([[1.0, 0.0, 0.0, 0.0][:dimension], [0.6, 0.8, 0.0, 0.0][:dimension]])
    return ClassifierPrior(
        label,
        centroids.astype(np.float32),
        np.asarray([30.0, 10.0]),
        share,
        unit(np.ones(dimension)),
        {"source": "test"},
    )


def test_a_prior_survives_its_file(tmp_path: Path) -> None:
    path = tmp_path / "prior.npz"
    prior(share=0.5).save(path)
    loaded = ClassifierPrior.load(path)
    assert loaded.label == "kiwix" and loaded.share == 0.5 and loaded.report == {"source": "test"}
    assert np.array_equal(loaded.centroids, prior().centroids)
    assert loaded.counts.tolist() == [30.0, 10.0]
    assert np.array_equal(loaded.probe_vector, prior().probe_vector)


@pytest.mark.parametrize(
    "broken",
    [
        {"centroids": np.zeros((2, 4)), "counts": np.ones(3)},  # a count per centroid
        {"counts": np.asarray([1, 0])},  # a centroid for nothing
        {"probe_vector": np.zeros(3)},  # a probe of another dimension
        {"meta": np.frombuffer(b'{"label": "kiwix", "share": 0}', np.uint8)},
        {"meta": np.frombuffer(b"not json", np.uint8)},
    ],
)
def test_a_malformed_prior_is_refused_by_name(tmp_path: Path, broken: dict) -> None:
    path = tmp_path / "prior.npz"
    parts = {
        "centroids": np.zeros((2, 4), np.float32),
        "counts": np.asarray([3, 4]),
        "probe_vector": np.zeros(4, np.float32),
        "meta": np.frombuffer(b'{"label": "kiwix", "share": 1.0}', np.uint8),
        **broken,
    }
    with path.open("wb") as handle:
        np.savez(handle, **parts)
    with pytest.raises(ValueError, match="classifier prior .*prior.npz"):
        ClassifierPrior.load(path)


def test_a_file_that_is_not_a_prior_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "prior.npz"
    path.write_text("centroids")
    with pytest.raises(ValueError, match="unreadable"):
        ClassifierPrior.load(path)
    assert load_prior(str(tmp_path / "absent.npz")) is None


def test_it_belongs_to_the_model_that_embeds_its_probe_the_same_way() -> None:
    made = prior()
    assert made.made_by(made.probe_vector.copy())
    assert not made.made_by(unit(np.asarray([1.0, -1.0, 1.0, -1.0])))
    assert not made.made_by(unit(np.ones(5)))


def test_the_shipped_priors_are_in_the_bundled_models_space() -> None:
    kiwix, unserved = load_priors()
    assert kiwix.label == "kiwix" and kiwix.report["source"] == "situatedqa"
    assert 100 <= len(kiwix.counts) <= 128 and kiwix.counts.min() >= 5
    assert unserved.label == "none" and unserved.report["source"] == "banking77"
    assert 20 <= len(unserved.counts) <= 38 and unserved.counts.min() >= 5
    probe = load_embedder().encode_one(PROBE)
    assert kiwix.made_by(probe) and unserved.made_by(probe)


def three_labels(*none: list[float]) -> ExemplarIndex:
    """kiwix and web exemplars on the third and fourth axes; `none`'s where given."""
    groups = {"kiwix": ["a", "b"], "web": ["c", "d"], "none": ["e", "f"]}
    written = ([0, 0, 1, 0.2], [0, 0.2, 1, 0], [0, 0, 0.2, 1], [0.2, 0, 0, 1])
    vectors = np.asarray([unit(np.asarray(v, dtype=np.float64)) for v in (*written, *none)])
    return ExemplarIndex(groups, vectors)


def test_the_prior_pulls_its_label_towards_its_points_and_no_other() -> None:
    index = three_labels([1, 0, 0, 0.1], [1, 0.1, 0, 0])
    query = unit(np.asarray([0.9, 0.3, 0.0, 0.0]))  # near the prior's points and `none`
    alone = LabelClassifier(index).probabilities(query)
    helped = LabelClassifier(index, priors=[prior()])
    assert helped.prior_used
    assert helped.probabilities(query)["kiwix"] > alone["kiwix"] + 0.1
    elsewhere = LabelClassifier(index, priors=[prior(label="recipes")])
    assert not elsewhere.prior_used
    assert elsewhere.probabilities(query) == pytest.approx(alone)


def test_two_priors_each_pull_their_own_label() -> None:
    """A `none` prior near one query and a `kiwix` prior near another: each query moves
    towards its own prior's label, and both are named in the chain's source."""
    index = three_labels([0.2, 0.2, 1, 1], [0.3, 0, 1, 1])
    towards_kiwix = unit(np.asarray([0.9, 0.3, 0.0, 0.0]))  # the kiwix prior's points
    unserved = ClassifierPrior(
        "none",
        np.asarray([[0.0, 1.0, 0.0, 0.0]], np.float32),
        np.asarray([20.0]),
        1.0,
        unit(np.ones(4)),
        {"source": "requests"},
    )
    towards_none = unit(np.asarray([0.1, 1.0, 0.0, 0.0]))  # the none prior's point
    alone = LabelClassifier(index)
    both = LabelClassifier(index, priors=[prior(), unserved])
    assert both.prior_source == "test+requests"
    assert (
        both.probabilities(towards_none)["none"] > alone.probabilities(towards_none)["none"] + 0.1
    )
    assert (
        both.probabilities(towards_kiwix)["kiwix"]
        > alone.probabilities(towards_kiwix)["kiwix"] + 0.1
    )


def semantic_config(**semantic: bool) -> SemanticConfig:
    return SemanticConfig(**semantic)


async def test_a_prior_made_with_another_model_is_not_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exemplars = {"kiwix": ["who wrote hamlet"], "web": ["latest news"], "none": ["tell a joke"]}
    foreign = ClassifierPrior(
        "kiwix",
        np.ones((1, 384), np.float32) / np.sqrt(384),
        np.asarray([20.0]),
        1.0,
        unit(np.arange(384, dtype=np.float64)),  # no MiniLM embeds the probe like this
    )
    stage = SemanticStage(
        semantic_config(), ["kiwix", "web"], exemplars=exemplars, priors=[foreign]
    )
    with caplog.at_level(logging.WARNING, logger="routing.stages.semantic"):
        await stage.start()
    assert stage.classifier is not None and not stage.classifier.prior_used
    assert "another embedding model" in caplog.text and "'kiwix'" in caplog.text

    _, unserved = load_priors()  # one made elsewhere, one here: only the second trains
    mixed = SemanticStage(
        semantic_config(), ["kiwix", "web"], exemplars=exemplars, priors=[foreign, unserved]
    )
    await mixed.start()
    assert mixed.classifier is not None
    assert [p.label for p in mixed.classifier.priors] == ["none"]

    shipped = SemanticStage(semantic_config(), ["kiwix", "web"], exemplars=exemplars)
    await shipped.start()
    assert shipped.classifier is not None and shipped.classifier.prior_used

    off = SemanticStage(
        semantic_config(classifier_prior=False), ["kiwix", "web"], exemplars=exemplars
    )
    assert off.priors == ()


async def test_the_chain_shows_the_classifiers_say_and_whether_the_prior_trained_it() -> None:
    """With the shipped routes the event names the prior; each candidate shows the
    classifier's probability beside its nearest exemplar, so a decision that went against
    the nearest exemplar ("when did the bridge open": kiwix over a nearer web exemplar)
    can be read from the chain."""
    from search.config import load_config
    from search.service import Service
    from search.traces.records import NullTraceSink

    root = Path(__file__).resolve().parents[3]
    service = Service(load_config(root / "config.yaml"), traces=NullTraceSink(), household=None)
    await service.start(sources=False)
    try:
        outcome = await service.search("when did the bridge open", dry_run=True, explain=True)
    finally:
        await service.aclose()
    (event,) = [e for e in outcome.chain if e["step"] == "intent_semantic"]
    assert event["classifier_prior"] == "situatedqa+banking77"
    said = {c["route"]: c["classifier"] for c in event["candidates"]}
    assert all(0.0 <= p <= 1.0 for p in said.values()) and sum(said.values()) <= 1.0 + 1e-6
    assert event["decision"] == max(said, key=lambda route: said[route])
