"""Words spelled right: a query word that is one is never read as a typo of a rule word.

Typo tolerance (routing/stages/keyword_rules.py) lets "wether" mean "weather". It also let "tanks" mean
"thanks" and "sever" mean "seven": real words one letter apart. A typo is almost never a
word of its own, so a dictionary settles it: a query word found in it matches a rule word
only exactly or inflected, never fuzzily.

The dictionary is the embedding model's own vocabulary (its tokenizer's whole-word
entries, ~20k English words and names), so it ships with the model the semantic stage
already loads and costs one small file read, without importing the model. Without that
file there is no guard and typo tolerance works as before.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

VOCABULARY_FILE = "vocab.txt"  # a WordPiece tokenizer's vocabulary, one entry per line


@lru_cache(maxsize=4)
def known_words(model_path: str | None = None) -> frozenset[str]:
    """The whole, alphabetic words of the model's vocabulary at `model_path` (default: the
    bundled model); empty when it has none."""
    if model_path is None:
        from routing.stages.embedder import default_model_path

        model_path = default_model_path()
    path = Path(model_path) / VOCABULARY_FILE
    try:
        lines = path.read_text("utf-8").splitlines()
    except OSError:
        return frozenset()
    return frozenset(word for word in lines if word.isalpha() and word.islower())
