"""Does a question's answer change with time? A fitted reading beside the cue words.

The cue words (routing/language/time_sensitive.py) name what they saw ("the current"),
but many questions whose answer moves say no such word ("who won the cup", "when is the
next episode out"), and some cue kinds also fire on fixed facts ("the most gold", "how
many legs do ants have"). This model reads the question's embedding, the same vector the
semantic stage compares with exemplars: a logistic regression fitted by `search fit
--shipped --situatedqa DIR` (routing/fitting/time_fit.py) on questions labelled by
whether their answer depends on when they are asked.

A question is time-sensitive when
- a cue of a kind the fit found reliable on its own said so, or
- a cue of another kind said so and the model agrees (probability >= `confirm`), or
- the model alone is sure (probability >= `threshold`).
Both numbers and the kinds that need confirming are fitted, not set by hand; the
artefact says what they measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from routing.language.time_sensitive import TimeCue

ARTEFACT = Path(__file__).resolve().parents[1] / "fitted" / "time_sensitive.json"
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


@dataclass(frozen=True, slots=True)
class TimeSensitivityModel:
    """Logistic regression over the normalised question embedding, and its decision rule."""

    weights: np.ndarray  # (dimension,)
    bias: float
    threshold: float  # the model alone says so at or above this
    confirm: float  # a cue that needs confirming holds at or above this
    confirmed_kinds: frozenset[str]  # cue kinds that need the model to agree
    report: Mapping[str, Any] = field(default_factory=dict)

    def probability(self, vector: np.ndarray) -> float:
        logit = float(np.dot(vector, self.weights)) + self.bias
        return 1.0 / (1.0 + math.exp(-max(min(logit, 50.0), -50.0)))

    def judge(self, cue: TimeCue | None, probability: float) -> Verdict:
        if cue is not None and (
            cue.kind not in self.confirmed_kinds or probability >= self.confirm
        ):
            return Verdict(True, probability, cue)
        return Verdict(probability >= self.threshold, probability, cue)

    def to_json(self) -> dict[str, Any]:
        return {
            "weights": [round(float(w), 6) for w in self.weights],
            "bias": round(self.bias, 6),
            "threshold": self.threshold,
            "confirm": self.confirm,
            "confirmed_kinds": sorted(self.confirmed_kinds),
            "report": dict(self.report),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TimeSensitivityModel:
        return cls(
            np.asarray(data["weights"], dtype=np.float32),
            float(data["bias"]),
            float(data["threshold"]),
            float(data["confirm"]),
            frozenset(data["confirmed_kinds"]),
            dict(data.get("report", {})),
        )

    @property
    def dimension(self) -> int:
        return int(self.weights.shape[0])


@lru_cache(maxsize=2)
def load_time_model(path: str | None = None) -> TimeSensitivityModel | None:
    """The shipped artefact (or `path`), read once per process; None when there is none."""
    target = Path(path) if path else ARTEFACT
    if not target.is_file():
        return None
    return TimeSensitivityModel.from_json(json.loads(target.read_text("utf-8")))
