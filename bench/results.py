"""The results files the README figures are rendered from (`bench/results/NAME.json`).

A figure quoted to a reader comes from one of these files, and each file says which
command measured it, on which date and at which commit, so a figure can be traced back
and re-measured. `bench/figures.py` renders the README's figure blocks from them.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

# what every results file must say about where its figures come from
REQUIRED = ("bench", "command", "date", "commit", "source", "figures")
MEASURED = "measured"  # written by the bench itself, with --json-out
TRANSCRIBED = "transcribed from the dated run"  # a long run's printed figures, copied


def head_commit() -> str:
    """The short commit the measured code is at ("unknown" outside a git checkout)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def command_line(
    script: str, argv: Sequence[str], placeholders: Mapping[str, str] | None = None
) -> str:
    """The command a results file says measured it: `python SCRIPT` and the arguments as
    given, so a run with other flags does not pass for the default one. `placeholders`
    stands a word in for an option's value that belongs to one machine (a server's URL):
    {"--llm": "URL"} writes `--llm URL` for `--llm http://127.0.0.1:8012/v1` and for
    `--llm=http://...` alike."""
    placeholders = placeholders or {}
    shown = list(argv)
    for index, arg in enumerate(shown):
        option, equals, _ = arg.partition("=")
        if option not in placeholders:
            continue
        if equals:
            shown[index] = f"{option}={placeholders[option]}"
        elif index + 1 < len(shown):
            shown[index + 1] = placeholders[option]
    return shlex.join(["python", script, *shown])


def write(path: str | Path, bench: str, command: str, figures: dict[str, Any]) -> Path:
    """Write one bench's figures, dated today (UTC) at the current commit."""
    target = Path(path)
    body = {
        "bench": bench,
        "command": command,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "commit": head_commit(),
        "source": MEASURED,
        "figures": figures,
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(body, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return target


def problems(body: Any) -> list[str]:
    """What a results file lacks (empty when it is complete)."""
    if not isinstance(body, dict):
        return ["not a JSON object"]
    found = [f"missing {key!r}" for key in REQUIRED if key not in body]
    if "date" in body:
        try:
            dt.date.fromisoformat(str(body["date"]))
        except ValueError:
            found.append(f"date {body['date']!r} is not YYYY-MM-DD")
    if "source" in body and body["source"] not in (MEASURED, TRANSCRIBED):
        found.append(f"source {body['source']!r} is neither {MEASURED!r} nor {TRANSCRIBED!r}")
    if "figures" in body and not (isinstance(body["figures"], dict) and body["figures"]):
        found.append("figures is not a non-empty object")
    return found


def load(name: str, directory: Path = RESULTS) -> dict[str, Any]:
    """`bench/results/NAME.json`, checked; ValueError naming what is wrong."""
    path = directory / f"{name}.json"
    body = json.loads(path.read_text(encoding="utf-8"))
    wrong = problems(body)
    if wrong:
        raise ValueError(f"{path}: " + "; ".join(wrong))
    return body
