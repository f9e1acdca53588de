"""The figures the READMEs and docs/ show are the ones the benches recorded, with where they came from.

Each figure block (`<!-- figures:NAME -->`) must equal `bench/figures.py`'s rendering of the
committed results files, so a figure edited by hand, or a bench re-measured without the
README rewritten (`bench/figures.py --write`), fails here. The values the READMEs state of
the shipped artefacts (the fitted threshold, the corpus size) are read from the artefacts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import figures, results

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")
ROUTING = (ROOT / "docs" / "routing.md").read_text("utf-8")


@pytest.mark.parametrize("path", sorted(results.RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_results_file_says_what_measured_it_and_when(path: Path) -> None:
    body = json.loads(path.read_text("utf-8"))
    assert results.problems(body) == [], path.name
    assert re.fullmatch(r"[0-9a-f]{7,40}", body["commit"]), f"{path.name}: commit {body['commit']}"
    assert body["command"].startswith("python bench/"), f"{path.name}: {body['command']}"


def test_a_results_file_without_its_date_or_source_is_refused() -> None:
    body = json.loads((results.RESULTS / "route_batch.json").read_text("utf-8"))
    assert results.problems(body) == []
    del body["date"]
    body["source"] = "from memory"
    found = results.problems(body)
    assert "missing 'date'" in found
    assert any("from memory" in problem for problem in found)


@pytest.mark.parametrize("doc", figures.DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_block_is_its_rendering_of_the_committed_results(doc: Path) -> None:
    assert figures.stale(doc.read_text("utf-8")) == [], "run `python bench/figures.py --write`"


def test_the_figure_blocks_are_found_where_they_are() -> None:
    """A block in any reference page counts: the README links to them, and the check above
    would pass vacuously for a page `figures.DOCS` forgot."""
    for doc in (ROOT / "README.md", ROOT / "bench" / "README.md"):
        assert figures.blocks(doc.read_text("utf-8")), f"{doc} has no figure blocks"
    pages = {p for p in (ROOT / "docs").glob("*.md") if "<!-- figures:" in p.read_text("utf-8")}
    assert pages, "docs/ quotes figures"
    assert pages <= set(figures.DOCS)


def test_every_renderer_has_its_block_somewhere() -> None:
    shown = {name for doc in figures.DOCS for name, _ in figures.blocks(doc.read_text("utf-8"))}
    assert shown == set(figures.RENDER)


def test_a_figure_edited_by_hand_is_caught() -> None:
    edited = README.replace("1,000 queries in ", "1,000 queries in 1", 1)
    assert edited != README
    assert figures.stale(edited) == ["route_batch"]


def test_an_unknown_block_is_refused() -> None:
    with pytest.raises(KeyError, match="nowhere"):
        figures.rendered("<!-- figures:nowhere -->\n1 s\n<!-- /figures -->")


def test_the_stated_threshold_is_the_shipped_fit() -> None:
    shipped = json.loads((ROOT / "routing/fitted/confidence.json").read_text("utf-8"))
    found = re.search(r"default: what the fit measured as best, ([0-9]+(?:\.[0-9]+)?)\)", ROUTING)
    assert found, "docs/routing.md states the default min_confidence"
    assert float(found.group(1)) == shipped["min_confidence"]


def test_the_stated_corpus_size_is_the_corpus() -> None:
    found = re.search(r"from the ([0-9,]+) articles in\s+`sources/corpus/articles.jsonl`", README)
    assert found, "README states the corpus size"
    corpus = (ROOT / "sources/corpus/articles.jsonl").read_text("utf-8").splitlines()
    assert int(found.group(1).replace(",", "")) == sum(1 for line in corpus if line.strip())


def test_the_stated_held_out_fit_figures_are_the_shipped_fit() -> None:
    shipped = json.loads((ROOT / "routing/fitted/confidence.json").read_text("utf-8"))
    bench = (ROOT / "bench" / "README.md").read_text("utf-8")
    found = re.search(
        r"shipped fit's for every count: ECE ([0-9]+(?:\.[0-9]+)?),\s+`min_confidence` ([0-9]+(?:\.[0-9]+)?)",
        bench,
    )
    assert found, "bench/README.md states the shipped fit's held-out figures"
    assert float(found.group(1)) == shipped["report"]["ece_held_out"]
    assert float(found.group(2)) == shipped["min_confidence"]


def test_the_stated_fit_settings_are_the_fit_s() -> None:
    from routing.fitting import fit

    flat = " ".join(ROUTING.split())
    low, high = min(fit.THRESHOLDS), max(fit.THRESHOLDS)
    assert f"the threshold ({low} to {high}) with the best held-out accuracy" in flat
    assert f"route at most {fit.NONE_ROUTED_MAX:.0%} of the unserved requests" in flat
    assert f"and {fit.LABEL_NOISE:.0%} of labels are taken to be wrong" in flat
