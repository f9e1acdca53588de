"""Builds the intent resolver from config: the stages, in order, and the default route.

keyword -> decision cache -> semantic -> LLM -> session -> default. The semantic stage is
built only when enabled and the LLM stage only when `routing.llm.base_url` is set (else
the default's reason is `llm_unconfigured`). Nothing heavy happens here: the model loads
in `Resolver.start()`, so `import routing.stages` and building a Service stay quick.
"""

from __future__ import annotations

from routing.decision_cache import DecisionCache, DecisionCacheStage
from routing.intents import IntentStage, KeywordStage, Resolver
from routing.keyword import KeywordRules
from routing.llm import LLMStage
from routing.semantic import LearnedDecisions, SemanticStage
from routing.sessions import SessionStage, SessionStore
from routing.shared_state import RedisLink
from search.config import Config


def route_descriptions(config: Config) -> dict[str, str]:
    """Every route the LLM may name, with what it answers."""
    routes = {name: entry.description for name, entry in config.sources.items()}
    for name, members in config.routing.fusion.items():
        routes[name] = "combined results of " + " and ".join(members)
    return routes


def build_resolver(config: Config, shared: RedisLink | None = None) -> Resolver:
    """`shared`: the Service's Redis link, when decisions are shared across processes."""
    routing = config.routing
    routes = route_descriptions(config)
    decision_cache = DecisionCache(
        routing.decision_cache_max_entries,
        routing.decision_cache_ttl_s,
        shared=shared,
        routes=set(routes),
    )
    sessions = SessionStore(
        routing.session_max_entries, routing.session_ttl_s, shared=shared, routes=set(routes)
    )
    learned = LearnedDecisions(routing.semantic.reuse_max_entries, routing.decision_cache_ttl_s)

    semantic: SemanticStage | None = None
    if routing.semantic.enabled:
        semantic = SemanticStage(
            routing.semantic,
            list(routes),
            decision_cache=decision_cache,
            learned=learned,
            threads=routing.semantic.threads,
        )
    llm: LLMStage | None = None
    if routing.llm.base_url.strip():
        llm = LLMStage(
            routing.llm,
            routes,
            capture_prompts=config.trace.capture_prompts,
            decision_cache=decision_cache,
            learned=learned,
            semantic=semantic,
            sessions=sessions,
        )

    stages: list[IntentStage] = [
        KeywordStage(
            KeywordRules(routing.keywords, routing.keyword_threshold, routing.none_keywords),
            escalation=llm,
        ),
        DecisionCacheStage(decision_cache),
    ]
    if semantic is not None:
        stages.append(semantic)
    if llm is not None:
        stages.append(llm)
    stages.append(SessionStage(sessions))
    return Resolver(
        stages,
        routing.default_source,
        sessions=sessions,
        fallback_reason="no_match" if llm is not None else "llm_unconfigured",
    )
