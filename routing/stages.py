"""Builds the intent resolver from config: the stages, in order, and the default route."""

from __future__ import annotations

from routing.intents import IntentStage, KeywordStage, Resolver
from routing.keyword import KeywordRules
from search.config import Config


def build_resolver(config: Config) -> Resolver:
    routing = config.routing
    stages: list[IntentStage] = [
        KeywordStage(KeywordRules(routing.keywords, routing.keyword_threshold)),
    ]
    return Resolver(stages, routing.default_source)
