"""Keyword rules, matched with rapidfuzz so a typo ("wether") still means forecast.

A rule is a word or short phrase per route. A query word matches a rule word when they
are equal, when the query word is the rule word plus an inflection ("rain" -> "raining"),
or when they start with the same letter, differ in length by one letter at most and
`fuzz.ratio` clears the threshold: typos keep their first letter far more often than not,
and are one slip, not two. The guards keep "flights" from meaning "lights", "train" from
meaning "rain" and "forest" from meaning "forecast"; with a `dictionary`
(routing/language/spelling.py), a query word spelled right ("tanks") is no typo of another
("thanks").

A `*` in a phrase stands for one to four words, so a question's frame can be a rule
("what does * mean", "how old is *") without naming what it is about. A word written
`=play` matches only itself, no inflection and no typo: a command's imperative ("play the
movie") is not its participle ("is the movie playing at the cinema").

Each matched phrase adds its weight to its route's score: its number of words, or the
weight written after a caret ("tell me about ^0.5": a question's frame should lose to a
topical word such as "traffic"). The best route wins, and a tie decides nothing (the
semantic stage gets the query). The pseudo-route `none` ("set an alarm", "on spotify")
scores like the others plus one per phrase: requests no source serves should not be
routed just because they mention a room or a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rapidfuzz import fuzz

NONE = "none"
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|\*")
_RULE_WORD = re.compile(r"=?[a-z0-9]+(?:'[a-z]+)?|\*")
_EXACT = "="  # the prefix of a rule word that matches only itself
_MIN_FUZZY_LEN = 5  # shorter words must match exactly ("rain" vs "ruin")
# Inflections a rule word may carry: "rain" matches "rains", "raining", "rainy".
_SUFFIXES = ("s", "es", "ed", "ing", "y", "er", "ier", "est", "iest", "d", "ning", "ny")
_GAP = (1, 4)  # how many words a `*` stands for
_NONE_BONUS = 1.0
_FUZZY_FACTOR = 0.8  # a typo-tolerant match weighs less than an exact one


def tokenize(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower().replace("’", "'")) if w != "*"]


_WEIGHT = re.compile(r"^(?P<phrase>.*?)\s*\^\s*(?P<weight>[0-9]+(?:\.[0-9]+)?)\s*$")


def _inflects(word: str, stem: str) -> bool:
    """Whether `word` is `stem` plus an inflection ("lights" of "light")."""
    return word.startswith(stem) and word[len(stem) :] in _SUFFIXES


def _rule_words(phrase: str) -> tuple[str, ...]:
    return tuple(_RULE_WORD.findall(phrase.lower().replace("’", "'")))


def parse_rule(text: str) -> tuple[tuple[str, ...], float | None, str]:
    """(words, explicit weight or None, the phrase without its weight)."""
    found = _WEIGHT.match(text)
    if found:
        phrase = found.group("phrase")
        return _rule_words(phrase), float(found.group("weight")), phrase
    return _rule_words(text), None, text


@dataclass(frozen=True, slots=True)
class KeywordMatch:
    """The route the rules chose (or `none`), the phrases that matched and the scores."""

    route: str
    matched: tuple[str, ...]
    scores: dict[str, float] = field(default_factory=dict)

    @property
    def unserved(self) -> bool:
        return self.route == NONE


class KeywordRules:
    """Phrase rules per route (and for `none`), compiled once (see routing/stages/route_data.py)."""

    def __init__(
        self,
        rules: dict[str, list[str]],
        threshold: float = 85.0,
        none_rules: list[str] | None = None,
        dictionary: frozenset[str] = frozenset(),
    ) -> None:
        """`dictionary`: words spelled right, never matched as a typo of a rule word."""
        self.threshold = threshold
        self._dictionary = dictionary
        self._rules: list[tuple[str, tuple[str, ...], str, float]] = []
        tables = [*rules.items(), (NONE, list(none_rules or []))]
        for route, phrases in tables:
            for text in phrases:
                words, explicit, phrase = parse_rule(text)
                if not words or all(w == "*" for w in words):
                    continue
                weight = explicit if explicit is not None else float(sum(w != "*" for w in words))
                if route == NONE and explicit is None:
                    weight += _NONE_BONUS
                self._rules.append((route, words, phrase, weight))
        self._ratio_cache: dict[tuple[str, str], bool] = {}
        # Indexes so a query is checked only against rules whose first literal word it
        # contains: with hundreds of rules, trying each at every position dominated the
        # cost of a cache-hit request.
        self._by_first: dict[str, list[int]] = {}
        self._vocab: set[str] = set()
        self._fuzzy_by_letter: dict[str, list[str]] = {}
        for index, (_, words, _, _) in enumerate(self._rules):
            literal = [w for w in words if w != "*"]
            self._by_first.setdefault(literal[0], []).append(index)
            for word in literal:
                if word not in self._vocab:
                    self._vocab.add(word)
                    if len(word) >= _MIN_FUZZY_LEN and word[0] != _EXACT:
                        self._fuzzy_by_letter.setdefault(word[0], []).append(word)
        self._word_cache: dict[str, frozenset[str]] = {}

    @property
    def routes(self) -> list[str]:
        """Every route (and `none`) with at least one rule, in rule order."""
        return list(dict.fromkeys(route for route, _, _, _ in self._rules))

    def _rule_words(self, query_word: str) -> frozenset[str]:
        """Every rule word `query_word` matches (exactly, inflected or as a typo)."""
        found = self._word_cache.get(query_word)
        if found is not None:
            return found
        hits = {query_word, _EXACT + query_word} & self._vocab
        for suffix in _SUFFIXES:
            stem = query_word[: -len(suffix)]
            if query_word.endswith(suffix) and len(stem) >= 3 and stem in self._vocab:
                hits.add(stem)
        if len(query_word) >= _MIN_FUZZY_LEN:
            for word in self._fuzzy_by_letter.get(query_word[0], ()):
                if self._word_matches(query_word, word):
                    hits.add(word)
        found = frozenset(hits)
        if len(self._word_cache) < 100_000:
            self._word_cache[query_word] = found
        return found

    def _word_matches(self, query_word: str, rule_word: str) -> bool:
        if query_word == rule_word:
            return True
        if rule_word[0] == _EXACT:
            return query_word == rule_word[1:]
        if len(rule_word) >= 3 and _inflects(query_word, rule_word):
            return True
        if (
            len(rule_word) < _MIN_FUZZY_LEN
            or len(query_word) < _MIN_FUZZY_LEN
            or query_word[0] != rule_word[0]
            or abs(len(query_word) - len(rule_word)) > 1  # a typo is one slip, not two
            or (query_word in self._dictionary and not _inflects(rule_word, query_word))
        ):
            return False
        key = (query_word, rule_word)
        hit = self._ratio_cache.get(key)
        if hit is None:
            hit = fuzz.ratio(query_word, rule_word) >= self.threshold
            if len(self._ratio_cache) < 100_000:
                self._ratio_cache[key] = hit
        return hit

    def _match_from(
        self, words: list[str], start: int, phrase: tuple[str, ...]
    ) -> tuple[int, ...] | None:
        """The positions of the words `phrase` matches starting exactly at `start`, or None."""
        if not phrase:
            return ()
        head = phrase[0]
        if head == "*":
            low, high = _GAP
            rest = phrase[1:]
            for skip in range(low, high + 1):
                if start + skip > len(words):
                    break
                found = self._match_from(words, start + skip, rest)
                if found is not None:
                    return found
            return None
        if start >= len(words) or not self._word_matches(words[start], head):
            return None
        found = self._match_from(words, start + 1, phrase[1:])
        return None if found is None else (start, *found)

    def _phrase_at(self, words: list[str], phrase: tuple[str, ...]) -> tuple[int, ...] | None:
        """The positions of the first match of `phrase` in `words`, or None."""
        span = sum(w != "*" for w in phrase) + (_GAP[0] * phrase.count("*"))
        for start in range(len(words) - span + 1):
            if phrase[0] != "*" and not self._word_matches(words[start], phrase[0]):
                continue
            found = self._match_from(words, start, phrase)
            if found is not None:
                return found
        return None

    def _exact(self, words: list[str], positions: tuple[int, ...], phrase: tuple[str, ...]) -> bool:
        literal = [w for w in phrase if w != "*"]
        return all(
            words[p] == w.lstrip(_EXACT) or _inflects(words[p], w)
            for p, w in zip(positions, literal, strict=True)
        )

    def scores(self, query: str) -> KeywordMatch | None:
        """Every matching route's score and phrases (`route`: the best, or "" on a tie);
        None when no rule matched. The fitted confidence reads these, ties included."""
        words = tokenize(query)
        if not words:
            return None
        scores: dict[str, float] = {}
        matched: dict[str, list[str]] = {}
        present: set[str] = set()
        for word in words:
            present |= self._rule_words(word)
        candidates = sorted({i for w in present for i in self._by_first.get(w, ())})
        hits = []
        for index in candidates:  # config order, as ties are broken by it
            route, phrase, text, weight = self._rules[index]
            positions = self._phrase_at(words, phrase)
            if positions is None:
                continue
            if not self._exact(words, positions, phrase):
                weight *= _FUZZY_FACTOR  # "lighting" is nearer "lights" than "lightning"
            hits.append((weight, route, positions, text))
        hits.sort(key=lambda hit: hit[0], reverse=True)  # stable: config order breaks ties
        covered: dict[str, set[int]] = {}
        for weight, route, positions, text in hits:
            seen = covered.setdefault(route, set())
            if seen.issuperset(positions):
                continue  # "lamps" after "lamp": the same words count once per route
            seen.update(positions)
            scores[route] = scores.get(route, 0.0) + weight
            matched.setdefault(route, []).append(text)
        if not scores:
            return None
        ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
        tie = len(ranked) > 1 and ranked[0][1] == ranked[1][1]
        best = "" if tie else ranked[0][0]
        return KeywordMatch(
            best,
            tuple(matched[best]) if best else tuple(p for r, _ in ranked[:2] for p in matched[r]),
            scores,
        )

    def match(self, query: str) -> KeywordMatch | None:
        """The best route by matched phrase weight; None when nothing or a tie matched."""
        found = self.scores(query)
        if found is None or not found.route:
            return None
        return found
