"""Build the sealed routing corpora (bench/sealed/data/*.jsonl.gz) from pinned public commits.

Sealed rows are never read one by one: this script prints counts only, never a text. It
reads each corpus at the commit bench/sealed/mapping.yaml pins, from a local git copy of
its repository (`--mirror-root`, one `owner+name/repo` git directory per repository),
maps labels to routes by that file's table, drops rows whose text the project already
has (fit rows, ../shared/eval, route exemplars: a sealed row must be new language), and
keeps a fixed-seed sample of at most --rows per corpus (or the corpus's own `rows`, or at
most `per_route` rows of each route). The
files and their SHA-256 sums (bench/sealed/SHA256SUMS) are committed;
bench/sealed/MANIFEST.md gives the licences. `--corpus` rebuilds only the named corpora and
keeps the other files and their sums as they are (the project's texts grow, and a rebuild
of an old corpus against them would change a committed file).

    python scripts/fetch_sealed.py [--mirror-root DIR] [--rows 1500] [--corpus NAME ...]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SEALED = ROOT / "bench" / "sealed"
DATA = SEALED / "data"
MAPPING = SEALED / "mapping.yaml"
SUMS = SEALED / "SHA256SUMS"
EVAL_DIR = Path(os.environ.get("ROUTING_EVAL_DIR", ROOT / "../shared/eval"))


def normalised(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def route_of(label: str, routes: dict[str, str]) -> str | None:
    """The route of a label: an exact entry, else its longest matching 'prefix/' entry."""
    if label in routes:
        return routes[label]
    prefixes = [p for p in routes if p.endswith("/") and label.startswith(p)]
    if prefixes:
        return routes[max(prefixes, key=len)]
    return routes.get("*")


class Repo:
    """One pinned commit of a local git copy, read with `git show` (no work tree needed)."""

    def __init__(self, mirror_root: Path, name: str, commit: str) -> None:
        base = mirror_root / name.replace("/", "+") / "repo"
        self.git_dir = base / ".git" if (base / ".git").is_dir() else base
        self.commit = commit

    def _git(self, *args: str) -> str:
        found = subprocess.run(
            ["git", f"--git-dir={self.git_dir}", *args], capture_output=True, check=True
        )
        return found.stdout.decode("utf-8")

    def read(self, path: str) -> str:
        return self._git("show", f"{self.commit}:{path}")

    def files(self, under: str) -> list[str]:
        return self._git("ls-tree", "-r", "--name-only", self.commit, under).split()


def fb_tsv(repo: Repo, spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for line in repo.read(spec["path"]).splitlines():
        cells = line.split("\t")
        if len(cells) >= 3 and cells[2].strip():
            yield cells[2].strip(), cells[0]


def sq_tsv(repo: Repo, spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for line in repo.read(spec["path"]).splitlines():
        cells = line.split("\t")
        if len(cells) == 4 and cells[3].strip():
            yield cells[3].strip(), cells[1]


def ha_yaml(repo: Repo, spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for subset in spec["subsets"]:
        for path in repo.files(f"{spec['path']}/{subset}"):
            name = path.rsplit("/", 1)[1]
            if not name.endswith(".yaml") or name.startswith("_") or name == "dataset_card.yaml":
                continue
            data = yaml.safe_load(repo.read(path)) or {}
            if "actions" in data:
                for action in data["actions"].get("actions") or []:
                    label = f"{subset}/{action['action'].lower().replace(' ', '_')}"
                    for sentence in action.get("sentences") or []:
                        yield str(sentence).strip(), label
            for test in data.get("tests") or []:
                for sentence in test.get("sentences") or []:
                    yield str(sentence).strip(), f"{subset}/{name[: -len('.yaml')]}"


def taskmaster_json(repo: Repo, spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Each dialog's opening user turn, labelled by the dialog's vertical.

    Only the opening turn: a later one leans on what was said before it. Only one of at
    least `min_words` words: a bare greeting or "yes" is no request on its own.
    """
    for path in repo.files(spec["path"]):
        if not path.endswith(".json"):
            continue
        for dialog in json.loads(repo.read(path)):
            turns = dialog.get("utterances") or []
            if not turns or str(turns[0].get("speaker", "")).lower() != "user":
                continue
            text = str(turns[0].get("text", "")).strip()
            if len(text.split()) >= spec["min_words"]:
                yield text, str(dialog.get("vertical", ""))


def topv2_tsv(repo: Repo, spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """TOPv2's `domain<TAB>utterance<TAB>semantic_parse` rows (a header line first),
    labelled `<domain>/<top-level intent>`: a reminder that mentions the weather is a
    reminder."""
    for name in spec["files"]:
        for line in repo.read(f"{spec['path']}/{name}").splitlines()[1:]:
            cells = line.split("\t")
            intent = re.match(r"\[IN:([A-Z_]+)", cells[2].strip()) if len(cells) == 3 else None
            if intent and cells[1].strip():
                yield cells[1].strip(), f"{cells[0].strip()}/{intent.group(1)}"


def dyknow_json(repo: Repo, spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """DyKnow's questions (`grc_generated.json`: domain, then the subject, then for some
    domains the relation asked, down to `{"questions": {variant: text}, "answers": [...]}`),
    labelled `<variant>/<domain>` (variants: `generic`, `rephrased_N`, `contextualized`)."""

    def questions(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            if isinstance(node.get("questions"), dict):
                yield node["questions"]
            else:
                for value in node.values():
                    yield from questions(value)

    for domain, subjects in json.loads(repo.read(spec["path"])).items():
        for variants in questions(subjects):
            for variant, text in variants.items():
                if isinstance(text, str) and text.strip():
                    yield text.strip(), f"{variant}/{domain}"


READERS = {
    "fb_tsv": fb_tsv,
    "sq_tsv": sq_tsv,
    "ha_yaml": ha_yaml,
    "taskmaster_json": taskmaster_json,
    "topv2_tsv": topv2_tsv,
    "dyknow_json": dyknow_json,
}


def known_texts() -> set[str]:
    """Every text the project already has: a sealed row equal to one is dropped."""
    known: set[str] = set()
    paths = [*(ROOT / "routing" / "fit_data").glob("*.jsonl"), *EVAL_DIR.glob("*.jsonl")]
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                known.add(normalised(json.loads(line)["text"]))
    for path in (ROOT / "routing" / "routes").glob("*.yaml"):
        for value in _strings(yaml.safe_load(path.read_text(encoding="utf-8"))):
            known.add(normalised(value))
    known.discard("")
    return known


def _strings(data: Any) -> Iterator[str]:
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for value in data.values():
            yield from _strings(value)
    elif isinstance(data, list):
        for value in data:
            yield from _strings(value)


def build(name: str, spec: dict[str, Any], mirror_root: Path, rows: int, known: set[str]) -> bytes:
    repo = Repo(mirror_root, spec["repo"], spec["commit"])
    seen: set[str] = set()
    kept: list[dict[str, str]] = []
    dropped: Counter[str] = Counter()
    for text, label in READERS[spec["format"]](repo, spec):
        key = normalised(text)
        route = route_of(label, spec["routes"])
        if route is None:
            dropped["unmapped label"] += 1
        elif not key:
            dropped["empty"] += 1
        elif key in known:
            dropped["already in the project"] += 1
        elif key in seen:
            dropped["duplicate"] += 1
        else:
            seen.add(key)
            kept.append({"text": text, "expected": route, "label": label})
    rows = min(rows, spec.get("rows", rows))
    draw = random.Random(f"sealed:{name}")
    if "per_route" in spec:  # at most this many of each route, so a small route is not lost
        sample = []
        for route, cap in spec["per_route"].items():
            of_route = [row for row in kept if row["expected"] == route]
            sample += draw.sample(of_route, min(cap, len(of_route)))
    else:
        sample = draw.sample(kept, min(rows, len(kept)))
    routes = Counter(row["expected"] for row in sample)
    print(
        f"{name}: {len(kept)} usable, {len(sample)} kept {dict(sorted(routes.items()))}; "
        f"dropped {dict(sorted(dropped.items()))}"
    )
    body = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in sample)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as handle:
        handle.write(body.encode("utf-8"))
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror-root", default="/work/.mirror")
    parser.add_argument("--rows", type=int, default=1500)
    parser.add_argument("--corpus", action="append", help="rebuild only this corpus (repeatable)")
    args = parser.parse_args(argv)
    corpora = yaml.safe_load(MAPPING.read_text(encoding="utf-8"))["corpora"]
    unknown = sorted(set(args.corpus or ()) - set(corpora))
    if unknown:
        print(f"--corpus: not in {MAPPING.name}: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.corpus:
        corpora = {name: spec for name, spec in corpora.items() if name in args.corpus}
    mirror_root = Path(args.mirror_root)
    missing = [
        s["repo"]
        for s in corpora.values()
        if not (mirror_root / s["repo"].replace("/", "+") / "repo").is_dir()
    ]
    if missing:
        print(f"no git copy under {mirror_root} of: {', '.join(missing)}", file=sys.stderr)
        return 2
    known = known_texts()
    DATA.mkdir(parents=True, exist_ok=True)
    sums = _sums() if args.corpus else {}
    for name, spec in corpora.items():
        blob = build(name, spec, mirror_root, args.rows, known)
        path = DATA / f"{name}.jsonl.gz"
        path.write_bytes(blob)
        sums[f"data/{path.name}"] = hashlib.sha256(blob).hexdigest()
    SUMS.write_text("".join(f"{d}  {n}\n" for n, d in sums.items()), encoding="utf-8")
    return 0


def _sums() -> dict[str, str]:
    """The committed sums by file name, in their order."""
    if not SUMS.is_file():
        return {}
    found = {}
    for line in SUMS.read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            found[name] = digest
    return found


if __name__ == "__main__":
    sys.exit(main())
