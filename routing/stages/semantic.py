"""The semantic stage: route by the nearest example utterances, in embedding space.

The query's embedding is compared with
- exemplar utterances per route (shipped in routing/routes/, with the user's additions:
  see routing/stages/route_data.py), plus "none" exemplars (alarms, music, email... that no
  source serves), and
- earlier LLM decisions (semantic reuse: a paraphrase of a question the LLM already routed).

Everything is L2-normalised and precomputed at start-up, so matching is one matrix-vector
product. Each label's similarity is that of its best exemplar; a small softmax classifier
(trained on the exemplars at start-up, one more matrix product per query) gives each label
a probability too: the nearest exemplar alone is swayed by a shared name ("who is the
governor of New York" is near "weather in New York"); the classifier has learnt what each
route's exemplars have in common. The fitted confidence (routing/stages/confidence.py)
weighs both with the keyword scores, and the stage decides when its winner clears
`routing.min_confidence`. When "none" wins, the query is unserved: the part ends at
`intent_default` with `reason: "unserved"` and no source, instead of a confident wrong
route. The event lists the top candidates on a hit *and* on a miss (`decision: null`,
`matched: false`). An earlier LLM decision is reused when its similarity clears
`semantic.reuse_threshold`; the nearest one that does not is shown as `remembered`, beside
the candidates, never among them.

The model is loaded in `start()` (the app's lifespan), never at import time; encoding runs
in the inference worker pool (`sources.workers`), apart from source calls, in a worker
that carries the request's context.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from routing.chain.events import record
from routing.chain.steps import Step
from routing.language.sentences import asks_about_the_world
from routing.language.text import normalise, words
from routing.stages.classifier_prior import (
    PROBE,
    SHIPPED,
    ClassifierPrior,
    Shipped,
    load_priors,
    unserved_texts,
)
from routing.stages.confidence import (
    NEAREST_COUNTED,
    ConfidenceModel,
    Ranked,
    Spread,
    declined,
    load_model,
    single,
)
from routing.stages.decision_cache import DecisionCache
from routing.stages.keyword_rules import KeywordRules, tokenize
from routing.stages.llm_confidence import UNMEASURED
from routing.stages.route_data import rule_key
from routing.stages.word_classifier import WordClassifier, mixed
from routing.ttl_cache import TTLCache
from routing.types import Decision, ResolveContext
from sources.workers import run_inference

if TYPE_CHECKING:
    from routing.config import SemanticConfig
    from routing.stages.embedder import Embedder

log = logging.getLogger(__name__)

NONE = "none"  # the label of exemplars no source serves; never a route


@dataclass(frozen=True, slots=True)
class Candidate:
    """A label's best match: what it matched and how well."""

    route: str
    text: str
    score: float  # cosine similarity of the best exemplar
    origin: str = "exemplar"  # or "llm" for a reused LLM decision
    probability: float | None = None  # the classifier's, when it is on
    stated: float | None = None  # a reused LLM decision's own confidence


class ExemplarIndex:
    """Exemplar rows grouped by label, as one normalised matrix."""

    def __init__(self, groups: dict[str, list[str]], vectors: np.ndarray) -> None:
        self.labels: list[str] = []
        self.texts: list[str] = []
        self.starts: list[int] = []
        for label, texts in groups.items():
            if not texts:
                continue
            self.labels.append(label)
            self.starts.append(len(self.texts))
            self.texts.extend(texts)
        self.matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.matrix.shape[0] != len(self.texts):
            raise ValueError("one vector per exemplar")
        # Each row's label, by index into `labels` (for counting the nearest rows' labels).
        counts = np.diff([*self.starts, len(self.texts)]).astype(int)
        self._row_label = np.repeat(np.arange(len(self.labels)), counts)
        # How many of the nearest a label could hold at most: a user's route of two
        # exemplars, both among the nearest, is as much the neighbourhood as a full one.
        self._nearest_room = np.minimum(counts, NEAREST_COUNTED)

    def __len__(self) -> int:
        return len(self.texts)

    def match(self, vector: np.ndarray) -> tuple[list[tuple[str, str, float]], Spread | None]:
        """(label, best exemplar, similarity) for every label, best first, and the spread
        of the query's similarity to every exemplar."""
        if not self.texts:
            return [], None
        scores = self.matrix @ vector
        ends = [*self.starts[1:], len(self.texts)]
        best: list[tuple[str, str, float]] = []
        for label, start, end in zip(self.labels, self.starts, ends, strict=True):
            offset = start + int(np.argmax(scores[start:end]))
            best.append((label, self.texts[offset], float(scores[offset])))
        best.sort(key=lambda item: item[2], reverse=True)
        counted = min(NEAREST_COUNTED, len(scores))
        nearest = np.argpartition(-scores, counted - 1)[:counted]
        # A label holds at most as many of the nearest as it has exemplars (`_nearest_room`;
        # with fewer than NEAREST_COUNTED exemplars in all, every one of them is counted).
        shares = (
            np.bincount(self._row_label[nearest], minlength=len(self.labels)) / self._nearest_room
        )
        spread = Spread(
            float(scores.mean()),
            float(scores.std()),
            {label: float(share) for label, share in zip(self.labels, shares, strict=True)},
        )
        return best, spread


class LabelClassifier:
    """Softmax regression over exemplar embeddings, trained at start-up (deterministic).

    Class-balanced, L2-regularised, plain gradient descent: ~0.1 s for a thousand exemplars.
    Each of `priors` (routing/stages/classifier_prior.py) adds weighted points to its label.
    """

    def __init__(
        self,
        index: ExemplarIndex,
        *,
        priors: Sequence[ClassifierPrior] = (),
        words: WordClassifier | None = None,
        iterations: int = 300,
        rate: float = 5.0,
        l2: float = 1e-3,
    ) -> None:
        """`words`: the same labels read from a query's words (routing/stages/
        word_classifier.py), averaged in when `probabilities` is given the query."""
        self.labels = list(index.labels)
        if words is not None and list(words.labels) != self.labels:
            raise ValueError("the word classifier's labels are not the exemplars'")
        self.words = words
        counts = np.diff([*index.starts, len(index)])
        targets = np.repeat(np.arange(len(self.labels)), counts)
        x = np.ascontiguousarray(index.matrix, dtype=np.float32)
        weights = (len(targets) / (len(self.labels) * counts))[targets].astype(np.float32)
        # The priors whose label is one of these (a configuration without it has none).
        self.priors = tuple(p for p in priors if p.label in self.labels)
        exemplar_targets, exemplar_weights = targets, weights  # what each prior's share is of
        for prior in self.priors:
            label = self.labels.index(prior.label)
            total = float(exemplar_weights[exemplar_targets == label].sum()) * prior.share
            x = np.concatenate([x, prior.centroids.astype(np.float32)])
            targets = np.concatenate([targets, np.full(len(prior.counts), label)])
            weights = np.concatenate(
                [weights, (total * prior.counts / prior.counts.sum()).astype(np.float32)]
            )
        x_t = np.ascontiguousarray(x.T)  # a strided transpose makes BLAS several times slower
        onehot = np.eye(len(self.labels), dtype=np.float32)[targets]
        scale = (weights / weights.sum())[:, None].astype(np.float32)
        w = np.zeros((x.shape[1], len(self.labels)), dtype=np.float32)
        b = np.zeros(len(self.labels), dtype=np.float32)
        step, decay = np.float32(rate), np.float32(l2)
        for _ in range(iterations):
            logits = x @ w + b
            logits -= logits.max(axis=1, keepdims=True)
            probs = np.exp(logits)
            probs /= probs.sum(axis=1, keepdims=True)
            grad = (probs - onehot) * scale
            w -= step * (x_t @ grad + decay * w)
            b -= step * grad.sum(axis=0)
        self.w = w
        self.b = b

    @property
    def prior_used(self) -> bool:
        return bool(self.priors)

    @property
    def prior_source(self) -> str:
        """What the chain names as the priors' origins, "+"-joined ("" without one)."""
        return "+".join(str(p.report.get("source", "prior")) for p in self.priors)

    def probabilities(self, vector: np.ndarray, text: str | None = None) -> dict[str, float]:
        """Per label, from the query's embedding, and from its words too given its `text`."""
        logits = vector @ self.w + self.b
        logits = logits - logits.max()
        probs = np.exp(logits)
        probs /= probs.sum()
        found = {label: float(p) for label, p in zip(self.labels, probs, strict=True)}
        if self.words is None or text is None:
            return found
        return mixed(found, self.words.probabilities(text))


class LearnedDecisions:
    """Earlier LLM decisions for semantic reuse: bounded and expiring like every cache."""

    def __init__(
        self, max_entries: int, ttl_s: float, now: Callable[[], float] = time.monotonic
    ) -> None:
        # key -> (query, route, embedding, the LLM's confidence in the route)
        self._cache: TTLCache[str, tuple[str, str, np.ndarray, float]] = TTLCache(
            max_entries, ttl_s, now
        )
        self._keys: list[str] = []
        self._matrix: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._cache)

    def clear(self) -> None:
        self._cache.clear()
        self._keys = []
        self._matrix = None

    def add(self, query: str, route: str, vector: np.ndarray, confidence: float) -> None:
        key = normalise(query)
        if not key:
            return
        self._cache.set(key, (query, route, np.asarray(vector, dtype=np.float32), confidence))
        if key not in self._keys:
            self._keys.append(key)
        self._rebuild()

    def _rebuild(self) -> None:
        """Drop expired or evicted entries and restack the live ones."""
        live = [(key, entry) for key in self._keys if (entry := self._cache.get(key)) is not None]
        self._keys = [key for key, _ in live]
        self._matrix = np.stack([entry[2] for _, entry in live]) if live else None

    def nearest(self, vector: np.ndarray) -> tuple[str, str, float, float] | None:
        """(earlier query, its route, similarity, the LLM's confidence) of the closest live
        decision."""
        if self._matrix is None:
            return None
        scores = self._matrix @ vector
        for index in np.argsort(-scores)[:8]:
            entry = self._cache.get(self._keys[int(index)])
            if entry is not None:
                return entry[0], entry[1], float(scores[int(index)]), entry[3]
        self._rebuild()  # everything near has expired
        return None


def word_classifier(
    groups: Mapping[str, Sequence[str]], priors: Sequence[ClassifierPrior]
) -> WordClassifier | None:
    """The label classifier's word reading, trained on the exemplars; a label whose prior
    was made from requests the repository holds (the `none` route's, from Banking77) also
    learns from those requests' words, at the prior's share. None for fewer than two
    labels."""
    texts = {label: list(rows) for label, rows in groups.items() if rows}
    if len(texts) < 2:
        return None
    extra = {}
    for prior in priors:
        if prior.label == NONE and prior.label in texts:
            rows = unserved_texts()
            if rows:
                extra[prior.label] = [(rows, prior.share)]
    return WordClassifier.fit(texts, extra)


class SemanticStage:
    """Nearest exemplars (or an earlier LLM decision), decided by the fitted confidence."""

    name = "intent_semantic"

    def __init__(
        self,
        config: SemanticConfig,
        routes: Sequence[str],
        *,
        decision_cache: DecisionCache | None = None,
        learned: LearnedDecisions | None = None,
        threads: int = 1,
        exemplars: Mapping[str, Sequence[str]] | None = None,
        min_confidence: float | None = None,
        model: ConfidenceModel | None = None,
        labelled: Iterable[str] = (),
        dictionary: frozenset[str] = frozenset(),
        priors: Sequence[ClassifierPrior] | Shipped = SHIPPED,
    ) -> None:
        """`exemplars` per route (and `none`), as routing/stages/route_data.py resolves them.
        `labelled`: exemplars that are the household's own labels (`origin: user_label`).
        `dictionary`: words spelled right (routing/language/spelling.py); a query with none of them
        and no keyword rule matched ("blorp zibble quux") carries nothing to decide by.
        `priors`: the classifier's extra training points (routing/stages/classifier_prior.py);
        by default the shipped ones when `config.classifier_prior` is on."""
        self.dictionary = dictionary
        self.labelled = frozenset(rule_key(text) for text in labelled)
        self.config = config
        self.routes = set(routes)
        self.exemplars = {label: list(texts) for label, texts in (exemplars or {}).items()}
        self.model = model or load_model()
        self.min_confidence = (
            self.model.min_confidence if min_confidence is None else min_confidence
        )
        self.decision_cache = decision_cache
        self.learned = learned
        self.threads = threads
        self.embedder: Embedder | None = None
        self.index: ExemplarIndex | None = None
        self.classifier: LabelClassifier | None = None
        if priors == SHIPPED:
            priors = load_priors() if config.classifier and config.classifier_prior else ()
        self.priors: tuple[ClassifierPrior, ...] = tuple(priors)

    def ready(self) -> bool:
        """Whether the model is loaded and the exemplars embedded (`start` has run)."""
        return self.index is not None and self.embedder is not None

    async def start(self) -> None:
        """Load the model (shared per process) and embed the exemplars; once."""
        if self.index is not None:
            return
        from routing.stages.embedder import load_embedder

        self.embedder = await run_inference(load_embedder, self.config.model_path, self.threads)
        groups = {
            route: texts
            for route, texts in self.exemplars.items()
            if route in self.routes and route != NONE
        }
        groups[NONE] = self.exemplars.get(NONE, [])  # last, as the classifier was fitted
        texts = [text for group in groups.values() for text in group]
        vectors = await run_inference(self.embedder.encode_exemplars, texts)
        index = ExemplarIndex(groups, vectors)
        if self.config.classifier and len(index.labels) > 1:
            priors = await self._usable_priors()
            words = await run_inference(word_classifier, groups, priors)
            self.classifier = await run_inference(
                LabelClassifier, index, priors=priors, words=words
            )
        self.index = index

    async def _usable_priors(self) -> tuple[ClassifierPrior, ...]:
        """The priors made in the loaded model's embedding space (each is checked)."""
        if not self.priors or self.embedder is None:
            return ()
        probe = await run_inference(self.embedder.encode_one, PROBE)
        usable = []
        for prior in self.priors:
            if prior.made_by(probe):
                usable.append(prior)
            else:
                log.warning(
                    "routing.semantic: the classifier prior for %r was made with another "
                    "embedding model; the classifier trains without it",
                    prior.label,
                )
        return tuple(usable)

    async def embed(self, query: str) -> np.ndarray | None:
        """The query's normalised embedding (None until started)."""
        if self.embedder is None:
            return None
        return await run_inference(self.embedder.encode_one, query)

    def reset(self) -> None:
        """Forget the earlier decisions it would reuse (a replay starts from nothing)."""
        if self.learned is not None:
            self.learned.clear()

    def _unknown_words(self, query: str) -> int:
        """How many words the query has when none of them is in the dictionary, else 0."""
        words = tokenize(query)
        if not self.dictionary or not words or any(w in self.dictionary for w in words):
            return 0
        return len(words)

    def _origin(self, text: str | None) -> str:
        """Whether the nearest exemplar is one the household labelled, or a shipped one."""
        return "user_label" if text is not None and rule_key(text) in self.labelled else "exemplar"

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        if self.index is None or self.embedder is None:
            return None
        vector = await run_inference(self.embedder.encode_one, query)
        context.embedding = vector
        return self.judge(query, vector, context)

    def labels(self, rules: KeywordRules | None = None) -> list[str]:
        """What the confidence ranks: routes with exemplars or rules, and `none` if it has
        either (a config without `none` data cannot say "no source serves this")."""
        found = list(self.index.labels) if self.index is not None else []
        if rules is not None:
            found += [r for r in rules.routes if r in self.routes or r == NONE]
        return list(dict.fromkeys(found))

    def similarities(
        self, vector: np.ndarray, text: str
    ) -> tuple[dict[str, float], dict[str, float], Spread | None]:
        """Per label: its nearest exemplar's cosine similarity, and the classifier's
        probability for `text` (whose embedding is `vector`; empty without a classifier);
        and the spread of all similarities."""
        assert self.index is not None
        best, spread = self.index.match(vector)
        similarity = {label: score for label, _, score in best}
        probability = self.classifier.probabilities(vector, text) if self.classifier else {}
        return similarity, probability, spread

    def candidates(
        self, vector: np.ndarray, query: str
    ) -> tuple[list[Candidate], Candidate | None, Spread | None]:
        """Exemplar candidates for `query` (one per label, nearest first), the nearest
        learned decision, and the spread of its similarity to every exemplar."""
        assert self.index is not None
        probabilities = self.classifier.probabilities(vector, query) if self.classifier else {}
        best, spread = self.index.match(vector)
        ranked = [
            Candidate(label, text, score, "exemplar", probabilities.get(label))
            for label, text, score in best
        ]
        reused = None
        if self.learned is not None:
            near = self.learned.nearest(vector)
            if near is not None:
                reused = Candidate(near[1], near[0], near[2], "llm", stated=near[3])
        return ranked, reused, spread

    def judge(self, query: str, vector: np.ndarray, context: ResolveContext) -> Decision | None:
        """Decide from the fitted confidence and record `intent_semantic` (hit or miss)."""
        ranked, reused, spread = self.candidates(vector, query)
        if reused is not None and reused.score >= self.config.reuse_threshold:
            return self._reuse(query, reused, context)
        by_label = {c.route: c for c in ranked}
        unknown = self._unknown_words(query) if context.keyword is None else 0
        confidence = self._confidence(query, ranked, spread, context, unknown)
        winner = by_label.get(confidence.winner)
        shown = {
            "confidence": round(confidence.confidence, 4),
            "candidates": self._shown(confidence, by_label),
            "threshold": self.min_confidence,
            "fit": self.model.name,
        }
        if reused is not None:
            shown["remembered"] = self._remembered(reused)
        if self.classifier is not None and self.classifier.prior_source:
            shown["classifier_prior"] = self.classifier.prior_source
        sure = confidence.confidence >= self.min_confidence and not unknown
        if sure and confidence.winner != NONE:
            record(
                Step.INTENT_SEMANTIC,
                query=query,
                matched_query=winner.text if winner else None,
                similarity=round(winner.score, 4) if winner else None,
                decision=confidence.winner,
                origin=self._origin(winner.text if winner else None),
                matched=True,
                **shown,
            )
            if self.decision_cache is not None and context.discourse is None:
                # What it beat is kept with it: the few candidates the event showed.
                self.decision_cache.put(
                    query,
                    confidence.winner,
                    self.name,
                    confidence.confidence,
                    confidence.routes[: self.config.top_k],
                )
            return Decision(
                confidence.winner, self.name, confidence=confidence.confidence, ranked=confidence
            )
        unserved = sure and confidence.winner == NONE
        fields = (
            {}
            if unserved
            else {
                "declined": f"semantic: none of its {unknown} words is a word the model knows"
                if unknown
                else declined("semantic", confidence, self.min_confidence)
            }
        )
        record(
            Step.INTENT_SEMANTIC,
            query=query,
            matched_query=winner.text if winner else None,
            similarity=round(winner.score, 4) if winner else None,
            decision=None,
            matched=False,
            outcome="unserved" if unserved else "declined",
            **shown,
            **fields,
        )
        context.ranked = confidence
        context.unknown_words = unknown
        if unserved:
            # Sure that no source serves it, whether or not a `none` exemplar is among the
            # nearest: the part ends unserved, as the event just said.
            context.unserved = True
            context.default_reason = "no_match"
            if winner is not None:
                context.default_fields = {
                    "nearest": winner.text,
                    "similarity": round(winner.score, 4),
                }
        return None

    def _reuse(self, query: str, reused: Candidate, context: ResolveContext) -> Decision:
        """A paraphrase of a question the LLM already routed: its route, at the confidence
        the LLM stated for it."""
        confidence = reused.stated if reused.stated is not None else UNMEASURED
        decision = single(reused.route, confidence)
        record(
            Step.INTENT_SEMANTIC,
            query=query,
            matched_query=reused.text,
            similarity=round(reused.score, 4),
            decision=reused.route,
            threshold=self.config.reuse_threshold,
            origin="llm",
            matched=True,
            confidence=round(confidence, 4),
            candidates=decision.candidates(),
        )
        if self.decision_cache is not None and context.discourse is None:
            self.decision_cache.put(query, reused.route, self.name, confidence)
        return Decision(reused.route, self.name, confidence=confidence)

    def _confidence(
        self,
        query: str,
        ranked: list[Candidate],
        spread: Spread | None,
        context: ResolveContext,
        unknown: int,
    ) -> Ranked:
        """The fitted confidence over the labels with exemplars and the keyword scores'
        routes. With `unknown` words only, the similarities are between fragments of
        letters, not evidence, so the confidence is the fit's own with no evidence at all
        (the candidates, all equal, in the order of their nearest exemplars)."""
        keyword = context.keyword.scores if context.keyword is not None else {}
        labels = [*self.labels(), *(r for r in keyword if r in self.routes or r == NONE)]
        labels = list(dict.fromkeys(labels))
        if unknown:
            nearness = {c.route: i for i, c in enumerate(ranked)}
            by_nearness = sorted(labels, key=lambda r: nearness.get(r, len(nearness)))
            return self.model.keyword(by_nearness, {})
        return self.model.full(
            labels,
            keyword,
            {c.route: c.score for c in ranked},
            {c.route: c.probability for c in ranked if c.probability is not None},
            spread,
            asks_about_the_world(words(query)),
        )

    def _shown(self, confidence: Ranked, by_label: Mapping[str, Candidate]) -> list[dict[str, Any]]:
        """The event's candidates: the best `top_k` with their confidence and nearest
        exemplar, the winner first; only routes the confidence ranked, each once."""
        events = []
        for entry in confidence.candidates(self.config.top_k):
            near = by_label.get(entry["route"])
            if near is not None:
                entry.update(matched=near.text, similarity=round(near.score, 4))
                if near.probability is not None:
                    entry["classifier"] = round(near.probability, 4)
            events.append(entry)
        return events

    def _remembered(self, reused: Candidate) -> dict[str, Any]:
        """The nearest earlier LLM decision, not near enough to reuse: shown beside the
        candidates (its similarity is not on their confidence scale, so it is not one)."""
        shown: dict[str, Any] = {
            "route": reused.route,
            "matched": reused.text,
            "similarity": round(reused.score, 4),
            "reuse_threshold": self.config.reuse_threshold,
        }
        if reused.stated is not None:
            shown["llm_confidence"] = round(reused.stated, 4)
        return shown
