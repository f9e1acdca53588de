"""scripts/fetch_fit_data.py reads Banking77 and MultiWOZ from a git directory laid out as
their repositories are (banking_data/{train,test}.csv; MultiWOZ 2.2's train/, dev/, test/
dialogue files in the schema-guided format its README names). The repositories here are
real git repositories made in a temporary directory, with a few rows of each kind."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import subprocess
from pathlib import Path
from types import ModuleType

from tests.support.git_repo import commit_files

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fetch_fit_data", ROOT / "scripts/fetch_fit_data.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _repo(tmp: Path, files: dict[str, str]) -> str:
    commit_files(tmp, files)
    return str(tmp / ".git")


def _csv(rows: list[tuple[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["text", "category"])
    writer.writerows(rows)
    return out.getvalue()


def test_banking77_takes_five_short_train_rows_per_intent_and_five_others_to_check(
    tmp_path: Path,
) -> None:
    fetch = _script()
    train = [(f"card question {i}", "card_arrival") for i in range(9)]
    train += [("what is the current exchange rate?", "exchange_rate")]
    train += [
        ("top up " + "very " * 30 + "slowly", "top_up_limits"),
        ("top up failed", "top_up_limits"),
    ]
    train += [("Is my card lost?", "lost_or_stolen_card")]
    test = [("a test sentence", "card_arrival")]
    git_dir = _repo(
        tmp_path, {"banking_data/train.csv": _csv(train), "banking_data/test.csv": _csv(test)}
    )

    rows, check = fetch.banking77(git_dir, exclude={"is my card lost"})

    assert {r["route"] for r in rows + check} == {"none"}
    # The other four card_arrival rows are the check set, none of them a prior row.
    assert [r["origin"] for r in check] == ["banking77:card_arrival"] * 4
    assert not {r["text"] for r in check} & {r["text"] for r in rows}
    origins = [r["origin"] for r in rows]
    assert origins.count("banking77:card_arrival") == 5
    assert [r["text"] for r in rows if r["origin"] == "banking77:top_up_limits"] == [
        "top up failed"
    ]
    texts = {r["text"] for r in rows + check}
    assert "a test sentence" not in texts  # test.csv is never read
    assert "what is the current exchange rate?" not in texts  # a web question here
    assert "Is my card lost?" not in texts  # an evaluation text, compared as words
    assert fetch.banking77(git_dir, exclude=set()) == fetch.banking77(git_dir, exclude=set())


def _dialogue(ident: str, first: str, services: list[str]) -> dict[str, object]:
    return {
        "dialogue_id": ident,
        "services": services,
        "turns": [
            {"speaker": "USER", "turn_id": "0", "utterance": first, "frames": []},
            {"speaker": "SYSTEM", "turn_id": "1", "utterance": "Sure.", "frames": []},
            {"speaker": "USER", "turn_id": "2", "utterance": "later turn", "frames": []},
        ],
    }


def test_multiwoz_takes_the_first_user_turn_of_train_dialogues_only(tmp_path: Path) -> None:
    fetch = _script()
    files = {}
    for number in range(1, fetch.MULTIWOZ_FILES + 1):
        dialogues = [
            _dialogue(f"T{number}", f"I need a hotel in the north, number {number}", ["hotel"])
        ]
        files[f"data/MultiWOZ_2.2/train/dialogues_{number:03d}.json"] = json.dumps(dialogues)
    files["data/MultiWOZ_2.2/train/dialogues_001.json"] = json.dumps(
        [
            _dialogue("A", "Book me a taxi to the station  please", ["taxi"]),
            _dialogue("B", "word " * 31, ["train"]),
            _dialogue("C", "Where is the museum?", ["attraction"]),
        ]
    )
    files["data/MultiWOZ_2.2/dev/dialogues_001.json"] = json.dumps([_dialogue("D", "dev turn", [])])
    files["data/MultiWOZ_2.2/test/dialogues_001.json"] = json.dumps(
        [_dialogue("E", "test turn", [])]
    )
    git_dir = _repo(tmp_path, files)

    rows = fetch.multiwoz(git_dir, exclude={"where is the museum"})

    texts = {r["text"]: r["origin"] for r in rows}
    assert texts["Book me a taxi to the station please"] == "multiwoz:taxi"
    assert texts["I need a hotel in the north, number 17"] == "multiwoz:hotel"
    assert len(rows) == fetch.MULTIWOZ_FILES  # 16 hotel turns and the taxi one
    assert not {"dev turn", "test turn", "later turn", "Sure.", "Where is the museum?"} & set(texts)
    assert {r["route"] for r in rows} == {"none"}


def test_without_the_evaluation_sets_it_exits_2_before_fetching_anything(tmp_path: Path) -> None:
    """No row could be checked against the evaluation texts, so nothing is fetched."""
    import os
    import sys

    script = Path(__file__).resolve().parents[2] / "scripts" / "fetch_fit_data.py"
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "ROUTING_EVAL_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "no evaluation sets" in done.stderr and str(tmp_path) in done.stderr
