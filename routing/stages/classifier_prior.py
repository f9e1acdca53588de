"""Training points for the exemplar classifier beyond the exemplars: real requests.

The encyclopedia route's exemplars are sentences written for it and quiz questions.
Questions people type into a search box ("who sang the song that opens the film",
"when did the bridge open") sit apart from both, and a classifier that learnt from the
exemplars alone gives many of them to `none` or to the web. This prior holds where such
questions lie in embedding space: the k-means centroids of the questions of SituatedQA's
train split whose answer does not change with time, embedded by the bundled model, each
weighed by how many questions it stands for. The classifier trains on them beside the
label's exemplars, together weighing `share` times what those exemplars weigh.

A second prior does the same for `none` with requests to a service nobody here offers
(Banking77's banking requests: "my card was declined", "how do I top up"), which the
`none` exemplars, a few sentences per kind, cover too thinly to keep them from the nearest
encyclopedia or web exemplar.

Centroids, not questions: SituatedQA states no licence, so none of its rows ships; each
centroid is the mean of about twenty questions' embeddings. Refitted by `search fit
--shipped --situatedqa DIR` (routing/fitting/prior_fit.py).

A prior means something only in the embedding space it was made in: the artefact keeps
one probe sentence's embedding, and a model that embeds the probe differently (a
configured `routing.semantic.model_path`) does not get the prior.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from routing.stages.arrays_file import load_arrays, save_arrays

Shipped = Literal["shipped"]
SHIPPED: Shipped = "shipped"  # "the prior as shipped", where None means "no prior"

ARTEFACT = Path(__file__).resolve().parents[1] / "fitted" / "classifier_prior.npz"
UNSERVED_ARTEFACT = ARTEFACT.with_name("classifier_prior_none.npz")
# The requests the `none` prior is made from (committed: Banking77's banking requests).
UNSERVED_ROWS = Path(__file__).resolve().parents[1] / "fit_data" / "staged" / "banking77.jsonl"
SHIPPED_ARTEFACTS = (ARTEFACT, UNSERVED_ARTEFACT)
PROBE = "who wrote the novel that the film was based on"
SAME_MODEL = 0.999  # the probe's cosine similarity across runs of one model is ~1.0


@dataclass(frozen=True, slots=True)
class ClassifierPrior:
    """Weighted points of one label, for the exemplar classifier's training."""

    label: str
    centroids: np.ndarray  # (k, dimension), means of unit vectors (not renormalised)
    counts: np.ndarray  # (k,) how many questions each centroid stands for
    share: float  # the points' total weight, as a multiple of the label's exemplars'
    probe_vector: np.ndarray  # PROBE as the model that made the centroids embeds it
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def dimension(self) -> int:
        return int(self.centroids.shape[1])

    def made_by(self, probe_vector: np.ndarray) -> bool:
        """Whether a model that embeds PROBE as `probe_vector` is the one that made it."""
        if probe_vector.shape != self.probe_vector.shape:
            return False
        return float(np.dot(probe_vector, self.probe_vector)) >= SAME_MODEL

    def same_as(self, other: ClassifierPrior) -> bool:
        """Whether `other` holds the same points (to float noise across machines)."""
        return (
            self.label == other.label
            and self.share == other.share
            and self.centroids.shape == other.centroids.shape
            and np.array_equal(self.counts, other.counts)
            and np.allclose(self.centroids, other.centroids, atol=1e-4)
            and np.allclose(self.probe_vector, other.probe_vector, atol=1e-4)
        )

    def save(self, path: Path = ARTEFACT) -> None:
        arrays = {
            "centroids": self.centroids.astype(np.float32),
            "counts": self.counts.astype(np.int32),
            "probe_vector": self.probe_vector.astype(np.float32),
        }
        save_arrays(path, arrays, {"label": self.label, "share": self.share, "report": self.report})

    @classmethod
    def load(cls, path: Path) -> ClassifierPrior:
        """The prior at `path`; ValueError naming what is wrong with a malformed file."""
        kinds = {"centroids": np.float32, "counts": np.float64, "probe_vector": np.float32}
        arrays, meta = load_arrays(path, "classifier prior", kinds)
        centroids, counts, probe = arrays["centroids"], arrays["counts"], arrays["probe_vector"]
        if centroids.ndim != 2 or counts.shape != (centroids.shape[0],) or not len(counts):
            raise ValueError(f"classifier prior {path}: one count per centroid expected")
        if probe.shape != (centroids.shape[1],) or (counts <= 0).any():
            raise ValueError(f"classifier prior {path}: probe or counts malformed")
        share = float(meta.get("share", 0.0))
        if not isinstance(meta.get("label"), str) or not 0.0 < share <= 10.0:
            raise ValueError(f"classifier prior {path}: label or share malformed")
        return cls(meta["label"], centroids, counts, share, probe, dict(meta.get("report", {})))


def unserved_texts(path: Path = UNSERVED_ROWS) -> list[str]:
    """The requests of a staged `none` corpus (JSONL rows with `text` and `route`); none
    when the file is not there (an install without the repository's fit data)."""
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [row["text"] for row in rows if row.get("route") == "none"]


@lru_cache(maxsize=4)
def load_prior(path: str | None = None) -> ClassifierPrior | None:
    """The shipped prior (or the one at `path`), read once per process; None without one."""
    target = Path(path) if path else ARTEFACT
    if not target.is_file():
        return None
    return ClassifierPrior.load(target)


def load_priors() -> tuple[ClassifierPrior, ...]:
    """The shipped priors that are present, one per label, read once per process."""
    priors = (load_prior(str(path)) for path in SHIPPED_ARTEFACTS)
    return tuple(prior for prior in priors if prior is not None)
