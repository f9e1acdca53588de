"""Text for a terminal: control characters from stored data shown, never obeyed.

Query texts, source answers and error messages come from whoever asked or answered. A
query holding `ESC ] 0 ; ... BEL` would retitle the reader's terminal, `ESC [ 2 J` clear
it, a bidi override reorder what they read. Everything the CLI prints goes through
`say`, which writes each such character as a visible escape (`\\x1b`, `\\u202e`).
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

# C0, DEL and C1 controls, the bidi embedding, override and isolate controls and the marks
# that steer them, the line and paragraph separators, and the invisible characters that
# make two texts look the same: zero-width space, word joiner and invisible operators,
# BOM, soft hyphen, the grapheme joiner, the blank letters (Hangul fillers, braille
# blank, the Mongolian vowel separator), variation selectors but the two that choose an
# emoji's look, and the tag characters. The zero-width (non-)joiners and U+FE0E/U+FE0F
# stay: scripts and emoji sequences need them.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\u2800"
    "\u3164\ufe00-\ufe0d\ufeff\uffa0\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _json_escape(char: str) -> str:
    """`char` as JSON writes it escaped: a character past U+FFFF as its surrogate pair."""
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_controls(text: str, keep: str = "") -> str:
    """`text` with every control and bidi character but those in `keep` escaped."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), text)


def escape_json_text(text: str) -> str:
    """JSON text (`json.dumps(..., ensure_ascii=False)`) with the raw DEL, C1 and bidi
    characters it leaves inside strings as `\\u` escapes: the same JSON value, safe to show."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() == "\n" else _json_escape(m.group()), text)


def say(text: object = "", *, file: TextIO | None = None, json_text: bool = False) -> None:
    """print() for the CLI: our own line breaks and tabs stay, everything else is escaped."""
    line = str(text)
    line = escape_json_text(line) if json_text else escape_controls(line, keep="\n\t")
    print(line, file=file or sys.stdout)
