"""The exemplar classifier's second reading: the words of a query, not only its embedding.

The label classifier (routing/stages/semantic.py) learns where each route's exemplars lie
in embedding space, which is what a query is about. What kind of request it is often sits
in a word or two that an embedding of the whole sentence weighs lightly: "play" before a
film's title, "my card" in a banking request, "who won" in a question about sport. This is
a logistic regression over the same exemplars' TF-IDF words and word pairs
(routing/stages/word_terms.py), trained at start-up beside the label classifier, whose
probabilities the classifier averages with its own (WORD_SHARE), so the fitted confidence
reads one classifier probability, as before.

Trained on the exemplars of every label (a household's own included), each label weighing
the same in all; a label's extra requests (the `none` route's Banking77 requests, whose
embeddings are that label's classifier prior) weigh `share` times its exemplars, as the
prior does. Fitted with scikit-learn (which sentence-transformers installs), read with
numpy: some 35 µs a query (bench/README.md, "The classifier reads words too").

Why: each corpus left out of the weights' fit in turn (bench/routing_quality.py
--no-sealed --isolated, bench/README.md "The classifier reads words too"), every held-out
corpus was routed as well or better with the words than without.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from routing.stages.word_terms import TermReader, mix, reader_of, vectoriser

WORD_SHARE = 0.5  # the words' part of the classifier's probability
C = 4.0  # the logistic regression's inverse L2 strength


@dataclass(frozen=True, slots=True)
class WordClassifier:
    """Per label, the probability that a query's words are that label's."""

    labels: tuple[str, ...]
    reader: TermReader
    weights: np.ndarray  # (terms, labels)
    bias: np.ndarray  # (labels,)

    @classmethod
    def fit(
        cls,
        texts: Mapping[str, Sequence[str]],
        extra: Mapping[str, Sequence[tuple[Sequence[str], float]]] | None = None,
    ) -> WordClassifier:
        """From each label's exemplar `texts`; `extra`: a label's further sets of rows, each
        with its total weight as a multiple of its exemplars'. ValueError for fewer than two
        labels."""
        from sklearn.linear_model import LogisticRegression

        labels = tuple(label for label, rows in texts.items() if rows)
        if len(labels) < 2:
            raise ValueError("a classifier needs two labels with exemplars")
        rows: list[str] = []
        targets: list[int] = []
        weights: list[float] = []
        for index, label in enumerate(labels):
            rows += texts[label]
            targets += [index] * len(texts[label])
            weights += [1.0] * len(texts[label])
            for more, share in (extra or {}).get(label, ()):
                if more and share > 0:
                    rows += more
                    targets += [index] * len(more)
                    weights += [share * len(texts[label]) / len(more)] * len(more)
        y = np.asarray(targets)
        w = np.asarray(weights)
        totals = np.bincount(y, weights=w, minlength=len(labels))
        w = w / totals[y] * len(y) / len(labels)  # each label weighs the same
        fitted = vectoriser()
        matrix = fitted.fit_transform(rows)
        regression = LogisticRegression(C=C, max_iter=5000)
        regression.fit(matrix, y, sample_weight=w)
        coef = np.asarray(regression.coef_, dtype=np.float64)
        bias = np.asarray(regression.intercept_, dtype=np.float64)
        if len(labels) == 2:  # one logit for the second label; the first's is zero
            coef = np.stack([np.zeros_like(coef[0]), coef[0]])
            bias = np.asarray([0.0, bias[0]])
        return cls(labels, reader_of(fitted), coef.T.astype(np.float32), bias.astype(np.float32))

    def probabilities(self, text: str) -> dict[str, float]:
        logits = self.bias.astype(np.float64) + self.reader.dot(text, self.weights)
        logits = logits - logits.max()
        probs = np.exp(logits)
        probs /= probs.sum()
        return {label: float(p) for label, p in zip(self.labels, probs, strict=True)}


def mixed(embedding: Mapping[str, float], words: Mapping[str, float]) -> dict[str, float]:
    """The classifier's probability per label: the embedding's and the words' averaged
    (both trained on the same labels)."""
    return {label: mix(p, words[label], WORD_SHARE) for label, p in embedding.items()}
