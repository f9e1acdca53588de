"""Does a question's answer change with time? A fitted reading beside the cue words.

The cue words (routing/language/time_sensitive.py) name what they saw ("the current"),
but many questions whose answer moves say no such word ("who won the cup", "when is the
next episode out"), and some cue kinds also fire on fixed facts ("the most gold", "how
many legs do ants have"). This model reads the question twice, both fitted by `search
fit --shipped --situatedqa DIR` (routing/fitting/time_fit.py) on questions labelled by
whether their answer depends on when they are asked:
- its embedding, the same vector the semantic stage compares with exemplars, through a
  network of one hidden layer. Why a hidden layer: a plane through the embedding (a
  logistic regression) told questions whose answer changes from fixed ones less often,
  and stated its verdict more surely than it was right (bench/README.md,
  "Time-sensitivity with a hidden layer");
- its words and word pairs, through a logistic regression (`WordModel`). A sentence
  embedding says mostly what a question is about, while whether its answer moves is often
  said by a word or two ("won the", "last", "how many ... has"): read beside the network
  (their probabilities averaged, `word_share` of it the words'), the two told the
  questions apart more often in cross-validation than the network alone (bench/README.md,
  "Time-sensitivity read from words too").

A question is time-sensitive when
- a cue of a kind the fit found reliable on its own said so, or
- a cue of another kind said so and the model agrees (probability >= `confirm`), or
- the model alone is sure (probability >= `threshold`).
Both numbers and the kinds that need confirming are fitted, not set by hand; the
artefact says what they measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from routing.language.time_sensitive import TimeCue
from routing.stages.arrays_file import load_arrays, save_arrays
from routing.stages.word_terms import TermReader, mix

ARTEFACT = Path(__file__).resolve().parents[1] / "fitted" / "time_sensitive.npz"
_GELU_SCALE = math.sqrt(2.0 / math.pi)
MODEL_KIND = "model"  # the event's `kind` when the model alone said so


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a question is time-sensitive, and what said so."""

    sensitive: bool
    probability: float | None  # the model's; None when the cue words alone were read
    cue: TimeCue | None

    @property
    def kind(self) -> str:
        """The cue's kind, or "model" when the model alone said so."""
        return self.cue.kind if self.cue is not None and self.sensitive else MODEL_KIND


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU in its tanh form, as the fit trains with it (torch's `approximate="tanh"`)."""
    return 0.5 * x * (1.0 + np.tanh(_GELU_SCALE * (x + 0.044715 * x**3)))


@dataclass(frozen=True, slots=True)
class Network:
    """One hidden layer over the normalised question embedding (numpy, float32)."""

    hidden: np.ndarray  # (dimension, units)
    hidden_bias: np.ndarray  # (units,)
    weights: np.ndarray  # (units,)
    bias: float

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Of one vector (as a 0-d array), or of each row of a matrix."""
        units = gelu(np.asarray(x, dtype=np.float32) @ self.hidden + self.hidden_bias)
        return 1.0 / (1.0 + np.exp(-np.clip(units @ self.weights + self.bias, -50.0, 50.0)))

    @property
    def dimension(self) -> int:
        return int(self.hidden.shape[0])


@dataclass(frozen=True, slots=True)
class WordModel:
    """A logistic regression over a question's TF-IDF words and word pairs
    (routing/stages/word_terms.py). The vocabulary is terms found in several training
    questions, never a question."""

    reader: TermReader
    weights: np.ndarray  # (terms,)
    bias: float

    @classmethod
    def of(
        cls, terms: Sequence[str], idf: np.ndarray, weights: np.ndarray, bias: float
    ) -> WordModel:
        """From the terms in column order; ValueError when the arrays do not fit them."""
        if weights.shape != (len(terms),):
            raise ValueError(f"{len(terms)} terms but {weights.shape} weights")
        return cls(TermReader.of(terms, idf), weights.astype(np.float32), float(bias))

    @property
    def vocabulary(self) -> Mapping[str, int]:
        return self.reader.vocabulary

    @property
    def idf(self) -> np.ndarray:
        return self.reader.idf

    @property
    def terms(self) -> list[str]:
        return self.reader.terms

    def probability(self, text: str) -> float:
        logit = self.bias + float(self.reader.dot(text, self.weights))
        return 1.0 / (1.0 + math.exp(-min(max(logit, -50.0), 50.0)))


@dataclass(frozen=True, slots=True)
class TimeSensitivityModel:
    """The fitted network and its decision rule."""

    network: Network
    threshold: float  # the model alone says so at or above this
    confirm: float  # a cue that needs confirming holds at or above this
    confirmed_kinds: frozenset[str]  # cue kinds that need the model to agree
    report: Mapping[str, Any] = field(default_factory=dict)
    words: WordModel | None = None
    word_share: float = 0.0  # the words' part of the probability (with `words`)

    def probability(self, vector: np.ndarray, text: str) -> float:
        """That the answer to `text` (whose embedding is `vector`) changes with time."""
        network = float(self.network.probabilities(vector))
        if self.words is None:
            return network
        return float(mix(network, self.words.probability(text), self.word_share))

    def judge(self, cue: TimeCue | None, probability: float) -> Verdict:
        if cue is not None and (
            cue.kind not in self.confirmed_kinds or probability >= self.confirm
        ):
            return Verdict(True, probability, cue)
        return Verdict(probability >= self.threshold, probability, cue)

    @classmethod
    def rule(
        cls, threshold: float, confirm: float, confirmed_kinds: frozenset[str]
    ) -> TimeSensitivityModel:
        """The decision rule alone, with no layers worth reading: to weigh a threshold."""
        empty = np.zeros((1, 1), dtype=np.float32)
        return cls(Network(empty, empty[0], empty[0], 0.0), threshold, confirm, confirmed_kinds)

    def save(self, path: Path = ARTEFACT) -> None:
        network = self.network
        arrays = {
            "hidden": network.hidden.astype(np.float32),
            "hidden_bias": network.hidden_bias.astype(np.float32),
            "weights": network.weights.astype(np.float32),
        }
        meta: dict[str, Any] = {
            "bias": network.bias,
            "threshold": self.threshold,
            "confirm": self.confirm,
            "confirmed_kinds": sorted(self.confirmed_kinds),
            "report": dict(self.report),
        }
        if self.words is not None:
            arrays["word_idf"] = self.words.idf
            arrays["word_weights"] = self.words.weights
            meta["words"] = {
                "terms": self.words.terms,
                "bias": self.words.bias,
                "share": self.word_share,
            }
        save_arrays(path, arrays, meta)

    @classmethod
    def load(cls, path: Path) -> TimeSensitivityModel:
        """The model at `path`; ValueError naming what is wrong with a malformed file."""
        what = "time-sensitivity model"
        layers = {"hidden": np.float32, "hidden_bias": np.float32, "weights": np.float32}
        arrays, meta = load_arrays(path, what, layers)
        hidden, hidden_bias, weights = arrays["hidden"], arrays["hidden_bias"], arrays["weights"]
        units = hidden.shape[1] if hidden.ndim == 2 else -1
        if hidden_bias.shape != (units,) or weights.shape != (units,):
            raise ValueError(f"{what} {path}: its layers do not fit together")
        try:
            words, share = _words(path, what, meta.get("words"))
            return cls(
                Network(hidden, hidden_bias, weights, float(meta["bias"])),
                float(meta["threshold"]),
                float(meta["confirm"]),
                frozenset(meta["confirmed_kinds"]),
                dict(meta.get("report", {})),
                words,
                share,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{what} {path}: unreadable ({exc})") from exc

    @property
    def dimension(self) -> int:
        return self.network.dimension


def _words(path: Path, what: str, meta: Any) -> tuple[WordModel | None, float]:
    """The word model a file holds beside the network (None in a file without one)."""
    if meta is None:
        return None, 0.0
    arrays, _ = load_arrays(path, what, {"word_idf": np.float32, "word_weights": np.float32})
    share = float(meta["share"])
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the words' share {share} is not between 0 and 1")
    terms = [str(term) for term in meta["terms"]]
    model = WordModel.of(terms, arrays["word_idf"], arrays["word_weights"], float(meta["bias"]))
    return model, share


@lru_cache(maxsize=2)
def load_time_model(path: str | None = None) -> TimeSensitivityModel | None:
    """The shipped artefact (or `path`), read once per process; None when there is none."""
    target = Path(path) if path else ARTEFACT
    if not target.is_file():
        return None
    return TimeSensitivityModel.load(target)
