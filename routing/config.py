"""Routing's own settings (`routing:` in config.yaml): stages, thresholds, the LLM.

The routing layer owns these models and `search.config` composes them into the whole
config, so nothing in `routing/` needs to import the surfaces above it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from routing.stages.route_data import NONE, RouteOverride


class Strict(BaseModel):
    """A config section that refuses keys it does not know (a typo is an error)."""

    model_config = ConfigDict(extra="forbid")


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


class SemanticConfig(Strict):
    enabled: bool = True
    model_path: str | None = Field(
        default=None, description="A sentence-transformers model dir; default: the bundled one."
    )
    default_threshold: float = Field(
        default=0.6, ge=-1, le=1, description="For a route without a threshold of its own."
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict, description="Per route, over the shipped ones (routing/routes/)."
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
        "ones: a match ends at a low-confidence default (reason no_match) instead of a "
        "confident wrong route.",
    )
    none_threshold: float = Field(
        default=0.5,
        ge=-1,
        le=1,
        description="Given here, it replaces the shipped `none` route's threshold; "
        "otherwise it applies only where none is shipped (shipped_routes: false).",
    )
    margin: float = Field(
        default=0.0, ge=0, le=1, description="How far the best route must lead the runner-up."
    )
    classifier_weight: float = Field(
        default=0.1,
        ge=0,
        le=10,
        description="Weight of the exemplar-trained classifier's log-probability in the "
        "ranking of routes (0: nearest exemplar only).",
    )
    reuse_threshold: float = Field(
        default=0.85,
        ge=-1,
        le=1,
        description="Similarity at which an earlier LLM decision is reused.",
    )
    reuse_max_entries: int = Field(default=2000, ge=0)
    threads: int = Field(default=1, ge=1, le=64, description="Torch threads for encoding.")


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
    decision_cache_ttl_s: float = Field(default=3600.0, ge=0)
    decision_cache_max_entries: int = Field(default=10_000, ge=0)
    session_ttl_s: float = Field(default=900.0, ge=0)
    session_max_entries: int = Field(default=1000, ge=0)
    semantic: SemanticConfig = Field(default_factory=SemanticConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)

    def route_overrides(self) -> dict[str, RouteOverride]:
        """`routes`, with the shorthand keys (`keywords`, `none_keywords`, `semantic.*`)
        folded in: each adds to the route it names, before `routes.<name>`'s additions."""
        semantic = self.semantic
        keywords = {**self.keywords, NONE: self.none_keywords}
        exemplars = {**semantic.exemplars, NONE: semantic.none_exemplars}
        thresholds = dict(semantic.thresholds)
        if "none_threshold" in semantic.model_fields_set:
            thresholds[NONE] = semantic.none_threshold
        names = [*keywords, *exemplars, *thresholds, *self.routes]
        merged: dict[str, RouteOverride] = {}
        for name in dict.fromkeys(names):
            extra = self.routes.get(name, RouteOverride())
            added_keywords = [*keywords.get(name, []), *extra.keywords]
            added_exemplars = [*exemplars.get(name, []), *extra.exemplars]
            threshold = extra.threshold if extra.threshold is not None else thresholds.get(name)
            if name not in self.routes and not (
                added_keywords or added_exemplars or threshold is not None
            ):
                continue
            merged[name] = extra.model_copy(
                update={
                    "keywords": added_keywords,
                    "exemplars": added_exemplars,
                    "threshold": threshold,
                }
            )
        return merged
