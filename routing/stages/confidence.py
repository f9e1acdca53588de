"""One calibrated confidence for every routing decision, from weights `search fit` learnt.

A stage describes each candidate route (and `none`, "no source serves this") by a few
numbers: its keyword score, whether it is the keyword rules' unique best, the cosine
similarity of its nearest exemplar (also measured against the query's similarity to every
exemplar, so a long question, near nothing in absolute terms, can still stand out near
one route), how many of the query's nearest exemplars are the route's, the exemplar
classifier's log-probability, and whether it is `none` (and, for `none`, whether the query
asks about the world rather than the asker's own affairs). The
confidence of a route is a softmax over the candidates of one weighted sum of those
numbers (a conditional logit). The weights are shared by every route, so they
hold for a route the fit never saw (a user's `recipes`), and they are fitted by maximum
likelihood on labelled utterances, a few of whose labels it takes to be wrong
(routing/fitting/fit.py), which makes the softmax a calibrated
probability: of the decisions made at 0.8, about 80% are right on data the fit did not see
(`search fit` prints the calibration error it measured by leaving each corpus out).

Two models: `keyword` reads only the keyword numbers (the keyword stage runs before any
embedding), `full` reads all of them (the semantic stage). A stage decides when its winner's
confidence clears `routing.min_confidence` and declines, saying so, when it does not.

An LLM's answer has its own measure, the probability its server's logprobs give the route
it named, calibrated per model (routing/stages/llm_confidence.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

NONE = "none"
ARTEFACT = Path(__file__).resolve().parents[1] / "fitted" / "confidence.json"
KEYWORD_FEATURES = (
    "keyword",
    "keyword_best",
    "keyword_lead",
    "none",
    "none_keyword",
    "none_question",
)
FULL_FEATURES = (
    "keyword",
    "keyword_best",
    "keyword_lead",
    "similarity",
    "similarity_lead",
    "similarity_z",
    "similarity_z_lead",
    "nearest_share",
    "log_probability",
    "none",
    "none_keyword",
    "none_similarity",
    "none_question",
)
LOG_PROBABILITY_FLOOR = -8.0  # a classifier's 1e-9 should not outweigh everything else
CANDIDATES_SHOWN = 3


@dataclass(frozen=True, slots=True)
class Ranked:
    """Candidate routes with their confidence, best first (sums to 1 over all of them)."""

    routes: tuple[tuple[str, float], ...]

    @property
    def winner(self) -> str:
        return self.routes[0][0]

    @property
    def confidence(self) -> float:
        return self.routes[0][1]

    def candidates(self, shown: int = CANDIDATES_SHOWN) -> list[dict[str, Any]]:
        """For the event: the best routes, the winner first, each with its margin to it (of
        the rounded figures, so the event's own numbers add up)."""
        top = round(self.confidence, 4)
        return [
            {"route": route, "confidence": round(p, 4), "margin": round(top - round(p, 4), 4)}
            for route, p in self.routes[:shown]
        ]

    def candidates_for(self, route: str, shown: int = CANDIDATES_SHOWN) -> list[dict[str, Any]]:
        """For a decision that did not win on confidence (the default): `route` first, as
        decided, then the best of the others with their margin to it, negative when they
        had more ("web had 0.38, the default kiwix 0.05")."""
        mine = dict(self.routes).get(route, 0.0)
        chosen = Ranked(((route, mine), *((r, p) for r, p in self.routes if r != route)))
        return chosen.candidates(shown)


def single(route: str, confidence: float) -> Ranked:
    """A decision with one candidate (a cache hit, an LLM answer, a session follow-up)."""
    return Ranked(((route, confidence),))


# The least standard deviation a similarity is measured against: about the smallest a
# query shows over the shipped exemplars (1st percentile 0.061). Over a handful of
# exemplars, all far from the query, a 0.05 difference would otherwise read as decisive.
SPREAD_FLOOR = 0.06


# How many of the query's nearest exemplars `Spread.nearest` counts.
NEAREST_COUNTED = 5


@dataclass(frozen=True, slots=True)
class Spread:
    """The query's similarity to every exemplar: its mean and standard deviation, and per
    label how much of its NEAREST_COUNTED nearest exemplars are that label's, out of as
    many as the label has (one stray exemplar near the query is the nearest, not the
    neighbourhood; a route of two exemplars, both nearest, holds all it can)."""

    mean: float
    std: float
    nearest: Mapping[str, float] = field(default_factory=dict)

    def standardise(self, similarity: float) -> float:
        return (similarity - self.mean) / max(self.std, SPREAD_FLOOR)


def features(
    labels: Sequence[str],
    keyword: Mapping[str, float] | None,
    similarity: Mapping[str, float] | None = None,
    probability: Mapping[str, float] | None = None,
    spread: Spread | None = None,
    question: bool = False,
) -> np.ndarray:
    """One row per label: the numbers of FULL_FEATURES (or KEYWORD_FEATURES when no
    similarity is given). Without `spread` the standardised similarities are 0 (unknown).
    `question`: the query asks about the world (routing/language/sentences.py,
    `asks_about_the_world`), which the fit weighs for `none` alone: a topic word
    ("song", "calendar") in such a question says less that no source serves it."""
    scores = dict(keyword or {})
    sims = dict(similarity or {})
    rows = []
    for label in labels:
        own = scores.get(label, 0.0)
        rival = max((v for k, v in scores.items() if k != label), default=0.0)
        is_none = float(label == NONE)
        # The lead over the best other route, on a log scale: "lights" vs nothing is clearer
        # than "lights" vs "weather".
        lead = math.log1p(own) - math.log1p(rival)
        row = [math.log1p(own), float(own > 0 and lead > 0), lead]
        if similarity is not None:
            p = (probability or {}).get(label)
            sim = float(sims.get(label, 0.0))
            sim_rival = max((v for k, v in sims.items() if k != label), default=0.0)
            z = spread.standardise(sim) if spread else 0.0
            z_lead = z - spread.standardise(sim_rival) if spread else 0.0
            row += [
                sim,
                sim - sim_rival,
                z,
                z_lead,
                spread.nearest.get(label, 0.0) if spread else 0.0,
                max(math.log(p), LOG_PROBABILITY_FLOOR) if p else LOG_PROBABILITY_FLOOR,
            ]
            row += [is_none, is_none * math.log1p(own), is_none * sim, is_none * question]
        else:
            row += [is_none, is_none * math.log1p(own), is_none * question]
        rows.append(row)
    return np.asarray(rows, dtype=np.float64)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


@dataclass(frozen=True, slots=True)
class ConfidenceModel:
    """The fitted weights (one vector per model) and what the fit measured."""

    keyword_weights: np.ndarray
    full_weights: np.ndarray
    min_confidence: float  # the threshold the fit measured as best (config default)
    report: Mapping[str, Any]
    # Which artefact this is, as the chain names it (`fit` on intent events).
    name: str = "shipped"

    def rank(self, labels: Sequence[str], rows: np.ndarray, weights: np.ndarray) -> Ranked:
        p = softmax(rows @ weights)
        order = np.argsort(-p, kind="stable")
        return Ranked(tuple((labels[i], float(p[i])) for i in order))

    def keyword(
        self, labels: Sequence[str], scores: Mapping[str, float], question: bool = False
    ) -> Ranked:
        return self.rank(labels, features(labels, scores, question=question), self.keyword_weights)

    def full(
        self,
        labels: Sequence[str],
        scores: Mapping[str, float] | None,
        similarity: Mapping[str, float],
        probability: Mapping[str, float],
        spread: Spread | None,
        question: bool = False,
    ) -> Ranked:
        """`spread`: the query's similarity to every exemplar (None: no exemplars)."""
        rows = features(labels, scores, similarity, probability, spread, question)
        return self.rank(labels, rows, self.full_weights)

    def to_json(self) -> dict[str, Any]:
        return {
            "keyword": dict(zip(KEYWORD_FEATURES, map(float, self.keyword_weights), strict=True)),
            "full": dict(zip(FULL_FEATURES, map(float, self.full_weights), strict=True)),
            "min_confidence": self.min_confidence,
            "report": dict(self.report),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConfidenceModel:
        """A feature an older fit did not know weighs 0: its model, exactly as fitted."""
        return cls(
            np.asarray([data["keyword"].get(f, 0.0) for f in KEYWORD_FEATURES], dtype=np.float64),
            np.asarray([data["full"].get(f, 0.0) for f in FULL_FEATURES], dtype=np.float64),
            float(data["min_confidence"]),
            dict(data.get("report", {})),
        )


@lru_cache(maxsize=4)
def load_model(path: str | None = None) -> ConfidenceModel:
    """The shipped artefact (or `path`), read once per process."""
    model = ConfidenceModel.from_json(json.loads(Path(path or ARTEFACT).read_text("utf-8")))
    return model if path is None else replace(model, name=f"file:{Path(path).name}")


def declined(stage: str, ranked: Ranked, threshold: float) -> str:
    """What a declining stage says: "semantic 0.41 < 0.55": the threshold as it was set
    ("keyword 0.993 < 0.999", not "0.99 < 1.00"), and more digits where two would read as
    equal ("semantic 0.5496 < 0.5500")."""
    digits = 2
    while digits < 4 and round(threshold, digits) != threshold:
        digits += 1
    while digits < 6 and round(ranked.confidence, digits) >= round(threshold, digits):
        digits += 1
    return f"{stage} {ranked.confidence:.{digits}f} < {threshold:.{digits}f}"
