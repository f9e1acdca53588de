"""The keyword stage: the resolved routes' rules, weighed by the fitted keyword confidence.

It decides when its winner clears `min_confidence`, else declines (saying so) for the
semantic stage; a `none` winner ends the part unserved. A match on a query that leans on
the conversation is escalated to the LLM when one is configured (`discourse_escalated`).
The rules themselves (matching, inflections, typos) are routing/stages/keyword_rules.py.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

from routing.chain.events import record
from routing.chain.steps import Step
from routing.language.sentences import (
    asks_about_the_world,
    asks_for_a_fact,
    speaks_of_the_addressee,
    speaks_of_the_asker,
)
from routing.language.text import words
from routing.stages.confidence import ConfidenceModel, Ranked, declined, load_model
from routing.stages.keyword_rules import NONE, KeywordMatch, KeywordRules
from routing.types import Decision, Escalation, ResolveContext

_MEMO_SIZE = 2048  # the texts a household repeats, remembered (bounded)


# Why the stage leaves a question about the world ("what is the habitat of the snow
# leopard", "when did the tv show end") to the semantic stage however sure its words are
# of a source's route: there a rule word is as often a topic ("snow", "tv") as the
# request, and the semantic stage weighs the same keyword scores beside the question's
# meaning. (A `none` rule in such a question, "what time is it", is already weighed
# against by the fitted confidence, `none_question`.)
WORLD_QUESTION = "keyword: a question about the world, its meaning is weighed too"
# And why it leaves a request about the asker's own affairs ("why is my transfer late") to
# it when the rules give a route `about_the_world` (routing/stages/route_data.py): there a
# rule word ("transfer") names a topic of the asker's business, which such a source rarely
# serves.
OWN_AFFAIRS = "keyword: the asker's own affairs, its meaning is weighed too"
# The same for the addressee's ("what is the price of your set lunch", "do you stock bulbs
# for your lamps"): a question put to a shop or to the assistant, not about the world.
ADDRESSEE_AFFAIRS = "keyword: the addressee's own affairs ('your'), its meaning is weighed too"

# And why it leaves a `none` win that rests on single words ("song", "album", "call") in
# a question for a fact ("when did the song without me come out", "who wrote the song
# call me the breeze") to it: there such a word is more often what is asked about than a
# request no source serves. A request's frame is a phrase ("what time is it", "set *
# timer") and still decides.
QUESTION_TOPIC = (
    "keyword: only topic words say no source serves it, in a question; its meaning is weighed too"
)

CLAIM_WEIGHT = 1.0  # a topical word, not a hint ("nearby" weighs 0.75): enough to claim a clause


class _Ranking(NamedTuple):
    """What the keyword stage makes of one text, before recording it."""

    match: KeywordMatch
    ranked: Ranked
    confidence: float  # rounded, as the event shows it
    candidates: tuple[tuple[str, float, float], ...]  # (route, confidence, margin)
    declined: str | None  # why it declines (under `min_confidence`), else None
    deferred: str | None  # why it leaves the text to the semantic stage when that is ready


def _topic_words_only(match: KeywordMatch) -> bool:
    """Every phrase that matched is one word (`=call` included): no request's frame."""
    return all(" " not in phrase for phrase in match.matched)


class KeywordStage:
    """Rules from the resolved routes, weighed by the fitted keyword confidence: decides when
    its winner clears `min_confidence`, else declines (saying so) for the semantic stage.
    Discourse-dependent matches go on to the LLM if any."""

    name = "intent_keyword"

    def __init__(
        self,
        rules: KeywordRules,
        escalation: Escalation | None = None,
        *,
        labels: list[str] | None = None,
        min_confidence: float | None = None,
        model: ConfidenceModel | None = None,
        defer_world_questions: Callable[[], bool] | None = None,
        world_routes: frozenset[str] = frozenset(),
    ) -> None:
        """`labels`: every route the confidence ranks (default: those with rules).
        `defer_world_questions`: whether the semantic stage after this one is ready; while
        it is, a question about the world is left to it (see `WORLD_QUESTION`), and so is
        a request about the asker's own affairs its rules give one of `world_routes`
        (see `OWN_AFFAIRS`)."""
        self.rules = rules
        self.escalation = escalation
        self.model = model or load_model()
        self.min_confidence = (
            self.model.min_confidence if min_confidence is None else min_confidence
        )
        self.labels = labels or rules.routes
        self.defer_world_questions = defer_world_questions
        self.world_routes = world_routes
        self._match = lru_cache(maxsize=_MEMO_SIZE)(rules.match)
        self._scores = lru_cache(maxsize=_MEMO_SIZE)(rules.scores)
        self._ranking = lru_cache(maxsize=_MEMO_SIZE)(self._rank)

    def _rank(self, query: str) -> _Ranking | None:
        """The rules' match and its fitted ranking: a pure function of the text (the rules
        and the model are fixed for the stage's life), so a repeated query ranks once."""
        match = self._scores(query)
        if match is None:
            return None
        labels = [*self.labels, *(r for r in match.scores if r not in self.labels)]
        said = words(query)
        world = asks_about_the_world(said)
        ranked = self.model.keyword(labels, match.scores, world)
        candidates = tuple((c["route"], c["confidence"], c["margin"]) for c in ranked.candidates())
        reason = (
            declined("keyword", ranked, self.min_confidence)
            if ranked.confidence < self.min_confidence
            else None
        )
        deferred = None
        if ranked.winner != NONE and world:
            deferred = WORLD_QUESTION
        elif ranked.winner == NONE and asks_for_a_fact(said) and _topic_words_only(match):
            deferred = QUESTION_TOPIC
        elif ranked.winner in self.world_routes and speaks_of_the_asker(said):
            deferred = OWN_AFFAIRS
        elif ranked.winner in self.world_routes and speaks_of_the_addressee(said):
            deferred = ADDRESSEE_AFFAIRS
        confidence = round(ranked.confidence, 4)
        return _Ranking(match, ranked, confidence, candidates, reason, deferred)

    def claim(self, text: str) -> str | None:
        """The route (or "none") the rules give `text` alone by more than a hint ("nearby"
        weighs less than a topic); records nothing."""
        match = self._match(text)
        if match is None or match.scores[match.route] < CLAIM_WEIGHT:
            return None
        return match.route

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        ranking = self._ranking(query)
        if ranking is None:
            return None
        match, ranked = ranking.match, ranking.ranked
        context.keyword = match
        # Each event gets objects of its own (a reader may change its copy).
        shown = {
            "confidence": ranking.confidence,
            "candidates": [
                {"route": route, "confidence": p, "margin": margin}
                for route, p, margin in ranking.candidates
            ],
            "fit": self.model.name,
        }
        matched = list(match.matched)
        why = ranking.declined
        ready = self.defer_world_questions
        if why is None and ranking.deferred and ready is not None and ready():
            why = ranking.deferred
        if why is not None:
            # A tie, words that point several ways, a question about the world or the
            # asker's own affairs: the semantic stage weighs the words too.
            record(
                Step.INTENT_KEYWORD,
                query=query,
                decision=None,
                discourse_escalated=False,
                matched=matched,
                outcome="declined",
                declined=why,
                **shown,
            )
            context.ranked = ranked
            return None
        route = ranked.winner
        if route == NONE:
            # "set an alarm", "add it to my playlist": no source serves it; say so, don't route.
            record(
                Step.INTENT_KEYWORD,
                query=query,
                decision=None,
                discourse_escalated=False,
                matched=matched,
                outcome="unserved",
                **shown,
            )
            context.unserved = True
            context.default_reason = "no_match"
            context.default_fields = {"nearest": matched[0] if matched else None}
            context.ranked = ranked
            return None
        escalate = self.escalation is not None and context.discourse is not None
        fields: dict[str, Any] = {}
        if escalate:
            fields["discourse"] = context.discourse
        record(
            Step.INTENT_KEYWORD,
            query=query,
            decision=route,
            discourse_escalated=escalate,
            matched=matched,
            **shown,
            **fields,
        )
        if escalate and self.escalation is not None:
            fresh = await self.escalation.escalate(query, context, route)
            if fresh is not None:
                return fresh
        return Decision(route, self.name, confidence=ranked.confidence, ranked=ranked)
