"""SituatedQA's dev questions are scored through the sealed corpora's own pipeline script.

The corpus written for it must be one `bench/sealed_quality.py` accepts (its checksum file
and row layout), or the figures would come from a different scorer than the sealed ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import sealed_quality
from bench.situatedqa_routing import CORPUS, write_corpus


def test_the_corpus_is_read_back_as_the_sealed_scorer_reads_its_own(tmp_path: Path) -> None:
    rows = [("who wrote the quorblesnatch saga", "kiwix"), ("who leads the league now", "web")]
    write_corpus(rows, tmp_path)
    loaded = sealed_quality.load(tmp_path)
    assert list(loaded) == [CORPUS]
    assert [(r.text, r.expected) for r in loaded[CORPUS]] == [(t, (r,)) for t, r in rows]
    # a changed file is refused, as a sealed one would be
    data = tmp_path / "data" / f"{CORPUS}.jsonl.gz"
    data.write_bytes(data.read_bytes() + b"\0")
    with pytest.raises(sealed_quality.SealedDataError, match="does not match"):
        sealed_quality.load(tmp_path)


def test_without_a_checkout_it_exits_2_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.situatedqa_routing import main

    assert main(["--situatedqa", str(tmp_path)]) == 2
    assert "--situatedqa" in capsys.readouterr().err
