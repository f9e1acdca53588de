"""Routing's own settings (`routing:` in config.yaml): stages, routes, the LLM.

The routing layer owns these models and `search.config` composes them into the whole
config, so nothing in `routing/` needs to import the surfaces above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, SecretStr

from routing.stages.route_data import DECIDED_BY_CONFIDENCE, NONE, RouteOverride, Strict
from sources.registry import MAX_ENTRIES, YEAR_S

__all__ = ["LLMConfig", "RoutingConfig", "SemanticConfig", "Strict"]


class LLMConfig(Strict):
    base_url: str = ""
    model: str = ""
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    bias_check: bool = Field(
        default=True,
        description="Once per server, ask for queries with no content ('N/A', '', "
        "'[MASK]'); a route the model names for them is its habit, so that route named for "
        "a real query is not taken (the part ends at the default). A model that reads the "
        "query says 'none' to them and loses nothing.",
    )
    logprobs: bool = Field(
        default=True,
        description="Ask for the answer's token log-probabilities: the stage's confidence "
        "is then the calibrated probability of the route it named "
        "(routing/stages/llm_confidence.py). Off, or from a server that sends none, it is a "
        "fixed value marked uncalibrated. llama-cpp-python's server pays for them in Python "
        "over the whole vocabulary, far slower than the answer itself with Gemma 3.",
    )


class SemanticConfig(Strict):
    retired: ClassVar[Mapping[str, str]] = {
        "default_threshold": DECIDED_BY_CONFIDENCE,
        "thresholds": DECIDED_BY_CONFIDENCE,
        "none_threshold": DECIDED_BY_CONFIDENCE,
        "margin": DECIDED_BY_CONFIDENCE,
        "classifier_weight": "no longer used: the fitted confidence weighs the classifier "
        "(routing.semantic.classifier: false turns it off)",
    }

    enabled: bool = True
    model_path: str | None = Field(
        default=None, description="A sentence-transformers model dir; default: the bundled one."
    )
    exemplars: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Exemplars added to a route's shipped ones "
        "(as routing.routes.<name>.exemplars).",
    )
    top_k: int = Field(default=3, ge=1, le=20)
    none_exemplars: list[str] = Field(
        default_factory=list,
        description="Requests no source serves (alarms, music, email), added to the shipped "
        "ones: a match ends unserved (reason unserved: no source is asked) instead of a "
        "confident wrong route.",
    )
    classifier: bool = Field(
        default=True,
        description="Train the exemplar classifier at start-up: its log-probability is one "
        "of the numbers the fitted confidence weighs (false: it weighs nothing).",
    )
    classifier_prior: bool = Field(
        default=True,
        description="Train the classifier on the shipped priors beside the exemplars: real "
        "questions about the world for the encyclopedia route "
        "(routing/fitted/classifier_prior.npz) and requests to services nobody here offers "
        "for `none` (classifier_prior_none.npz); false: the exemplars alone.",
    )
    reuse_threshold: float = Field(
        default=0.85,
        ge=-1,
        le=1,
        description="Similarity at which an earlier LLM decision is reused.",
    )
    reuse_max_entries: int = Field(default=2000, ge=0, le=MAX_ENTRIES)
    threads: int = Field(default=1, ge=1, le=64, description="Torch threads for encoding.")


class TimeSensitiveConfig(Strict):
    """Where a question whose answer changes with time goes (routing/language/time_sensitive.py)."""

    enabled: bool = True
    from_routes: list[str] = Field(
        default_factory=lambda: ["kiwix"],
        description="Routes that answer from a snapshot (an offline encyclopedia): a "
        "time-sensitive part routed to one goes to `live_route` instead, with it as fallback.",
    )
    live_route: str = Field(
        default="web",
        description="The live source; when it is not configured or not enabled the snapshot "
        "answers and the chain says its answer may be out of date.",
    )
    model: bool = Field(
        default=True,
        description="Also read the question with the fitted time-sensitivity model "
        "(routing/fitted/time_sensitive.npz) when the semantic stage runs; false: the cue "
        "words alone decide.",
    )

    def snapshot_for_live(self, meant_for: str, answered_by: str | None) -> bool:
        """Whether `answered_by`, a snapshot route's source, answers what was meant for the
        live route `meant_for`: its answer may be out of date (`snapshot_answered`)."""
        return self.enabled and meant_for == self.live_route and answered_by in self.from_routes


class RoutingConfig(Strict):
    default_source: str = "kiwix"
    request_deadline_s: float = Field(default=15.0, gt=0, le=600)
    max_events: int = Field(default=1000, ge=10, le=1_000_000)
    max_parts: int = Field(
        default=8,
        ge=1,
        le=1000,
        description="Parts one query may split into; over it the request is refused (422).",
    )
    keyword_threshold: float = Field(default=85.0, ge=50, le=100)
    confidence_path: str | None = Field(
        default=None,
        description="A fitted confidence artefact (`search fit --output`); default: the "
        "shipped routing/fitted/confidence.json.",
    )
    min_confidence: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Below this calibrated confidence a stage declines (the LLM, if any, "
        "decides; else the default, reason low_confidence). Default: the value `search fit` "
        "measured as best (routing/fitted/confidence.json).",
    )
    shipped_routes: bool = Field(
        default=True,
        description="Start from the package's routes (routing/routes/*.yaml); false: only "
        "the rules and exemplars this file gives.",
    )
    routes: dict[str, RouteOverride] = Field(
        default_factory=dict,
        description="Per route (or `none`): rules and exemplars to add or disable, a new "
        "route for a new source. Merged over the shipped routes (see routing/stages/route_data.py).",
    )
    keywords: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Keyword rules added to a route's (as routing.routes.<name>.keywords).",
    )
    none_keywords: list[str] = Field(
        default_factory=list,
        description="Phrases of requests no source serves (alarms, email, streaming music), "
        "added to the shipped ones: when they outweigh every route's keywords the part ends "
        "at a low-confidence default.",
    )
    fusion: dict[str, list[str]] = Field(default_factory=dict)
    decision_cache_ttl_s: float = Field(default=3600.0, ge=0, le=YEAR_S)
    decision_cache_max_entries: int = Field(default=10_000, ge=0, le=MAX_ENTRIES)
    session_ttl_s: float = Field(default=900.0, ge=0, le=YEAR_S)
    session_max_entries: int = Field(default=1000, ge=0, le=MAX_ENTRIES)
    semantic: SemanticConfig = Field(default_factory=SemanticConfig)
    time_sensitive: TimeSensitiveConfig = Field(default_factory=TimeSensitiveConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)

    def route_overrides(self) -> dict[str, RouteOverride]:
        """`routes`, with the shorthand keys (`keywords`, `none_keywords`, `semantic.*`)
        folded in: each adds to the route it names, before `routes.<name>`'s additions."""
        semantic = self.semantic
        keywords = {**self.keywords, NONE: self.none_keywords}
        exemplars = {**semantic.exemplars, NONE: semantic.none_exemplars}
        names = [*keywords, *exemplars, *self.routes]
        merged: dict[str, RouteOverride] = {}
        for name in dict.fromkeys(names):
            extra = self.routes.get(name, RouteOverride())
            added_keywords = [*keywords.get(name, []), *extra.keywords]
            added_exemplars = [*exemplars.get(name, []), *extra.exemplars]
            if name not in self.routes and not (added_keywords or added_exemplars):
                continue
            merged[name] = extra.model_copy(
                update={"keywords": added_keywords, "exemplars": added_exemplars}
            )
        return merged
