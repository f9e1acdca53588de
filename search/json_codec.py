"""JSON encoding on the hot paths: every `/search` response and every stored trace.

orjson encodes several times faster than the standard library's encoder (about ten times
for a short chain), and a cache-hit request encodes its response and, in the trace
writer, its chain and results. Output is compact
UTF-8 with non-ASCII characters as they are, as Starlette's `JSONResponse` writes it.
Whatever orjson refuses (an integer beyond 64 bits, a non-string key) goes through the
standard encoder instead, so encoding never fails where the standard one succeeds. Text
no encoder can write as UTF-8 (a lone surrogate, which a source's JSON may carry as an
escape such as "\\ud800") is written with U+FFFD in its place: one bad character in a
search result must not turn an answer into a 500.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from starlette.responses import JSONResponse

_fallback = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=str, check_circular=False
).encode


_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate in its strings (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_surrogates(v) for v in value]
    return value


def dumps(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON; objects JSON has no type for become their `str()`."""
    try:
        # Without OPT_NON_STR_KEYS, which costs a third more on every call; the rare
        # non-string key goes the slow way below.
        return orjson.dumps(value, default=str)
    except TypeError:
        try:
            return _fallback(value).encode("utf-8")
        except UnicodeEncodeError:
            return _fallback(_without_surrogates(value)).encode("utf-8")


def dumps_text(value: Any) -> str:
    return dumps(value).decode("utf-8")


class FastJSONResponse(JSONResponse):
    """A `JSONResponse` rendered by `dumps`."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
