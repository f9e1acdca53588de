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
# that steer them, and the invisible characters that make two texts
# look the same (zero-width space, word joiner and invisible operators, BOM). The zero-width
# (non-)joiners stay: scripts and emoji sequences need them.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_controls(text: str, keep: str = "") -> str:
    """`text` with every control and bidi character but those in `keep` escaped."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), text)


def escape_json_text(text: str) -> str:
    """JSON text (`json.dumps(..., ensure_ascii=False)`) with the raw DEL, C1 and bidi
    characters it leaves inside strings as `\\u` escapes: the same JSON value, safe to show."""
    return _UNSAFE.sub(
        lambda m: m.group() if m.group() == "\n" else f"\\u{ord(m.group()):04x}", text
    )


def say(text: object = "", *, file: TextIO | None = None, json_text: bool = False) -> None:
    """print() for the CLI: our own line breaks and tabs stay, everything else is escaped."""
    line = str(text)
    line = escape_json_text(line) if json_text else escape_controls(line, keep="\n\t")
    print(line, file=file or sys.stdout)
