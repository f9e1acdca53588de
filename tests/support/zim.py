"""The shipped demo encyclopedia as a real ZIM file, for tests of anything that searches it.

`build_demo_zim(tmp_dir)` builds `sources/corpus/articles.jsonl` into `tmp_dir/demo.zim`
with `ensure_zim` (a subprocess, so libzim's progress output never reaches pytest's fd 1).
Call it from a module- or session-scoped fixture: a build takes about a second.
"""

from __future__ import annotations

from pathlib import Path

from sources.zim_build import ensure_zim

CORPUS = Path(__file__).resolve().parents[2] / "sources" / "corpus" / "articles.jsonl"


def build_demo_zim(tmp_dir: Path) -> Path:
    return ensure_zim(CORPUS, Path(tmp_dir) / "demo.zim")
