"""Decoding a request body: the JSON every parser reads the same way, or a refusal."""

from __future__ import annotations

import json

import orjson
import pytest

from search.api.body import DuplicateKey, loads_json

READ_AS_ORJSON_DOES = [
    b'{"query": "who wrote \\"Romeo and Juliet\\"", "explain": true}',
    b'{"query": "a \\\\", "dry_run": false, "session_id": "s"}',  # an escaped backslash
    b'{"query": "x", "explain": {"a": [1, {"b": "c"}]}}',
    b'{"\\u0071uery": "q"}',
    b'{"query": "\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80"}',
    b"[1, 2]",
    b'"text"',
]


@pytest.mark.parametrize("raw", READ_AS_ORJSON_DOES)
def test_a_body_without_a_repeated_key_reads_as_it_always_did(raw: bytes) -> None:
    assert loads_json(raw) == orjson.loads(raw)


def test_what_orjson_refuses_is_the_stdlib_s_verdict() -> None:
    assert loads_json(b'{"query": NaN}')["query"] != loads_json(b'{"query": NaN}')["query"]
    with pytest.raises(ValueError):
        loads_json(b'{"query": "who')


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (b'{"query": "x", "dry_run": true, "dry_run": false}', "dry_run"),
        (b'{"query": "x", "query": "x"}', "query"),
        (b'{"dry_run": false, "query": "x", "dry_run": true}', "dry_run"),
        (b'{"query": "x", "\\u0071uery": "y"}', "query"),
        (b'{"query": "say \\"hi\\"", "explain": true, "explain": true}', "explain"),
        (b'{"query": "x", "explain": {"a": 1, "a": 2}}', "a"),
        (b'{"query": NaN, "query": "x"}', "query"),
    ],
)
def test_a_key_named_twice_is_refused_naming_it(raw: bytes, key: str) -> None:
    assert json.loads(raw)  # the stdlib would have taken the last value without a word
    with pytest.raises(DuplicateKey) as caught:
        loads_json(raw)
    assert caught.value.key == key
    assert key in str(caught.value)


def test_a_colon_in_the_text_is_read_exactly_and_the_same() -> None:
    raw = b'{"query": "wake me at 7:30", "explain": false}'
    assert loads_json(raw) == orjson.loads(raw)
    with pytest.raises(DuplicateKey):
        loads_json(b'{"query": "wake me at 7:30", "query": "x"}')
