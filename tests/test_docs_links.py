"""Every link between the README and its reference pages leads somewhere: the file exists and,
when the link names a section, a heading of that page has that anchor (as GitHub spells it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text("utf-8"))
    return {anchor(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text("utf-8")))


def test_the_anchor_is_github_s() -> None:
    assert anchor("Correcting a wrong decision: label, fit, replay, check") == (
        "correcting-a-wrong-decision-label-fit-replay-check"
    )
    assert anchor("`search fit`") == "search-fit"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_local_link_leads_to_a_file_and_a_heading(page: Path) -> None:
    local = [link for link in links(page) if not re.match(r"[a-z]+:", link)]
    assert local or page.name != "README.md", "the README links to its reference pages"
    for link in local:
        path, _, section = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.is_file(), f"{page.name}: {link} names no file"
        if section and target.suffix == ".md":
            assert section in anchors(target), f"{page.name}: {link} names no heading"


def test_every_reference_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in links(ROOT / "README.md")}
    assert set(PAGES[1:]) <= linked
