"""`search check FILE` refuses a hostile or ambiguous file with one short line (exit 2):
an alias bomb is bounded before anything walks or prints it, and a query given twice in
a mapping (which YAML would silently keep once) is named with its line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from search.correction.check import (
    MAX_CHECK_BYTES,
    CheckFileError,
    parse_expectations,
    read_expectations,
    shown,
)
from tests.search.test_cli import run, write_config

ROUTES = ["kiwix", "ha", "web"]


def alias_bomb(levels: int) -> str:
    """`lol: [&l0 [lol x10], &l1 [*l0 x10], ...]`: 10^levels values in a few hundred bytes."""
    lines = ["lol: [&l0 [" + ",".join(["lol"] * 10) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"  , &l{level} [" + ",".join([f"*l{level - 1}"] * 10) + "]")
    return "\n".join([*lines, "  ]", ""])


def _refusal(text: str) -> str:
    with pytest.raises(CheckFileError) as refused:
        parse_expectations(text, ROUTES, 1000, "household.yaml")
    return str(refused.value)


@pytest.mark.parametrize("levels", [3, 7, 8])
def test_an_alias_bomb_is_refused_quickly_in_one_short_line(levels: int) -> None:
    started = time.monotonic()
    message = _refusal(alias_bomb(levels))
    assert time.monotonic() - started < 5
    assert message.startswith("household.yaml: ")
    assert "\n" not in message and len(message) < 200
    if levels >= 7:  # 10^7 values: past the bound config.yaml is read with
        assert "too large" in message and "100,000" in message
    else:  # small enough to read: the route is named, not printed
        assert "'lol'" in message and "a list" in message


def test_nesting_and_long_values_never_reach_the_message() -> None:
    deep = _refusal("q: " + "[" * 100 + "]" * 100 + "\n")
    assert "nested too deep" in deep
    long_route = _refusal("q: " + "x" * 100_000 + "\n")
    assert len(long_route) < 400 and "..." in long_route
    long_query = _refusal("y" * 100_000 + ": web\n")  # past max_chars: named, cut short
    assert len(long_query) < 400
    assert shown("z" * 1000) == repr("z" * 1000)[:77] + "..."


def test_a_query_given_twice_in_a_mapping_is_refused_naming_it_and_its_line() -> None:
    message = _refusal("lights in the hall: ha\nwho wrote hamlet: kiwix\nlights in the hall: web\n")
    assert "'lights in the hall' is given twice" in message
    assert "line 3" in message and "first on line 1" in message
    flow = _refusal("{a: ha, a: web}\n")  # on one line too
    assert "'a' is given twice" in flow
    entry = _refusal("- {query: a, route: ha, query: b}\n")  # a key of a list entry
    assert "'query' is given twice" in entry


def test_distinct_queries_and_merge_keys_still_read() -> None:
    found = parse_expectations(
        "lights in the hall: ha\nLights in the hall: ha\nwho wrote hamlet: kiwix\n",
        ROUTES,
        1000,
    )
    assert [(e.query, e.route) for e in found] == [
        ("lights in the hall", "ha"),
        ("Lights in the hall", "ha"),
        ("who wrote hamlet", "kiwix"),
    ]
    merged = parse_expectations(
        "- &base {query: a, route: ha}\n- {<<: *base, route: web}\n", ROUTES, 1000
    )
    assert [(e.query, e.route) for e in merged] == [("a", "ha"), ("a", "web")]


def test_check_cli_exits_2_with_one_line_on_a_bomb_or_a_duplicate(
    tmp_path: Path, demo_zim: Path
) -> None:
    config = write_config(tmp_path, demo_zim)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(8))
    twice = tmp_path / "twice.yaml"
    twice.write_text("lights in the hall: ha\nlights in the hall: kiwix\n")
    for path, said in ((bomb, "too large"), (twice, "line 2: 'lights in the hall'")):
        done = run("check", str(path), "--config", str(config))
        assert done.returncode == 2, (done.stdout, done.stderr[:500])
        assert done.stderr.startswith("search: ") and said in done.stderr
        assert len(done.stderr.splitlines()) == 1 and len(done.stderr) < 300
        assert "MISS" not in done.stdout


def test_a_file_past_the_size_bound_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """Plain lines, no aliases: parsed, such a file took seconds and gigabytes before the
    value bound stopped it. It is refused by its size, read no further than the bound."""
    big = tmp_path / "big.yaml"
    line = b"query number %d about things: kiwix\n"
    with big.open("wb") as handle:
        for number in range(MAX_CHECK_BYTES // len(line % 0) + 10_000):
            handle.write(line % number)
    with pytest.raises(
        CheckFileError, match=rf"big.yaml: too large: over {MAX_CHECK_BYTES:,} bytes"
    ):
        read_expectations(str(big), ROUTES, 1000)
    small = tmp_path / "small.yaml"
    small.write_text("lights in the hall: ha\n")
    assert [e.route for e in read_expectations(str(small), ROUTES, 1000)] == ["ha"]
