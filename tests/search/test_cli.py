"""The `search` command, run as a user runs it: a subprocess over a real config and ZIM."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, demo_zim: Path, **routing: object) -> Path:
    """A config whose server address nothing listens on, so the CLI runs in-process."""
    config = {
        "server": {"port": free_port()},
        "routing": {
            "default_source": "kiwix",
            "shipped_routes": False,
            "keywords": {"forecast": ["weather"], "ha": ["lights"]},
            "semantic": {"enabled": False},
            **routing,
        },
        "trace": {"enabled": False},
        "sources": {
            "kiwix": {"type": "zim", "paths": [str(demo_zim)]},
            "forecast": {
                "type": "open_meteo",
                "enabled": False,
                "latitude": 1,
                "longitude": 2,
                "fallback": ["kiwix"],
            },
            "ha": {
                "type": "homeassistant",
                "enabled": False,
                "url": "http://127.0.0.1:9",
                "token": "${TEST_HA_TOKEN:-x}",
            },
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "search", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_version_is_the_package_version() -> None:
    from importlib.metadata import version

    done = run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"search {version('search-router')}"


def test_query_answers_from_the_real_zim_with_its_chain(tmp_path: Path, demo_zim: Path) -> None:
    config = write_config(tmp_path, demo_zim)
    done = run(
        "query", "who wrote romeo and juliet", "--json", "--explain", "--config", str(config)
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    (part,) = body["results"]
    assert part["source"] == "kiwix" and part["items"][0]["title"] == "Romeo and Juliet"
    steps = [e["step"] for e in body["explanation"]]
    assert steps == ["intent_default", "source_invoked"]


def test_query_prints_a_readable_table(tmp_path: Path, demo_zim: Path) -> None:
    config = write_config(tmp_path, demo_zim)
    done = run("query", "what is the weather today", "--explain", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "forecast -> kiwix" in done.stdout
    assert "source_skipped" in done.stdout and "disabled" in done.stdout


def test_a_failed_search_exits_1(tmp_path: Path, demo_zim: Path) -> None:
    config = write_config(tmp_path, demo_zim)
    done = run("query", "lights status", "--json", "--config", str(config))
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["type"] == "all_parts_failed"


def test_route_prints_the_plan_without_calling_sources(tmp_path: Path, demo_zim: Path) -> None:
    config = write_config(tmp_path, demo_zim)
    done = run(
        "route", "lights status and also what is the weather", "--json", "--config", str(config)
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    # each part with the sources it would try, and those out now (both disabled here)
    assert plan["parts"] == [
        {
            "query": "lights status",
            "source": "ha",
            "stage": "intent_keyword",
            "sources": ["ha"],
            "unavailable": {"ha": "disabled"},
        },
        {
            "query": "what is the weather",
            "source": "forecast",
            "stage": "intent_keyword",
            "sources": ["forecast", "kiwix"],
            "unavailable": {"forecast": "disabled"},
        },
    ]
    said = run("route", "lights status and also what is the weather", "--config", str(config))
    assert said.returncode == 0, said.stderr
    assert (
        "'lights status' -> ha (intent_keyword); ha is disabled, and nothing stands in: "
        "it would fail" in said.stdout
    )
    assert "forecast is disabled: kiwix would answer" in said.stdout


def test_route_input_reads_lines_and_jsonl(tmp_path: Path, demo_zim: Path) -> None:
    config = write_config(tmp_path, demo_zim)
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        '{"text": "lights status"}\n\nwho was marie curie\n'
        '{"text": "weather; lights", "expected": "x"}\n'
    )
    done = run("route", "--input", str(queries), "--config", str(config))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["query"] for line in lines] == [
        "lights status",
        "who was marie curie",
        "weather; lights",
    ]
    assert [p["source"] for p in lines[2]["parts"]] == ["forecast", "ha"]
    assert lines[1]["parts"][0]["stage"] == "intent_default"


def test_a_reader_that_stops_reading_ends_the_command_quietly(
    tmp_path: Path, demo_zim: Path
) -> None:
    """`search route --input ... | head -1`: the pipe closes while lines are still coming;
    the command stops, exit 141 (128 + SIGPIPE) and nothing on stderr."""
    config = write_config(tmp_path, demo_zim)
    queries = tmp_path / "queries.txt"
    queries.write_text("".join(f"who wrote book number {i}\n" for i in range(2000)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "search", "route", "--input", str(queries)]
    with subprocess.Popen(
        [*command, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = json.loads(process.stdout.readline())
        process.stdout.close()  # as `head -1` exits
        stderr = process.stderr.read().decode()
        code = process.wait(timeout=120)
    assert first["query"] == "who wrote book number 0"
    assert (code, stderr) == (141, "")


@pytest.mark.parametrize(
    ("config_text", "needle"),
    [
        ("routing: {default_source: nowhere}\n", "routing.default_source"),
        ("sources: {kiwix: {type: zim, paths: [a.zim], colour: red}}\n", "sources.kiwix.colour"),
        ("sources: {kiwix: {type: nope}}\n", "sources.kiwix.type"),
        ("server: {port: high}\n", "server.port"),
        ("sources: {kiwix: {type: zim, paths: ['${NOT_SET_ANYWHERE}']}}\n", "NOT_SET_ANYWHERE"),
        ("sources: [\n", "not valid YAML"),
    ],
)
def test_bad_config_exits_2_naming_the_key(tmp_path: Path, config_text: str, needle: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(config_text)
    done = run("route", "hello", "--config", str(path))
    assert done.returncode == 2
    assert needle in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_usage_exits_2(tmp_path: Path, demo_zim: Path) -> None:
    config = write_config(tmp_path, demo_zim)
    assert run("route", "--config", str(config)).returncode == 2
    assert run("frobnicate").returncode == 2
    missing = run("route", "--input", str(tmp_path / "none.txt"), "--config", str(config))
    assert missing.returncode == 2 and "--input" in missing.stderr
    assert run("query", "   ", "--config", str(config)).returncode == 2


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        # a binary file: found on its line, not as a UnicodeDecodeError mid-read
        (bytes(range(128, 256)) * 20, "queries.txt: line 1 is not UTF-8 text"),
        (b"who was marie curie\n\xff\xfe lights\n", "queries.txt: line 2 is not UTF-8 text"),
        # valid JSON, but no UTF-8 carries a lone surrogate: the check one TEXT gets
        (b'who was marie curie\n{"text": "\\ud800 hello"}\n', "line 2: query: not valid Unicode"),
        (b"a" * 10_000 + b"\n", "line 1: query: longer than the maximum of 1000 characters"),
        (b'{"text": ' + b"[" * 10_000 + b"\n", "line 1 is not valid JSON"),  # too deep
        # a line no query can fill (here 8 MB of NUL bytes and no line end): refused once
        # that much of it is read, not held whole first
        (b"\0" * 8_000_000, "line 1 is over 13,024 characters (a query may have 1,000)"),
    ],
    ids=["binary", "bad-utf8-line", "lone-surrogate", "too-long", "too-deep", "endless-line"],
)
def test_a_bad_input_line_exits_2_naming_it(
    tmp_path: Path, demo_zim: Path, content: bytes, needle: str
) -> None:
    config = write_config(tmp_path, demo_zim)
    queries = tmp_path / "queries.txt"
    queries.write_bytes(content)
    done = run("route", "--input", str(queries), "--config", str(config))
    assert (done.returncode, done.stdout) == (2, "")  # nothing routed before the bad line
    assert needle in done.stderr
    assert "Traceback" not in done.stderr


def test_route_input_skips_a_byte_order_mark(tmp_path: Path, demo_zim: Path) -> None:
    """An editor's BOM (and CRLF line ends) is not part of the first line's JSON."""
    config = write_config(tmp_path, demo_zim)
    queries = tmp_path / "queries.jsonl"
    queries.write_bytes(b'\xef\xbb\xbf{"text": "who was marie curie"}\r\nlights status\r\n')
    done = run("route", "--input", str(queries), "--config", str(config))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["query"] for line in lines] == ["who was marie curie", "lights status"]


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_bad_port_exits_2_before_loading_anything(tmp_path: Path, port: str) -> None:
    done = run("serve", "--port", port, "--config", str(tmp_path / "not-read.yaml"))
    assert done.returncode == 2
    assert "--port" in done.stderr and "Traceback" not in done.stderr


def test_a_port_in_use_exits_1(tmp_path: Path, demo_zim: Path) -> None:
    """uvicorn exits 3 when it cannot bind, not a status of ours: a failure, exit 1."""
    config = write_config(tmp_path, demo_zim)
    port = yaml.safe_load(config.read_text())["server"]["port"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        done = run("serve", "--config", str(config))
    assert done.returncode == 1
    assert f"the server did not start on 127.0.0.1:{port}" in done.stderr
    assert "address already in use" in done.stderr and "Traceback" not in done.stderr


def test_a_source_that_cannot_start_is_one_line_not_a_traceback(
    tmp_path: Path, demo_zim: Path
) -> None:
    config = write_config(tmp_path, demo_zim)
    data = yaml.safe_load(config.read_text())
    data["sources"]["kiwix"]["paths"] = [str(tmp_path / "absent.zim")]
    config.write_text(yaml.safe_dump(data))
    done = run("serve", "--config", str(config))
    assert done.returncode == 1
    assert f"start-up failed: ZimUnavailable: ZIM file not found: {tmp_path}" in done.stderr
    assert "Traceback" not in done.stderr
    assert "the server did not start" in done.stderr


def test_a_damaged_trace_store_is_one_line_not_a_traceback(tmp_path: Path, demo_zim: Path) -> None:
    """The store holds the labels too: a file there that is no SQLite database ends the
    start-up naming `trace.path`, as `search label` or `search fit` say it."""
    config = write_config(tmp_path, demo_zim)
    data = yaml.safe_load(config.read_text())
    store = tmp_path / "damaged.db"
    store.write_bytes(b"SQLite format 3\x00" + b"\xff" * 20_000)
    data["trace"] = {"enabled": True, "path": str(store)}
    config.write_text(yaml.safe_dump(data))
    done = run("serve", "--config", str(config))
    assert done.returncode == 1
    assert f"start-up failed: trace.path: cannot open {store}" in done.stderr
    assert "Traceback" not in done.stderr
    assert "the server did not start" in done.stderr


def test_a_source_that_cannot_start_in_process_is_one_line_too(
    tmp_path: Path, demo_zim: Path
) -> None:
    """`search query` with no server running starts the sources itself: a ZIM that is
    not there is said as `search serve` says it, exit 1, not a traceback."""
    config = write_config(tmp_path, demo_zim)
    data = yaml.safe_load(config.read_text())
    data["sources"]["kiwix"]["paths"] = [str(tmp_path / "absent.zim")]
    config.write_text(yaml.safe_dump(data))
    done = run("query", "who wrote hamlet", "--config", str(config))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"search: start-up failed: ZimUnavailable: ZIM file not found: {tmp_path}/absent.zim"
    ]
    # a dry run starts no source: it plans as ever
    done = run("route", "who wrote hamlet", "--local", "--config", str(config))
    assert done.returncode == 0, done.stderr


def test_route_input_names_the_line_of_a_query_with_too_many_parts(
    tmp_path: Path, demo_zim: Path
) -> None:
    """Blank lines are skipped, but they still count: the error names the file's line."""
    config = write_config(tmp_path, demo_zim)
    queries = tmp_path / "queries.txt"
    queries.write_text("who wrote hamlet\n\n\na; b; c; d; e; f; g; h; i; j\n")
    done = run("route", "--input", str(queries), "--config", str(config))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("search: --input: line 4: "), done.stderr
    assert "routing.max_parts" in done.stderr


@pytest.mark.parametrize(
    "line",
    ['{"text": "   "}', '{"text": ""}', "\u200b\u200b", '{"text": "\\u200b"}'],
    ids=["jsonl-spaces", "jsonl-empty", "zero-width-line", "jsonl-zero-width"],
)
def test_route_input_refuses_an_invisible_only_query_naming_its_line(
    tmp_path: Path, demo_zim: Path, line: str
) -> None:
    """An invisible-only query is bad input (exit 2), as one TEXT is; only a blank line
    of a plain-text file is skipped."""
    config = write_config(tmp_path, demo_zim)
    queries = tmp_path / "queries.txt"
    queries.write_text(f"who wrote hamlet\n\n{line}\n", encoding="utf-8")
    done = run("route", "--input", str(queries), "--config", str(config))
    assert (done.returncode, done.stdout) == (2, "")
    assert "search: --input: line 3: query: must not be empty" in done.stderr


def test_text_output_names_no_source_in_words(tmp_path: Path, demo_zim: Path) -> None:
    """A part no source serves reads "no source", not Python's None; --json keeps null."""
    config = write_config(tmp_path, demo_zim, routes={"none": {"keywords": ["alarm"]}})
    done = run("query", "set an alarm for 7", "--local", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "[0] 'set an alarm for 7' -> no source (unserved)" in done.stdout
    assert "None" not in done.stdout

    done = run("route", "set an alarm for 7", "--local", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "'set an alarm for 7' -> no source (intent_default)" in done.stdout
    assert "None" not in done.stdout

    done = run("route", "set an alarm for 7", "--json", "--local", "--config", str(config))
    assert json.loads(done.stdout)["parts"][0]["source"] is None
