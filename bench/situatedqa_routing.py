"""The routing pipeline on SituatedQA's dev questions: a held-out check of kiwix and web.

SituatedQA (Zhang and Choi 2021, github.com/mikejqzhang/SituatedQA) asks questions about
the world and labels whether each answer depends on when it is asked. A question whose
answer does not change is the encyclopedia's (`kiwix`); one whose answer does is the live
web's (`web`, with kiwix after it). Nothing in routing was written from the dev split,
and nobody here reads it: this script scores it through `bench/sealed_quality.py`'s
pipeline (the decisions `search route` makes, calibration included) and prints aggregates
only. The time-sensitivity model was fitted on the train split, never on dev; the test
split is refused. Its repository states no licence, so no row is shipped: the script reads
a local copy (a checkout or a git directory, e.g. the mirror `fetch` makes).

It is not sealed (the train split's errors were read while the time-sensitivity cues and
the written distinctions were written), so it is a development figure, not the estimate
to quote for unseen language.

    .venv/bin/python bench/situatedqa_routing.py --situatedqa DIR [--config config.yaml]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.sealed_quality import measure  # noqa: E402
from routing.fitting.time_fit import read_situatedqa  # noqa: E402

CORPUS = "situatedqa_dev"


def write_corpus(rows: list[tuple[str, str]], directory: Path) -> None:
    """`rows` (text, route) as a corpus in the sealed layout (gzipped JSONL + SHA256SUMS)."""
    data = directory / "data"
    data.mkdir(parents=True)
    body = "".join(json.dumps({"text": t, "expected": r}) + "\n" for t, r in rows)
    packed = gzip.compress(body.encode("utf-8"), mtime=0)
    (data / f"{CORPUS}.jsonl.gz").write_bytes(packed)
    digest = hashlib.sha256(packed).hexdigest()
    (directory / "SHA256SUMS").write_text(f"{digest}  data/{CORPUS}.jsonl.gz\n", "utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--situatedqa", required=True, help="checkout or git dir of SituatedQA")
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--compound", type=int, default=200, help="kiwix+web pairs joined")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from search.config import load_config

    if not Path(args.config).is_file():
        print(f"no config file at {args.config}", file=sys.stderr)
        return 2
    try:
        questions = read_situatedqa(Path(args.situatedqa), "dev")
    except FileNotFoundError as error:
        print(f"--situatedqa: {error}", file=sys.stderr)
        return 2
    rows = [(q.text, "web" if q.sensitive else "kiwix") for q in questions]
    with tempfile.TemporaryDirectory() as tmp:
        write_corpus(rows, Path(tmp))
        lines = measure(load_config(args.config), Path(tmp), args.compound)
    print("\n".join(line.replace(" sealed ", " development ", 1) for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
