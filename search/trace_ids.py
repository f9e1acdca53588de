"""Trace ids: random UUID4s as 32 hex digits, drawn from the OS in blocks.

`uuid.uuid4().hex` asks the OS for 16 random bytes (a system call, dear in a VM) and
builds a `UUID` object for every request; this takes the same OS randomness 4 KiB at a
time and sets the same version and variant bits, so the ids are what `uuid4` makes.
"""

from __future__ import annotations

import os
import re
import threading

_BLOCK = 256  # ids per call to the OS
# What every id this router hands out looks like (OpenAPI `pattern` and the check below).
TRACE_ID_PATTERN = "^[0-9a-f]{32}$"
NOT_A_TRACE_ID = "trace_id: not a trace id (32 lowercase hex digits)"
_TRACE_ID = re.compile("[0-9a-f]{32}")
_TRACE_ID_PREFIX = re.compile("[0-9a-f]{1,32}")
_lock = threading.Lock()
_pool: list[str] = []


def _fill() -> None:
    raw = bytearray(os.urandom(16 * _BLOCK))
    for start in range(0, len(raw), 16):
        raw[start + 6] = (raw[start + 6] & 0x0F) | 0x40  # version 4
        raw[start + 8] = (raw[start + 8] & 0x3F) | 0x80  # the RFC 4122 variant
    text = raw.hex()
    _pool.extend(text[i : i + 32] for i in range(0, len(text), 32))


def new_trace_id() -> str:
    """A fresh random id, as `uuid.uuid4().hex` writes one (safe from any thread; a
    forked worker must not share its parent's pool, see `_after_fork`)."""
    try:
        return _pool.pop()
    except IndexError:
        with _lock:
            if not _pool:
                _fill()
        return new_trace_id()


def _after_fork() -> None:
    _pool.clear()  # a child drawing its parent's remaining ids would repeat them


os.register_at_fork(after_in_child=_after_fork)


def is_trace_id(text: str) -> bool:
    """Whether `text` could be an id this router made: anything else names no trace, and
    is answered as bad input rather than looked up as a missing one."""
    return _TRACE_ID.fullmatch(text) is not None


def is_trace_id_prefix(text: str) -> bool:
    """Whether `text` could be the start of an id this router made (the CLI takes those)."""
    return _TRACE_ID_PREFIX.fullmatch(text) is not None
