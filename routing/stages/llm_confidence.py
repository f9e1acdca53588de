"""The LLM stage's confidence: the probability the server's token log-probabilities give the
route the model named, calibrated on labelled utterances.

The stage asks for `logprobs` (with `top_logprobs` alternatives at each answer token), as
the OpenAI chat-completions API documents and llama.cpp's and llama-cpp-python's servers
serve (`choices[0].logprobs.content[]`: `token`, `logprob`, `top_logprobs[]`).

The method, on the answer's tokens:

1. The route's name is found in the text the tokens spell (the `"source"` value of the
   JSON answer); the tokens overlapping it are the name's tokens (the first may carry the
   opening quote, the last the closing one). `route_logprob` is the sum of their
   log-probabilities, as the server gave them.
2. Those are the model's free distribution (llama-cpp-python reports the logits before its
   grammar masks them: the `{` the grammar forces can be at -6). So at each name token the
   alternatives are restricted to those that still spell one of the candidates (the
   routes and "none"), as the constraint does, and renormalised. An alternative that
   spells another candidate takes its share of the probability still undecided there, to
   that candidate (split evenly when it spells several); the named route keeps what
   survives its last token. A candidate still possible at a token that no alternative
   shown spells ranks below all of them: it is given the least of them, the most it can
   have (so the named route's share is a lower bound where the alternatives hide the
   other routes, as a 270M model's top 10 mostly do: it ranks `https` above any route).
   The shares sum to 1 over the candidates. At a token with no alternatives shown (a
   server that sends `top_logprobs: []`), the token's own probability is all there is.
3. That raw probability goes through the model's calibration, a monotone map fitted on
   held-out labelled utterances routed by the real model (`bench/llm_calibration.py`,
   stored in routing/fitted/llm_calibration.json by model file name): Platt scaling,
   sigmoid(a * logit(p) + b) with a > 0. A model without an entry keeps the raw
   probability, and the event says `calibrated: false`.

A server that sends no logprobs, or logprobs that are malformed or do not spell the
answer, gives no measurement: the confidence is then `UNMEASURED`, a stated value, not a
calibrated one (`confidence_source: "none"`, `calibrated: false`, and why).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from routing.stages.confidence import Ranked

ARTEFACT = Path(__file__).resolve().parents[1] / "fitted" / "llm_calibration.json"
# Without logprobs nothing is measured. Stated just above the fitted min_confidence (0.55),
# so such a server's answer still decides under the default threshold, and a stricter
# threshold makes it pass on: a guess, marked uncalibrated, never a measurement.
UNMEASURED = 0.6
_VALUE = re.compile(r'"(?:source|route)"\s*:\s*"([^"]*)"', re.IGNORECASE)
_CLIP = 1e-6


@dataclass(frozen=True, slots=True)
class Measured:
    """What the logprobs say: each candidate's probability and the name's own log-prob."""

    probabilities: dict[str, float]  # the named route's first; sums to 1
    route_logprob: float


class Unmeasured(ValueError):
    """The logprobs give no probability of the answer; the message says why."""


def _tokens(logprobs: Any) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """(token, logprob, [(alternative, logprob)]) per token; Unmeasured if malformed."""
    if logprobs is None:
        raise Unmeasured("the server sent no logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content:
        raise Unmeasured("malformed logprobs: no content list")
    found = []
    for entry in content:
        if not isinstance(entry, dict):
            raise Unmeasured("malformed logprobs: a token entry is not an object")
        token, logprob = entry.get("token"), _logprob(entry.get("logprob"))
        if not isinstance(token, str) or logprob is None:
            raise Unmeasured("malformed logprobs: a token without text or log-probability")
        alternatives = []
        top = entry.get("top_logprobs") or []
        if not isinstance(top, list):
            raise Unmeasured("malformed logprobs: top_logprobs is not a list")
        for alt in top:
            alt_logprob = _logprob(alt.get("logprob")) if isinstance(alt, dict) else None
            if alt_logprob is None or not isinstance(alt.get("token"), str):
                raise Unmeasured("malformed logprobs: an alternative without text or log-prob")
            alternatives.append((alt["token"], alt_logprob))
        found.append((token, logprob, alternatives))
    return found


def _logprob(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    # -inf is a probability of 0 (a masked token); above 0 is not a log-probability.
    return number if number <= 0.0 and not math.isnan(number) else None


def _spells(text: str, candidates: Sequence[str]) -> list[str]:
    """The candidates `text` (the name so far, maybe with its closing quote) can still be."""
    lowered = text.lower()
    found = []
    for candidate in candidates:
        name = candidate.lower()
        if name.startswith(lowered) or (
            lowered.startswith(name) and lowered[len(name) :].startswith('"')
        ):
            found.append(candidate)
    return found


def measure(logprobs: Any, named: str, candidates: Sequence[str]) -> Measured:
    """The candidates' probabilities from the answer's logprobs (module docstring);
    Unmeasured when the logprobs are absent, malformed or do not spell `named`."""
    tokens = _tokens(logprobs)
    text = "".join(token for token, _, _ in tokens)
    value = _VALUE.search(text)
    if value is None or value.group(1).lower() != named.lower():
        raise Unmeasured("the logprobs do not spell the answer")
    start, end = value.span(1)
    if start == end:
        raise Unmeasured("the logprobs do not spell the answer")
    shares = dict.fromkeys(candidates, 0.0)
    undecided = 1.0  # probability still on the path the named route took
    route_logprob = 0.0
    prefix = ""
    offset = 0
    for token, logprob, alternatives in tokens:
        token_start, offset = offset, offset + len(token)
        if offset <= start or token_start >= end:
            continue  # not a token of the name
        lead = text[token_start:start] if token_start < start else ""
        route_logprob += logprob
        piece = text[max(token_start, start) : min(offset, end)]
        others = [(alt, lp) for alt, lp in alternatives if alt != token]
        if not others:
            # No alternatives shown: the token's own probability, normalised over nothing.
            undecided *= math.exp(logprob)
            prefix += piece
            continue
        allowed: list[tuple[float, list[str]]] = []
        for alt, lp in others:
            spelt = _spells(prefix + alt[len(lead) :], candidates) if alt.startswith(lead) else []
            if spelt:
                allowed.append((math.exp(lp), spelt))
        seen = {c for _, spelt in allowed for c in spelt}
        seen.update(_spells(prefix + piece, candidates))
        # A candidate still possible here that no alternative spells ranks below every one
        # shown: it is given the least of them, the most it can have.
        floor = math.exp(min(lp for _, lp in others))
        allowed += [(floor, [c]) for c in _spells(prefix, candidates) if c not in seen]
        chosen = math.exp(logprob)
        total = chosen + sum(weight for weight, _ in allowed)
        if chosen <= 0.0:
            raise Unmeasured("the logprobs give the answer no probability")
        for weight, spelt in allowed:
            for candidate in spelt:
                shares[candidate] += undecided * weight / total / len(spelt)
        undecided *= chosen / total
        prefix += piece
    shares[named] += undecided
    ordered = {named: shares.pop(named)}
    ordered.update(sorted(shares.items(), key=lambda item: -item[1]))
    return Measured(ordered, route_logprob)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Platt scaling of the raw probability: sigmoid(a * logit(p) + b), a > 0 (monotone)."""

    a: float
    b: float
    name: str

    def __call__(self, p: float) -> float:
        p = min(max(p, _CLIP), 1.0 - _CLIP)
        z = self.a * math.log(p / (1.0 - p)) + self.b
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


@lru_cache(maxsize=4)
def _artefact(path: str) -> Mapping[str, Any]:
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except FileNotFoundError:
        return {}
    models = data.get("models", {}) if isinstance(data, dict) else {}
    return models if isinstance(models, dict) else {}


def calibration_for(model: str, path: Path = ARTEFACT) -> Calibration | None:
    """The fitted map for `model` (its file name, that name without `.gguf`, or an alias
    the entry lists), None when the artefact has none."""
    for key, entry in _artefact(str(path)).items():
        names = {key, key.removesuffix(".gguf"), *entry.get("aliases", [])}
        if model in names:
            return Calibration(float(entry["a"]), float(entry["b"]), key)
    return None


@dataclass(frozen=True, slots=True)
class Stated:
    """The confidence an answer states, and where it came from (all go on the event)."""

    ranked: Ranked
    source: str  # "logprobs" | "none"
    calibrated: bool
    raw: float | None = None  # the probability before calibration
    route_logprob: float | None = None
    detail: str | None = None  # why nothing was measured

    @property
    def confidence(self) -> float:
        return self.ranked.confidence

    def fields(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "confidence": round(self.confidence, 4),
            "candidates": self.ranked.candidates(len(self.ranked.routes)),
            "confidence_source": self.source,
            "calibrated": self.calibrated,
        }
        if self.raw is not None:
            shown["raw_confidence"] = round(self.raw, 4)
        if self.route_logprob is not None:
            shown["route_logprob"] = round(self.route_logprob, 4)
        if self.detail is not None:
            shown["confidence_detail"] = self.detail
        return shown


def state(
    logprobs: Any,
    named: str,
    candidates: Sequence[str],
    calibration: Calibration | None,
) -> Stated:
    """The confidence of `named` (a route or "none"): measured and calibrated when it can be."""
    try:
        measured = measure(logprobs, named, candidates)
    except Unmeasured as exc:
        return Stated(Ranked(((named, UNMEASURED),)), "none", False, detail=str(exc))
    raw = measured.probabilities
    winner = calibration(raw[named]) if calibration else raw[named]
    # The map is fitted on the named route's probability; the others share what it leaves
    # in the proportions the logprobs gave them, so the candidates still sum to 1.
    rest = 1.0 - raw[named]
    scale = (1.0 - winner) / rest if rest > 0 else 0.0
    routes = ((named, winner), *((c, p * scale) for c, p in raw.items() if c != named))
    return Stated(
        Ranked(routes), "logprobs", calibration is not None, raw[named], measured.route_logprob
    )
