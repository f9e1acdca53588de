"""A text as TF-IDF terms (its words and word pairs): what the word-reading models read.

A sentence embedding says mostly what a text is about; a word or two often says what
kind of request it is ("won the", "play", "my card"). Two fitted models read the words
beside the embedding: the time-sensitivity model (routing/stages/time_sensitivity.py)
and the exemplar classifier's word half (routing/stages/word_classifier.py). Both are
fitted with scikit-learn's `TfidfVectorizer` (sublinear term frequency, smoothed inverse
document frequency, unit length) and read here with numpy, term for term as it computes
them, so reading a text costs microseconds and needs no scikit-learn.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

TOKEN_PATTERN = r"(?u)\b\w+\b"  # one-letter words too ("is it 5 pm")
_TOKEN = re.compile(TOKEN_PATTERN)


def terms_of(text: str) -> list[str]:
    """The lower-case words of `text` and each pair of neighbouring words."""
    tokens = _TOKEN.findall(text.lower())
    return tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]


@dataclass(frozen=True, slots=True)
class TermReader:
    """A fitted vocabulary and its inverse document frequencies."""

    vocabulary: Mapping[str, int]  # term -> its column
    idf: np.ndarray  # (terms,)

    @classmethod
    def of(cls, terms: Sequence[str], idf: np.ndarray) -> TermReader:
        """From the terms in column order; ValueError when `idf` does not fit them."""
        if idf.shape != (len(terms),):
            raise ValueError(f"{len(terms)} terms but {idf.shape} idf")
        vocabulary = {term: column for column, term in enumerate(terms)}
        if len(vocabulary) != len(terms):
            raise ValueError("a term is listed twice")
        return cls(vocabulary, np.asarray(idf, dtype=np.float32))

    @property
    def terms(self) -> list[str]:
        return sorted(self.vocabulary, key=self.vocabulary.__getitem__)

    def dot(self, text: str, weights: np.ndarray) -> Any:
        """`text`'s TF-IDF vector times `weights` (one row per term): a number for a
        vector of weights, one per column for a matrix; 0 with no known term."""
        read = self.read(text)
        if read is None:
            return 0.0
        columns, values = read
        return values @ weights[columns]

    def read(self, text: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The columns of `text`'s known terms and their unit-length TF-IDF values (None
        when it has no known term)."""
        counts = Counter(self.vocabulary[t] for t in terms_of(text) if t in self.vocabulary)
        if not counts:
            return None
        columns = np.fromiter(counts.keys(), dtype=np.intp, count=len(counts))
        tf = 1.0 + np.log(np.fromiter(counts.values(), dtype=np.float64, count=len(counts)))
        values = tf * self.idf[columns]
        return columns, values / float(np.linalg.norm(values))


def mix(embedding: Any, words: Any, share: float) -> Any:
    """A probability read from the embedding and one read from the words, `share` of it
    the words' (numbers or numpy arrays alike)."""
    return (1.0 - share) * embedding + share * words


def vectoriser(min_texts: int = 1) -> Any:
    """scikit-learn's vectoriser that TermReader reads as: words and word pairs found in
    at least `min_texts` of the texts it is fitted on (imported only to fit)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(
        ngram_range=(1, 2),
        min_df=min_texts,
        sublinear_tf=True,
        token_pattern=TOKEN_PATTERN,
        dtype=np.float64,
    )


def reader_of(fitted: Any) -> TermReader:
    """The TermReader of a fitted `vectoriser()`."""
    terms = [str(term) for term in fitted.get_feature_names_out()]
    return TermReader.of(terms, fitted.idf_)
