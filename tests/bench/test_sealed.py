"""The sealed corpora are intact, and their one scoring script prints aggregates only.

The script runs the real pipeline (a `Service` with the real embedding model, dry runs)
over a tiny set generated here; no sealed row is read by these tests beyond its checksum,
count and field names.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from bench import sealed_quality

ROOT = Path(__file__).resolve().parents[2]

# Each sentence carries an invented word, so a leak of any part of it is visible.
GENERATED = [
    ("will it snow in Trondheimsvik tomorrow morning", "forecast"),
    ("how windy is it going to be in Quellbarrow this weekend", "forecast"),
    ("turn off the lamp in the quorblesnatch room", "ha"),
    ("dim the zentrafold hallway lights to half", "ha"),
    ("who wrote the novel Blimfropple Returns", "kiwix"),
    ("what is the capital of the kingdom of Vorlessia", "kiwix"),
    ("set an alarm for the vexlorian meeting at seven", "none"),
    ("remind me to call Grundlewick on friday", "none"),
]
MARKERS = (
    "trondheimsvik",
    "quellbarrow",
    "quorblesnatch",
    "zentrafold",
    "blimfropple",
    "vorlessia",
    "vexlorian",
    "grundlewick",
)


def write_sealed(directory: Path, rows: list[tuple[str, str]]) -> None:
    (directory / "data").mkdir(parents=True)
    body = "".join(json.dumps({"text": t, "expected": r, "label": r}) + "\n" for t, r in rows)
    blob = gzip.compress(body.encode("utf-8"), mtime=0)
    (directory / "data" / "generated.jsonl.gz").write_bytes(blob)
    digest = hashlib.sha256(blob).hexdigest()
    (directory / "SHA256SUMS").write_text(f"{digest}  data/generated.jsonl.gz\n")


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "sealed_quality.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_committed_sealed_files_match_their_checksums_and_the_mapping() -> None:
    files = sealed_quality.verify(sealed_quality.SEALED_DIR)
    mapping = yaml.safe_load((sealed_quality.SEALED_DIR / "mapping.yaml").read_text())
    assert set(files) == set(mapping["corpora"])
    for path in files.values():
        lines = gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()
        assert 0 < len(lines) <= 1500
        fields = {key for line in lines for key in json.loads(line)}
        assert fields == {"text", "expected", "label"}
        assert {json.loads(line)["expected"] for line in lines} <= set(sealed_quality.LABELS)


def test_a_changed_sealed_file_is_refused_with_exit_2(tmp_path: Path) -> None:
    shutil.copytree(sealed_quality.SEALED_DIR, tmp_path / "sealed")
    target = tmp_path / "sealed" / "data" / "fb_mtod_en_eval.jsonl.gz"
    target.write_bytes(target.read_bytes() + b"\0")
    found = run_script("--isolated", "--sealed-dir", str(tmp_path / "sealed"))
    assert found.returncode == 2
    assert "fb_mtod_en_eval.jsonl.gz does not match its SHA-256" in found.stderr
    assert found.stdout == ""


def test_the_script_prints_dated_aggregates_and_never_a_sentence(tmp_path: Path) -> None:
    write_sealed(tmp_path, GENERATED)
    found = run_script("--isolated", "--sealed-dir", str(tmp_path), "--compound", "8")
    assert found.returncode == 0, found.stderr[-2000:]
    lines = found.stdout.splitlines()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    today = datetime.date.today().isoformat()
    assert lines and all(line.startswith(f"{today} {commit}") for line in lines)
    summary = [line for line in lines if "sealed generated: all " in line]
    # the share, its counts and its 95% Wilson interval
    assert len(summary) == 1 and "1.000 (8/8, 95% CI 0.676-1.000);" in summary[0]
    assert all(f"{route} " in summary[0] for route in ("forecast", "ha", "kiwix", "none"))
    assert any("compound (two routes joined):" in line and "/8, 95% CI " in line for line in lines)
    assert any(line.split(" ", 2)[2].startswith("sealed stage intent_") for line in lines)
    assert any("none routed to a source" in line and "/2, 95% CI " in line for line in lines)
    answering = [
        line for line in lines if "sealed generated, by the source that answers: all " in line
    ]
    assert len(answering) == 1 and "(8/8, 95% CI 0.676-1.000);" in answering[0]
    printed = (found.stdout + found.stderr).lower()
    for text, _ in GENERATED:
        assert text.lower() not in printed
    for marker in MARKERS:
        assert marker not in printed


def test_a_redirected_part_is_judged_by_what_the_redirect_stated() -> None:
    """A part the time redirect moved counts once in the pipeline's ECE, at its new route
    with the redirect's confidence; the intent stage's own statement still counts for that
    stage."""
    row = sealed_quality.Row("generated", "who is the current mayor of Quellbarrow", ("web",))
    moved = sealed_quality.Outcome(
        row,
        ("web",),
        [
            sealed_quality.Decided("intent_semantic", "kiwix", 0.99, final=False),
            sealed_quality.Decided("time_sensitive", "web", 0.9),
        ],
    )
    found = sealed_quality.figures([moved], [])
    assert found["stages"]["intent_semantic"]["right"] == 0.0
    assert found["stages"]["time_sensitive"] == {
        "parts": 1,
        "stated": 0.9,
        "right": 1.0,
        "ece": 0.1,
    }
    assert found["pipeline_ece"] == 0.1  # not (0.99 + 0.1) / 2: the moved statement only


def test_what_each_expected_route_ended_as_is_counted_and_where_the_misses_ended() -> None:
    """Counts only: per corpus and expected route, the rows per answer, and for the rows
    answered wrongly the stage that had the last word."""

    def outcome(
        text: str, labels: tuple[str, ...], *decided: sealed_quality.Decided
    ) -> sealed_quality.Outcome:
        row = sealed_quality.Row("generated", text, ("kiwix",))
        return sealed_quality.Outcome(row, labels, list(decided))

    found = sealed_quality.figures(
        [
            outcome("q1", ("kiwix",), sealed_quality.Decided("intent_semantic", "kiwix", 0.9)),
            outcome("q2", ("none",), sealed_quality.Decided("intent_default", "kiwix", 0.4)),
            outcome("q3", ("none",), sealed_quality.Decided("intent_default", "kiwix", 0.3)),
            outcome(
                "q4",
                ("web",),
                sealed_quality.Decided("intent_semantic", "kiwix", 0.9, final=False),
                sealed_quality.Decided("time_sensitive", "web", 0.8),
            ),
        ],
        [],
    )
    assert found["confusion"] == {"generated": {"kiwix": {"kiwix": 1, "none": 2, "web": 1}}}
    assert found["wrong_stages"] == {
        "generated": {"kiwix": {"intent_default": 2, "time_sensitive": 1}}
    }
    lines = sealed_quality.report(found, 1.0)
    assert "sealed generated: kiwix rows answered kiwix 1, none 2, web 1" in lines
    assert (
        "sealed generated: kiwix rows answered wrongly, last decided by intent_default 2, "
        "time_sensitive 1" in lines
    )


def test_a_part_left_to_the_default_counts_as_the_default_route_by_the_answering_source() -> None:
    """Two counts of the same outcomes: by decision, a part that ended at the default is
    `none` (no stage decided); by the source that answers, it is the default's route, which
    the service asks. Only an unserved part is `none` in both."""

    def outcome(expected: str, labels: str, answered: str) -> sealed_quality.Outcome:
        row = sealed_quality.Row("generated", "q", (expected,))
        decided = [sealed_quality.Decided("intent_default", answered, 0.3)]
        return sealed_quality.Outcome(row, (labels,), decided, (answered,))

    left_to_kiwix = outcome("kiwix", "none", "kiwix")  # an encyclopedic question: answered
    unserved = outcome("none", "none", "none")  # judged unserved: no source asked
    fell_to_kiwix = outcome("none", "none", "kiwix")  # a request no source serves: asked kiwix
    pair = sealed_quality.Outcome(
        sealed_quality.Row("compound", "q and r", ("kiwix", "web")),
        ("none", "web"),
        [],
        ("kiwix", "web"),
    )
    found = sealed_quality.figures([left_to_kiwix, unserved, fell_to_kiwix], [pair])
    assert found["corpus_routes"]["generated"] == {"kiwix": [0, 1], "none": [2, 2]}
    assert found["none_routed"] == [0, 2]
    assert found["compound"] == [0, 1]
    answered = found["answered"]
    assert answered["corpus_routes"]["generated"] == {"kiwix": [1, 1], "none": [1, 2]}
    assert answered["none_routed"] == [1, 2]
    assert answered["compound"] == [1, 1]
    assert answered["confusion"] == {
        "generated": {"kiwix": {"kiwix": 1}, "none": {"kiwix": 1, "none": 1}}
    }
    lines = sealed_quality.report(found, 1.0)
    by = "by the source that answers"
    assert (
        f"sealed generated, {by}: none answered by a source 0.500 (1/2, 95% CI 0.095-0.905)"
        in lines
    )
    assert any(line.startswith(f"sealed compound, {by}: 1.000 (1/1") for line in lines)
