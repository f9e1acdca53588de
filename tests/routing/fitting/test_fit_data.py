"""The committed fit corpora: routing/fit_data/*.jsonl, which `search fit` reads as they are,
and routing/fit_data/staged/*.jsonl, fetched but not fitted on. Each row names a shipped
route, each file is accounted for in NOTICE.md, and no row of a corpus fetched or written
for fitting is an evaluation text or a shipped exemplar, so a held-out figure over the
evaluation sets is not a figure over the fit's own rows."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from routing.fitting.fit import shipped_rows
from routing.stages.route_data import shipped_routes
from tests.support.require import missing_data

ROOT = Path(__file__).resolve().parents[3]
FIT_DATA = ROOT / "routing" / "fit_data"
STAGED = FIT_DATA / "staged"  # fetched, not fitted on (NOTICE.md says why)
# Copied from the evaluation directory on purpose (NOTICE.md): the rest must not be.
EVAL_COPIES = {"slurp_devel", "ha_intents_tests"}


def _files() -> list[Path]:
    """Every committed corpus file, fitted or staged."""
    return [*sorted(FIT_DATA.glob("*.jsonl")), *sorted(STAGED.glob("*.jsonl"))]


def _plain(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def _rows(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def test_every_row_names_a_shipped_route_and_every_file_is_in_the_notice() -> None:
    routes = set(shipped_routes())
    notice = (FIT_DATA / "NOTICE.md").read_text("utf-8")
    for path in _files():
        name = path.relative_to(FIT_DATA).as_posix()
        assert f"| {name} |" in notice, name
        for row in _rows(path):
            assert row["text"].strip() and row["origin"], (path.name, row)
            assert row["route"] in routes, (path.name, row)
    assert len(shipped_rows(FIT_DATA)) == sum(len(_rows(p)) for p in FIT_DATA.glob("*.jsonl"))


def test_the_written_distinctions_pair_kiwix_with_web_and_none() -> None:
    rows = _rows(FIT_DATA / "distinctions.jsonl")
    assert all(r["origin"].startswith("written:") for r in rows)
    by_route = Counter(r["route"] for r in rows)
    assert set(by_route) == {"kiwix", "web", "none"}
    assert min(by_route.values()) >= 40, by_route
    assert len({_plain(r["text"]) for r in rows}) == len(rows)  # no sentence twice


def test_no_fetched_or_written_fit_row_is_an_evaluation_text() -> None:
    from bench.routing_quality import default_eval_dir

    eval_dir = default_eval_dir()
    if not eval_dir.is_dir():
        missing_data("the evaluation sets", f"none in {eval_dir} (set ROUTING_EVAL_DIR)")
    evaluated = {
        _plain(json.loads(line)["text"])
        for path in eval_dir.glob("*.jsonl")
        for line in path.read_text("utf-8").splitlines()
        if line.strip()
    }
    assert len(evaluated) > 1000
    exemplars = {_plain(t) for route in shipped_routes().values() for t in route.exemplars}
    fetched = {
        _plain(row["text"])
        for path in _files()
        if path.stem not in EVAL_COPIES
        for row in _rows(path)
    }
    assert fetched and not fetched & exemplars
    copied = [
        (path.name, row["text"])
        for path in _files()
        if path.stem not in EVAL_COPIES
        for row in _rows(path)
        if _plain(row["text"]) in evaluated
    ]
    assert copied == []
