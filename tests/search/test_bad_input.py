"""Input that used to get through: numbers SQLite cannot hold, NUL and invisible-only text,
non-finite times, and stored text that would drive the reader's terminal.

HTTP runs in-process over ASGI against a real SQLite trace store; the CLI is the real
`search.cli.main` in-process (the scripted source kind is registered in this process).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from search.api.app import create_app
from search.mcp_server import run_search
from search.service import Service
from tests.search.correction.test_replay import cli, record, write_config
from tests.support.app import asgi_client, scripted_config

INVISIBLE_ONLY = [
    "\u200b",
    "\u0000",
    "\u200b\u2060\ufeff\u00ad",
    "\u3164\u2800",
    "\x1b\x07",
    " \u200b\t\u200e\u0301 ",
]
HOSTILE = [
    "who \x1b]0;pwned\x07 was curie",
    "tides \x1b[2J\x1b[H now",
    "rome \x9b2J empire",
    "nile \u202eeman\u202c river",
]


def store_config(tmp: Path):
    config = scripted_config({"kiwix": {}})
    config.trace.enabled = True
    config.trace.path = str(tmp / "traces.db")
    return config


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ("offset=99999999999999999999", "offset"),
        ("offset=9223372036854775808", "offset"),
        ("cursor=999999999999999999999999", "cursor"),
        ("offset=%D9%A1%D9%A2", "offset"),  # Arabic-Indic digits: int() takes them, SQL must not
        ("limit=1_0", "limit"),
        ("q=%00", "q"),
        ("q=rome%00", "q"),
        ("q=%E2%80%8B", "q"),
        ("session=%1B%5B2J", "session"),
        ("since=nan", "since"),
        ("since=inf", "since"),
        ("since=-Infinity", "since"),
        ("since=1e400", "since"),
        ("until=NaN", "until"),
        ("since=" + "9" * 400 + "d", "since"),
    ],
)
async def test_bad_trace_filters_are_422_naming_the_parameter(
    tmp_path: Path, params: str, field: str
) -> None:
    async with asgi_client(create_app(store_config(tmp_path))) as http:
        assert (await http.post("/search", json={"query": "rome"})).status_code == 200
        response = await http.get(f"/traces?{params}")
        assert response.status_code == 422, (params, response.text)
        error = response.json()["error"]
        assert error["field"] == field and error["message"].startswith(f"{field}: ")


async def test_the_largest_offset_and_cursor_sqlite_holds_are_answered(tmp_path: Path) -> None:
    async with asgi_client(create_app(store_config(tmp_path))) as http:
        assert (await http.post("/search", json={"query": "rome"})).status_code == 200
        for params in (
            "offset=9223372036854775807",
            "cursor=9223372036854775807",
            "q=rome",
            "since=1h",
            "since=0",
        ):
            response = await http.get(f"/traces?{params}")
            assert response.status_code == 200, (params, response.text)
        assert (await http.get("/traces?q=rome")).json()["total"] == 1
        assert (await http.get("/traces?q=nothing-like-it")).json()["total"] == 0


@pytest.mark.parametrize("query", INVISIBLE_ONLY)
async def test_an_invisible_only_query_is_empty_over_http_mcp_and_the_cli(
    tmp_path: Path, query: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = store_config(tmp_path)
    async with asgi_client(create_app(config)) as http:
        response = await http.post("/search", json={"query": query})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "query" and "empty" in error["message"]

    result = await run_search(Service(config), {"query": query})
    assert result.is_error
    assert result.structured_content["error"]["field"] == "query"

    config_path = write_config(tmp_path / "c.yaml", tmp_path / "cli.db")
    for command in ("query", "route"):
        code, out = cli(capsys, command, query, "--config", str(config_path))
        assert code == 2 and "query: must not be empty" in out, (command, out)


def test_the_cli_offset_over_sqlite_range_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "c.yaml", tmp_path / "traces.db")
    record(config, ["rome"])
    for option, value in (
        ("--offset", "99999999999999999999"),
        ("--cursor", "999999999999999999999999"),
        ("--since", "nan"),
    ):
        code, out = cli(capsys, "trace", "list", "--config", str(config), option, value)
        assert code == 2, (option, out)
        assert out.startswith(f"search: {option}:") and "Traceback" not in out


def test_trace_show_of_an_unknown_id_is_a_failed_lookup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "c.yaml", tmp_path / "traces.db")
    record(config, ["rome"])
    code, out = cli(capsys, "trace", "show", "0123456789abcdef", "--config", str(config))
    assert code == 1 and "no such trace" in out


def assert_no_raw_controls(out: str) -> None:
    raw = [
        c
        for c in out
        if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F or c in "\u202e\u202c"
    ]
    assert raw == [], f"raw control characters reached the terminal: {raw!r}"


def test_stored_escape_sequences_print_escaped_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "c.yaml", tmp_path / "traces.db")
    outcomes = record(config, HOSTILE)
    code, listing = cli(capsys, "trace", "list", "--config", str(config))
    assert code == 0
    assert_no_raw_controls(listing)
    assert "who \\x1b]0;pwned\\x07 was curie" in listing
    assert "tides \\x1b[2J\\x1b[H now" in listing
    for outcome, query in zip(outcomes, HOSTILE, strict=False):
        code, shown = cli(capsys, "trace", "show", outcome.trace_id, "--config", str(config))
        assert code == 0
        assert_no_raw_controls(shown)
        narrative = [line for line in shown.splitlines() if line.startswith("part 0")]
        assert narrative, shown
        code, as_json = cli(
            capsys, "trace", "show", outcome.trace_id, "--config", str(config), "--json"
        )
        assert code == 0
        assert_no_raw_controls(as_json)
        assert json.loads(as_json)["query"] == query  # escaped for the eye, same JSON value
    code, page = cli(capsys, "trace", "list", "--config", str(config), "--json")
    assert_no_raw_controls(page)
    assert {t["query"] for t in json.loads(page)["traces"]} == set(HOSTILE)


def test_query_output_escapes_what_sources_and_queries_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "c.yaml", tmp_path / "traces.db")
    for extra in ([], ["--explain"], ["--json"]):
        code, out = cli(capsys, "query", HOSTILE[1], "--config", str(config), *extra)
        assert code == 0, out
        assert_no_raw_controls(out)
        assert "\\x1b[2J" in out or "\\u001b[2J" in out


def test_invisible_characters_that_make_texts_look_alike_are_shown_as_escapes() -> None:
    """A zero-width space, word joiner or BOM inside a word would make two stored queries
    print the same; the joiners that scripts and emoji need are kept as they are."""
    from search.terminal import escape_controls, escape_json_text

    assert escape_controls("ti\u200bdes\u2060 now\ufeff") == "ti\\u200bdes\\u2060 now\\ufeff"
    assert escape_json_text('"ti\u200bdes"') == '"ti\\u200bdes"'
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    assert escape_controls(family + " \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645") == (
        family + " \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    )


@pytest.mark.parametrize(
    ("char", "shown"),
    [
        ("\u00ad", "\\xad"),  # soft hyphen: "ro\u00adme" looks like "rome"
        ("\u2028", "\\u2028"),  # line separator: starts a line some terminals show
        ("\u2029", "\\u2029"),
        ("\u034f", "\\u034f"),  # combining grapheme joiner
        ("\u180e", "\\u180e"),  # Mongolian vowel separator
        ("\u3164", "\\u3164"),  # Hangul filler: a blank "letter"
        ("\u2800", "\\u2800"),  # braille blank
        ("\ufe01", "\\ufe01"),  # a variation selector that is not an emoji's
        ("\U000e0041", "\\U000e0041"),  # a tag character
    ],
)
def test_blank_and_separator_characters_are_shown_as_escapes(char: str, shown: str) -> None:
    """What the query check counts as invisible, the terminal shows as an escape, and a
    JSON text stays the same value (a character past U+FFFF as its surrogate pair)."""
    import json

    from search.query_text import is_visible
    from search.terminal import escape_controls, escape_json_text

    assert not is_visible(char)
    assert escape_controls(f"ro{char}me") == f"ro{shown}me"
    encoded = escape_json_text(json.dumps(f"ro{char}me", ensure_ascii=False))
    assert char not in encoded and json.loads(encoded) == f"ro{char}me"


def test_the_selectors_an_emoji_needs_are_kept() -> None:
    from search.terminal import escape_controls

    for emoji in ("\u2764\ufe0f", "\u263a\ufe0e"):
        assert escape_controls(emoji) == emoji


async def test_a_key_that_is_not_valid_unicode_is_named_as_such(tmp_path: Path) -> None:
    """A lone surrogate as a key fails before the key has a name: the answer says what is
    wrong with the body instead of "body should be a string"."""
    async with asgi_client(create_app(store_config(tmp_path))) as http:
        response = await http.post(
            "/search",
            content=b'{"query": "rome", "\\ud800": 1}',
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "body"
    assert error["message"] == "body: a key is not valid Unicode (a lone surrogate)"
