"""The few text primitives routing shares: one query normaliser, one word splitter.

Every cache (results, routing decisions, replayed captures, learned LLM decisions) keys on
`normalise`, so two spellings that one treats as the same question, all treat the same.
"""

from __future__ import annotations

import re
from functools import lru_cache

_SPACE = re.compile(r"\s+")
_EDGE = " \t\r\n.,;:!?¿¡\"'“”‘’()"
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# Words as clause splitting sees them (case kept, curly apostrophes allowed).
CLAUSE_WORD = re.compile(r"[A-Za-z0-9'’]+")
# What is trimmed from the ends of a part, condition or consequence.
CLAUSE_TRIM = " \t\r\n,;.!?:-"


@lru_cache(maxsize=4096)  # the cache key of every source call and decision lookup
def normalise(query: str) -> str:
    """The cache key of a query: case, spacing, curly quotes and end punctuation don't
    make a different question."""
    text = query.replace("’", "'").replace("‘", "'").lower()
    return _SPACE.sub(" ", text).strip(_EDGE)


def words(text: str) -> list[str]:
    """Lower-case words, apostrophes kept inside ("what's")."""
    return _WORD.findall(text.lower().replace("’", "'"))
