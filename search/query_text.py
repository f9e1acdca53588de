"""What makes a query's text acceptable: one check for HTTP, MCP and the CLI.

A query must show something: whitespace, control characters and invisible formatting
characters (zero-width spaces, joiners, bidi marks, fillers) alone are an empty query,
however many of them there are. Odd characters beside visible text are let through (the
router answers "who was marie curie \\u0000"); whatever prints them escapes them.
"""

from __future__ import annotations

import unicodedata

# Letters that render as nothing (Hangul fillers, the braille blank, Mongolian vowel
# separator): not control or format characters, yet a query of them shows nothing.
_BLANK_LETTERS = frozenset("\u115f\u1160\u180e\u2800\u3164\uffa0")
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Mn", "Me"})


def is_visible(char: str) -> bool:
    """False for a character that shows nothing on its own."""
    if char in _BLANK_LETTERS:
        return False
    return unicodedata.category(char) not in _INVISIBLE_CATEGORIES


def has_visible_text(text: str) -> bool:
    return any(is_visible(c) for c in text)


def encodable(text: str) -> bool:
    """Whether UTF-8 can carry `text` (not with a lone surrogate, such as a line read with
    `surrogateescape` that held bytes UTF-8 cannot decode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def query_problem(text: str, max_chars: int) -> str | None:
    """Why `text` is not an acceptable query ('query: ...'), or None when it is."""
    if not encodable(text):  # "\ud800" is valid JSON but no UTF-8 can carry it
        return "query: not valid Unicode (a lone surrogate)"
    if not has_visible_text(text):
        return "query: must not be empty (it has no visible character)"
    if len(text) > max_chars:
        return f"query: longer than the maximum of {max_chars} characters"
    return None
