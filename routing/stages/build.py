"""Builds the intent resolver from config: the stages, in order, and the default route.

keyword -> decision cache -> semantic -> LLM -> session -> default. The keyword and
semantic stages decide by the calibrated confidence of routing/stages/confidence.py against
`routing.min_confidence` (default: what `search fit` measured). The semantic stage is
built only when enabled and the LLM stage only when `routing.llm.base_url` is set (else
the default's reason is `llm_unconfigured`). Each route's rules and exemplars are the
shipped ones with the user's overrides merged in (routing/stages/route_data.py). Nothing heavy
happens here: the model loads in `Resolver.start()`, so `import routing.stages.build` and
building a Service stay quick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from routing.config import RoutingConfig
from routing.language.spelling import known_words
from routing.shared_state import RedisLink
from routing.stages.classifier_prior import SHIPPED
from routing.stages.confidence import ConfidenceModel, load_model
from routing.stages.decision_cache import DecisionCache, DecisionCacheStage
from routing.stages.keyword import KeywordStage
from routing.stages.keyword_rules import KeywordRules
from routing.stages.labels import HouseholdRouting, LabelStage
from routing.stages.llm import LLMStage
from routing.stages.memory import DecisionMemory
from routing.stages.resolver import Resolver
from routing.stages.route_data import NONE, Route, resolve_routes
from routing.stages.semantic import LearnedDecisions, SemanticStage
from routing.stages.sessions import SessionStage, SessionStore
from routing.stages.world import WorldStage
from routing.types import IntentStage
from sources.registry import SourceConfig


class _TraceSettings(Protocol):
    capture_prompts: bool


class Config(Protocol):
    """What building the resolver reads of the whole config (`search.config.Config`
    composes it): routing's own section, the sources it routes to, and whether prompts
    are kept in traces."""

    @property
    def routing(self) -> RoutingConfig: ...

    @property
    def sources(self) -> Mapping[str, SourceConfig]: ...

    @property
    def trace(self) -> _TraceSettings: ...


def route_descriptions(config: Config) -> dict[str, str]:
    """Every route the LLM may name, with what it answers."""
    routes = {name: entry.description for name, entry in config.sources.items()}
    for name, members in config.routing.fusion.items():
        routes[name] = "combined results of " + " and ".join(members)
    return routes


def resolved_routes(config: Config) -> dict[str, Route]:
    """Each configured route's rules and exemplars: the shipped ones with the user's
    overrides merged over them (validated when the config was parsed)."""
    names = [*config.sources, *config.routing.fusion]
    return resolve_routes(
        names, config.routing.route_overrides(), shipped=config.routing.shipped_routes
    )


def semantic_stage(
    config: Config,
    routes: list[str],
    routes_data: dict[str, Route] | None = None,
    *,
    threads: int | None = None,
    decision_cache: DecisionCache | None = None,
    learned: LearnedDecisions | None = None,
    model: ConfidenceModel | None = None,
) -> SemanticStage:
    """The semantic stage over the resolved routes' exemplars; the classifier's priors
    belong to the shipped routes, so routes written from scratch
    (`routing.shipped_routes: false`) go without them."""
    data = resolved_routes(config) if routes_data is None else routes_data
    return SemanticStage(
        config.routing.semantic,
        routes,
        decision_cache=decision_cache,
        learned=learned,
        threads=config.routing.semantic.threads if threads is None else threads,
        exemplars={name: list(r.exemplars) for name, r in data.items()},
        min_confidence=config.routing.min_confidence,
        model=model or load_model(config.routing.confidence_path),
        dictionary=known_words(config.routing.semantic.model_path),
        priors=SHIPPED if config.routing.shipped_routes else (),
    )


def confidence_labels(config: Config, data: dict[str, Route]) -> list[str]:
    """What the calibrated confidence ranks: each configured route with rules (or, with the
    semantic stage, exemplars), and `none` when it has either."""
    names = set(config.sources) | set(config.routing.fusion) | {NONE}
    semantic = config.routing.semantic.enabled
    return [
        name
        for name, r in data.items()
        if name in names and (r.keywords or (semantic and r.exemplars))
    ]


def build_resolver(
    config: Config,
    shared: RedisLink | None = None,
    household: HouseholdRouting | None = None,
    sessions: SessionStore | None = None,
) -> Resolver:
    """`shared`: the Service's Redis link, when decisions are shared across processes;
    `household`: what the household's `search fit` gave (labels, weights), if anything;
    `sessions`: the conversations to carry on (a reload after a fit keeps them; the
    decisions cached by the routing it replaces are not kept)."""
    routing = config.routing
    model = (
        household.model
        if household is not None and household.model is not None
        else load_model(routing.confidence_path)
    )
    if household is not None:
        model = replace(model, name=household.name)
    routes = route_descriptions(config)
    data = resolved_routes(config)
    decision_cache = DecisionCache(
        routing.decision_cache_max_entries,
        routing.decision_cache_ttl_s,
        shared=shared,
        routes=set(routes),
    )
    if sessions is None:
        sessions = SessionStore(
            routing.session_max_entries, routing.session_ttl_s, shared=shared, routes=set(routes)
        )
    learned = LearnedDecisions(routing.semantic.reuse_max_entries, routing.decision_cache_ttl_s)

    semantic: SemanticStage | None = None
    if routing.semantic.enabled:
        semantic = semantic_stage(
            config, list(routes), data, decision_cache=decision_cache, learned=learned, model=model
        )
    llm: LLMStage | None = None
    if routing.llm.base_url.strip():
        llm = LLMStage(
            routing.llm,
            routes,
            capture_prompts=config.trace.capture_prompts,
            memory=DecisionMemory(
                decision_cache, learned, semantic.embed if semantic is not None else None
            ),
            recall=sessions.recall,
            min_confidence=(
                model.min_confidence if routing.min_confidence is None else routing.min_confidence
            ),
        )

    stages: list[IntentStage] = []
    if household is not None and household.labels:
        stages.append(LabelStage(household, set(routes)))
    stages += [
        KeywordStage(
            KeywordRules(
                {name: list(r.keywords) for name, r in data.items() if name != NONE},
                routing.keyword_threshold,
                list(data[NONE].keywords) if NONE in data else [],
                known_words(routing.semantic.model_path),
            ),
            escalation=llm,
            labels=confidence_labels(config, data),
            min_confidence=routing.min_confidence,
            model=model,
            defer_world_questions=semantic.ready if semantic is not None else None,
            world_routes=frozenset(n for n, r in data.items() if r.about_the_world),
        ),
        DecisionCacheStage(decision_cache),
    ]
    if semantic is not None:
        stages.append(semantic)
    if llm is not None:
        stages.append(llm)
    stages.append(SessionStage(sessions))
    min_confidence = (
        model.min_confidence if routing.min_confidence is None else routing.min_confidence
    )
    # last before the default: reads the candidates of whichever stage declined last
    stages.append(WorldStage(min_confidence))
    return Resolver(
        stages,
        routing.default_source,
        sessions=sessions,
        fallback_reason="no_match" if llm is not None else "llm_unconfigured",
        min_confidence=min_confidence,
        fit=model.name,
    )
