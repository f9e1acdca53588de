"""`search trace list|show`: the table, the narrative, filters, and `--decision-only`.

Traces are recorded by the real Service into a real SQLite file; the CLI is the real
`search.cli.main`, run in-process (the scripted source kind exists only in this process).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.search.correction.test_replay import SOURCES, cli, record, write_config

QUERY = "if it rains in zanzibar tomorrow, are the lights on? and also lights status in quokkaville"


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, list[str]]:
    db = tmp_path / "traces.db"
    config = write_config(
        tmp_path / "c.yaml",
        db,
        sources={**SOURCES, "broken": {"fail": "error"}},
        keywords={"ha": ["lights"], "web": ["news"], "broken": ["gizmo"]},
    )
    outcomes = record(config, ["lights status", "history of rome", "gizmo", QUERY])
    return config, [o.trace_id for o in outcomes]


def test_show_prints_the_table_in_seq_order_and_the_narrative(
    recorded: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    config, ids = recorded
    code, out = cli(capsys, "trace", "show", ids[0], "--config", str(config))
    assert code == 0, out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("seq"))
    assert lines[header].split() == [
        "seq",
        "t_ms",
        "part",
        "step",
        "source/decision",
        "outcome",
        "elapsed",
        "reason",
    ]
    rows = [line.split() for line in lines[header + 1 : header + 5]]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert [r[3] for r in rows] == [
        "intent_keyword",
        "source_invoked",
        "fallback",
        "source_invoked",
    ]
    assert rows[1][-1] == "connection_refused"
    (story,) = [line for line in lines if line.startswith("part 0")]
    assert story.startswith(
        "part 0 'lights status' went to ha by keyword; ha refused the connection after "
    )
    assert "; fallback to web declared; web answered 3 results in " in story
    assert "query: 'lights status'" in out


def test_show_accepts_a_unique_prefix_and_reports_unknown_ids(
    recorded: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    config, ids = recorded
    code, out = cli(capsys, "trace", "show", ids[2][:10], "--config", str(config), "--json")
    assert code == 0
    trace = json.loads(out)
    assert trace["trace_id"] == ids[2] and trace["failed"] and trace["status_code"] == 502
    code, out = cli(capsys, "trace", "show", "deadbeef" * 4, "--config", str(config))
    assert code == 1 and "no such trace" in out  # a failed lookup, not bad usage


def test_decision_only_contains_no_query_text(
    recorded: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    config, ids = recorded
    full_code, full = cli(capsys, "trace", "show", ids[3], "--config", str(config), "--json")
    assert full_code == 0
    texts = {QUERY}
    for event in json.loads(full)["chain"]:
        for key in ("query", "condition", "consequence", "remainder"):
            if event.get(key):
                texts.add(event[key])
        texts.update(event.get("parts", []))
    assert len(texts) >= 4
    words = {"zanzibar", "quokkaville", "rains", "tomorrow", "lights"}
    for extra in ([], ["--json"]):
        code, out = cli(
            capsys, "trace", "show", ids[3], "--decision-only", "--config", str(config), *extra
        )
        assert code == 0, out
        lowered = out.lower()
        for text in texts | words:
            assert text.lower() not in lowered, f"{text!r} appears in --decision-only {extra}"
        # ... and the structure and reasons are still there.
        assert "conditional_detected" in out and "intent_keyword" in out
        assert "connection_refused" in out and "fallback" in out
    code, out = cli(capsys, "trace", "show", ids[3], "--decision-only", "--config", str(config))
    assert "the request: a condition was found" in out or "the query was split into" in out


def test_list_filters_and_pages(
    recorded: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    config, ids = recorded

    def listed(*argv: str) -> list[str]:
        code, out = cli(capsys, "trace", "list", "--config", str(config), "--json", *argv)
        assert code == 0, out
        return [t["trace_id"] for t in json.loads(out)["traces"]]

    assert listed() == ids[::-1]  # newest first
    assert listed("--fallback") == [ids[3], ids[0]]
    assert listed("--failed") == [ids[2]]
    assert listed("--source", "broken") == [ids[2]]
    assert listed("--outcome", "error") == [ids[3], ids[2], ids[0]]
    assert listed("--step", "conditional_detected") == [ids[3]]
    assert listed("--text", "ROME") == [ids[1]]
    assert listed("--since", "1h") == ids[::-1]
    assert listed("--until", "1h") == []
    assert listed("--limit", "2") == [ids[3], ids[2]]
    assert listed("--limit", "2", "--offset", "2") == [ids[1], ids[0]]
    _, out = cli(capsys, "trace", "list", "--config", str(config), "--json", "--limit", "3")
    cursor = json.loads(out)["next_cursor"]
    assert listed("--limit", "3", "--cursor", cursor) == [ids[0]]


def test_list_prints_a_table_and_bad_filters_exit_2(
    recorded: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config, ids = recorded
    code, out = cli(capsys, "trace", "list", "--config", str(config))
    assert code == 0
    assert out.splitlines()[0].split()[:3] == ["trace_id", "time", "status"]
    assert ids[0] in out and "4 of 4 traces" in out
    code, out = cli(capsys, "trace", "list", "--config", str(config), "--outcome", "great")
    assert code == 2 and "--outcome" in out
    code, out = cli(capsys, "trace", "list", "--config", str(config), "--since", "whenever")
    assert code == 2 and "search: --since: 'whenever' is not a time" in out, out
    code, out = cli(
        capsys, "trace", "list", "--config", str(config), "--offset", "1", "--cursor", "3"
    )
    assert code == 2 and "search: --cursor: cannot be combined with offset" in out, out
    code, out = cli(capsys, "trace", "list", "--store", str(tmp_path / "missing.db"))
    assert code == 2 and "no trace store" in out
    assert not (tmp_path / "missing.db").exists()


def test_list_before_the_first_request_is_empty_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh data directory: the config's store is not written yet, and nothing in it is
    an empty list (exit 0) in text and JSON; the file is not created by looking."""
    db = tmp_path / "traces.db"
    config = write_config(tmp_path / "c.yaml", db, sources=SOURCES, keywords={"ha": ["lights"]})
    code, out = cli(capsys, "trace", "list", "--config", str(config))
    assert code == 0, out
    assert out.splitlines()[0] == f"0 of 0 traces (none stored yet at {db})"
    code, out = cli(capsys, "trace", "list", "--config", str(config), "--json")
    assert code == 0 and json.loads(out)["traces"] == [] and json.loads(out)["total"] == 0
    code, out = cli(capsys, "trace", "list", "--config", str(config), "--since", "whenever")
    assert code == 2 and "--since" in out
    code, out = cli(capsys, "trace", "show", "c0ffee", "--config", str(config))
    assert code == 2 and "no trace store" in out
    assert not db.exists()


def test_the_narrative_reads_stages_that_passed_and_follow_ups() -> None:
    from search.traces.narrative import narrative

    chain = [
        {
            "step": "intent_semantic",
            "seq": 0,
            "t_ms": 1.0,
            "part": "0",
            "query": "and tomorrow?",
            "decision": None,
            "outcome": "below_threshold",
            "similarity": 0.41,
            "matched_query": "weather today",
        },
        {
            "step": "intent_session",
            "seq": 1,
            "t_ms": 2.0,
            "part": "0",
            "query": "and tomorrow?",
            "decision": "forecast",
            "previous_query": "weather today",
        },
        {
            "step": "source_invoked",
            "seq": 2,
            "t_ms": 9.0,
            "part": "0",
            "query": "and tomorrow?",
            "source": "forecast",
            "outcome": "timeout",
            "elapsed_ms": 5000.0,
            "result_count": 0,
        },
    ]
    (line,) = narrative(chain)
    assert line == (
        "part 0 'and tomorrow?' the semantic stage did not decide (below_threshold, "
        "best similarity 0.41 to 'weather today'); went to forecast as a follow-up of "
        "'weather today'; forecast timed out after 5000 ms"
    )
    (safe,) = narrative(chain, with_text=False)
    assert "tomorrow" not in safe and "weather today" not in safe


def test_the_narrative_says_why_the_rules_split_a_query() -> None:
    from search.traces.narrative import sentence

    event = {
        "step": "decomposed",
        "seq": 0,
        "t_ms": 0.1,
        "part": "",
        "query": "will it rain and hall lights too",
        "parts": ["will it rain", "hall lights too"],
        "claimed": [{"part": 1, "routes": ["forecast", "ha"]}],
    }
    assert sentence(event) == (
        "the query was split into 2 parts: 'will it rain', 'hall lights too' (part 1 split off "
        "because the keyword rules claim it for ha, the part before for forecast)"
    )
    assert sentence({**event, "claimed": None}) == (
        "the query was split into 2 parts: 'will it rain', 'hall lights too'"
    )


@contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """`directory` made read-only for this process: root (as the suite runs in CI) is not
    stopped by a mode, so there it is made immutable (`chattr +i`), as a read-only mount
    would be; SQLite then cannot create the -shm file a WAL store is read through."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(directory)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
    else:
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(0o755)


@pytest.mark.parametrize(
    "command",
    [
        ("trace", "list"),
        ("trace", "show", "{id}"),
        ("label", "{id}", "web"),
        ("label", "--export", "{out}"),
        ("replay", "{id}"),
    ],
)
def test_a_store_that_cannot_be_opened_is_one_line_naming_trace_path_and_exit_2(
    recorded: tuple[Path, list[str]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: tuple[str, ...],
) -> None:
    config, ids = recorded
    argv = [part.format(id=ids[0], out=tmp_path.parent / "labels.yaml") for part in command]
    for leftover in tmp_path.glob("traces.db-*"):  # as after a clean close: no -shm to reuse
        leftover.unlink()
    with read_only(tmp_path):
        code, out = cli(capsys, *argv, "--config", str(config))
    assert code == 2, out
    assert out.splitlines() == [
        f"search: trace.path: cannot open {tmp_path / 'traces.db'}: unable to open database file"
    ]


@pytest.mark.parametrize(
    "text",
    ["not-an-id", "A7EC2F00", "a7ec2f" + "0" * 27, "a7ec2f\x1b[31mred", "../traces.db"],
)
@pytest.mark.parametrize("command", [["trace", "show"], ["replay"], ["label"]])
def test_text_that_is_no_trace_id_is_bad_usage_said_safely(
    recorded: tuple[Path, list[str]],
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    text: str,
) -> None:
    """Not 32 lowercase hex digits (or a prefix of them): exit 2 naming what an id is,
    never exit 1's "no such trace", which would send the user looking for a lost trace;
    an escape sequence in it reaches the terminal written out, not obeyed."""
    config, _ = recorded
    extra = ["web"] if command == ["label"] else []
    code, out = cli(capsys, *command, text, *extra, "--config", str(config))
    assert code == 2, out
    assert "not a trace id (32 lowercase hex digits" in out
    assert "no such trace" not in out
    assert "\x1b" not in out


def test_show_says_why_a_prefix_names_no_one_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefix too short to look up, or shared by several traces, is bad usage (exit 2)
    said as such; one no trace starts with is a failed lookup (exit 1)."""
    import search.service

    ids = iter(["a7ec2f00" + "0" * 24, "a7ec2f11" + "1" * 24])
    monkeypatch.setattr(search.service, "new_trace_id", lambda: next(ids))
    db = tmp_path / "traces.db"
    config = write_config(tmp_path / "c.yaml", db, sources=SOURCES, keywords={"ha": ["lights"]})
    record(config, ["lights status", "history of rome"])

    code, out = cli(capsys, "trace", "show", "a7ec2", "--config", str(config))
    assert code == 2 and "trace a7ec2: a trace id prefix needs at least 6 characters" in out
    code, out = cli(capsys, "trace", "show", "a7ec2f", "--config", str(config))
    assert code == 2 and "trace a7ec2f: the prefix matches several traces" in out
    code, out = cli(capsys, "trace", "show", "a7ec2f1", "--config", str(config), "--json")
    assert code == 0 and json.loads(out)["trace_id"] == "a7ec2f11" + "1" * 24
    code, out = cli(capsys, "trace", "show", "c0ffee", "--config", str(config))
    assert code == 1 and "trace c0ffee: no such trace" in out
    code, out = cli(capsys, "replay", "a7ec2f", "--config", str(config))
    assert code == 2 and "the prefix matches several traces" in out
    code, out = cli(capsys, "label", "a7ec2f", "web", "--config", str(config))
    assert code == 2 and "trace a7ec2f: the prefix matches several traces" in out
    code, out = cli(capsys, "label", "a7ec2", "web", "--config", str(config))
    assert code == 2 and "needs at least 6 characters" in out
    code, out = cli(capsys, "label", "c0ffee", "web", "--config", str(config))
    assert code == 1 and "trace c0ffee: no such trace" in out
