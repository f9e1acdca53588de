"""scripts/fetch_sealed.py builds a sealed corpus from a real git repository laid out as
the pinned one is, maps its labels by bench/sealed/mapping.yaml, and prints counts only.

The repository here is made in a temporary directory with questions written for this
test, in the shape of DyKnow's `grc_generated.json` (a domain, a subject, for some domains
the relation asked, then `{"questions": {variant: text}, "answers": [...]}`)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.support.git_repo import commit_files

ROOT = Path(__file__).resolve().parents[2]

GRC = {
    "countries_byGDP": {
        "Ruritania": {
            "Head of Ruritania": {
                "questions": {
                    "generic": "Who rules Ruritania?",
                    "rephrased_1": "Who is the ruler of Ruritania?",
                    "rephrased_2": "Ruritania is ruled by whom?",
                    "contextualized": "Context for a model. Who rules Ruritania?",
                },
                "answers": ["someone"],
            }
        }
    },
    "companies_byRevenue": {
        "Acme": {
            "questions": {
                "generic": "Who leads Acme?",
                "rephrased_1": "Who is at the head of Acme?",
                "rephrased_2": "  who leads acme  ",  # the same words: one row
                "rephrased_3": "",
            },
            "answers": ["a", "b"],
        }
    },
}


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_sealed", ROOT / "scripts/fetch_sealed.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mirror(tmp: Path, name: str, files: dict[str, str]) -> str:
    """A git repository at `tmp/<owner+name>/repo`, as `--mirror-root` expects; its commit."""
    return commit_files(tmp / name.replace("/", "+") / "repo", files)


@pytest.fixture
def dyknow_spec() -> dict[str, object]:
    """The committed mapping of the dyknow corpus, so the test reads what ships."""
    corpora = yaml.safe_load((ROOT / "bench/sealed/mapping.yaml").read_text(encoding="utf-8"))
    return dict(corpora["corpora"]["dyknow"])


def test_dyknow_questions_are_read_per_variant_and_labelled_with_their_domain(
    tmp_path: Path, dyknow_spec: dict[str, object]
) -> None:
    script = _script()
    commit = _mirror(tmp_path, "owner/dyknow", {"grc_generated.json": json.dumps(GRC)})
    repo = script.Repo(tmp_path, "owner/dyknow", commit)
    read = sorted(script.dyknow_json(repo, dyknow_spec))
    assert ("Who rules Ruritania?", "generic/countries_byGDP") in read
    assert ("Who is at the head of Acme?", "rephrased_1/companies_byRevenue") in read
    assert ("Context for a model. Who rules Ruritania?", "contextualized/countries_byGDP") in read
    assert all(text for text, _ in read)  # an empty variant is no question
    assert len(read) == 7


def test_the_dyknow_build_keeps_each_asked_question_once_as_web_and_prints_no_text(
    tmp_path: Path, dyknow_spec: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script()
    dyknow_spec["commit"] = _mirror(
        tmp_path, str(dyknow_spec["repo"]), {"grc_generated.json": json.dumps(GRC)}
    )
    known = {script.normalised("Who is the ruler of Ruritania?")}  # as if the project had it
    blob = script.build("dyknow", dyknow_spec, tmp_path, 1500, known)
    rows = [json.loads(line) for line in gzip.decompress(blob).decode().splitlines()]
    assert sorted(row["text"] for row in rows) == [
        "Ruritania is ruled by whom?",
        "Who is at the head of Acme?",
        "Who leads Acme?",
        "Who rules Ruritania?",
    ]
    assert {row["expected"] for row in rows} == {"web"}
    printed = capsys.readouterr().out
    assert "dyknow: 4 usable, 4 kept {'web': 4}" in printed
    assert "'unmapped label': 1" in printed and "'already in the project': 1" in printed
    assert "'duplicate': 1" in printed
    assert "Ruritania" not in printed and "Acme" not in printed
