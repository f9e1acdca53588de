"""Keyword rules, matched with rapidfuzz so a typo ("wether") still means forecast.

A rule is a word or short phrase per route. A query word matches a rule word when they
are equal, or when they start with the same letter and `fuzz.ratio` clears the
threshold: typos keep their first letter far more often than not, and the first-letter
guard keeps "flights" from meaning "lights" and "train" from meaning "rain".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rapidfuzz import fuzz

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_MIN_FUZZY_LEN = 5  # shorter words must match exactly ("rain" vs "ruin")
# Inflections a rule word may carry: "rain" matches "rains", "raining", "rainy".
_SUFFIXES = ("s", "es", "ed", "ing", "y", "er", "ier", "est", "iest", "d", "ning", "ny")


def tokenize(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("’", "'"))


@dataclass(frozen=True, slots=True)
class KeywordMatch:
    """The route the rules chose, the rule phrases that matched and the per-route score."""

    route: str
    matched: tuple[str, ...]
    scores: dict[str, float] = field(default_factory=dict)


class KeywordRules:
    """Phrase rules per route, compiled once from config."""

    def __init__(self, rules: dict[str, list[str]], threshold: float = 85.0) -> None:
        self.threshold = threshold
        self._rules: list[tuple[str, tuple[str, ...], str]] = []
        for route, phrases in rules.items():
            for phrase in phrases:
                words = tuple(tokenize(phrase))
                if words:
                    self._rules.append((route, words, phrase))
        self._ratio_cache: dict[tuple[str, str], bool] = {}

    def _word_matches(self, query_word: str, rule_word: str) -> bool:
        if query_word == rule_word:
            return True
        if (
            len(rule_word) >= 3
            and query_word.startswith(rule_word)
            and query_word[len(rule_word) :] in _SUFFIXES
        ):
            return True
        if (
            len(rule_word) < _MIN_FUZZY_LEN
            or len(query_word) < _MIN_FUZZY_LEN - 1
            or query_word[0] != rule_word[0]
        ):
            return False
        key = (query_word, rule_word)
        hit = self._ratio_cache.get(key)
        if hit is None:
            hit = fuzz.ratio(query_word, rule_word) >= self.threshold
            if len(self._ratio_cache) < 100_000:
                self._ratio_cache[key] = hit
        return hit

    def _phrase_in(self, words: list[str], phrase: tuple[str, ...]) -> bool:
        span = len(phrase)
        for start in range(len(words) - span + 1):
            if all(self._word_matches(words[start + i], phrase[i]) for i in range(span)):
                return True
        return False

    def match(self, query: str) -> KeywordMatch | None:
        """The best route by matched phrase weight; None when nothing or a tie matched."""
        words = tokenize(query)
        scores: dict[str, float] = {}
        matched: dict[str, list[str]] = {}
        for route, phrase, text in self._rules:
            if self._phrase_in(words, phrase):
                scores[route] = scores.get(route, 0.0) + len(phrase)
                matched.setdefault(route, []).append(text)
        if not scores:
            return None
        ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
        if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
            return None
        best = ranked[0][0]
        return KeywordMatch(best, tuple(matched[best]), scores)
