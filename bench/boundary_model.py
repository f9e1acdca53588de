"""Would a learned boundary model split compounds better than the splitter's grammar?

The splitter (routing/language/decompose.py) decides at each soft separator (" and ",
", ") by hand-written rules. A model of "is this separator between two requests" was
the obvious next step; this measures it before anything is written, on routing/fit_data
only (no evaluation or sealed row), one corpus left out at a time:

- **Training**, on the other corpora's rows: two rows of different routes joined by
  " and " or ", " (the soft connectors; the hard ones, " and then " and " and also ",
  always split). Each soft separator in the joined text is an example: the one where
  the rows meet is a boundary, one inside a row is not; every row's own separators are
  more negatives. A logistic regression (scikit-learn) over hashed features of the
  separator's neighbourhood (its kind, the words either side, the lengths) and the
  grammar's own readings (whether the text after opens a complete request, whether the
  text before can stand alone, whether the keyword rules claim either side).
- **Judged**, on the left-out corpus: compounds of its own rows joined the same way
  (right when the parts are exactly the two rows), and its rows alone (over-split when
  one comes back in more than one part). Two splitters side by side: the grammar
  alone, and the grammar with the model splitting further wherever it is at least
  `tau` sure (it can add cuts, never remove the grammar's); with `--only-and`, at an
  "and" only (a quiz question's commas are where the model over-splits).

    .venv/bin/python bench/boundary_model.py [--compound N] [--tau 0.8 0.9 ...] [--only-and]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.decomposition import _END, FIT_DATA, _join, claims, normal  # noqa: E402
from bench.sealed_quality import stamp  # noqa: E402

SOFT_CONNECTORS = (" and ", ", ")
SEPARATOR = re.compile(r",|\band\b", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9']+")
_TRAINING_PAIRS = 6000

Claims = Callable[[str], "str | None"]
Row = tuple[str, str]  # (text, route)


@dataclass(frozen=True, slots=True)
class Pair:
    first: str
    second: str
    connector: str

    @property
    def text(self) -> str:
        return _join([self.first, self.second], [self.connector])

    @property
    def boundary(self) -> int:
        """Where the separator that joins the rows starts in `text` (the "and" itself,
        past its leading space, as `SEPARATOR` finds it)."""
        start = len(self.first.rstrip(_END))
        return start + 1 if self.connector == " and " else start


def corpus_rows(directory: Path = FIT_DATA) -> dict[str, list[Row]]:
    found: dict[str, list[Row]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        found[path.stem] = [(r["text"].strip(), r["route"]) for r in rows]
    return found


def draw_pairs(rows: list[Row], count: int, seed: str) -> list[Pair]:
    """`count` pairs of rows, of different routes where the rows have more than one."""
    draw = random.Random(seed)
    routes = {route for _, route in rows}
    pairs = []
    for _ in range(count):
        first = draw.choice(rows)
        second = draw.choice(rows)
        while len(routes) > 1 and second[1] == first[1]:
            second = draw.choice(rows)
        pairs.append(Pair(first[0], second[0], draw.choice(SOFT_CONNECTORS)))
    return pairs


def features(text: str, separator: re.Match[str], keyword: Claims | None) -> dict[str, int]:
    """What the model reads of one separator: its neighbourhood and the grammar's views."""
    import routing.language.decompose as grammar

    left, right = text[: separator.start()], text[separator.end() :]
    before, after = _WORD.findall(left.lower()), _WORD.findall(right.lower())
    found = {f"separator={separator.group(0).lower()}": 1}
    for index in range(3):
        found[f"after{index}={after[index] if index < len(after) else '<end>'}"] = 1
    found[f"after01={'_'.join(after[:2])}"] = 1
    for index in (1, 2):
        found[f"before-{index}={before[-index] if len(before) >= index else '<start>'}"] = 1
    found[f"first={before[0] if before else '<start>'}"] = 1
    found[f"after_words={min(len(after), 8)}"] = 1
    found[f"before_words={min(len(before), 8)}"] = 1
    found[f"complete_after={grammar.is_complete_request(right)}"] = 1
    found[f"stands_before={grammar._can_stand_alone(left)}"] = 1
    found[f"capital_after={right.lstrip()[:1].isupper()}"] = 1
    if keyword is not None:
        mine, theirs = keyword(left), keyword(right)
        found[f"claims={mine is not None}_{theirs is not None}_{mine == theirs}"] = 1
    return found


def examples(
    pairs: Iterable[Pair], singles: Iterable[str], keyword: Claims | None
) -> tuple[list[dict[str, int]], list[int]]:
    """(features, 1 for a boundary) per soft separator of the pairs and of the singles."""
    found: list[dict[str, int]] = []
    labels: list[int] = []
    for pair in pairs:
        text = pair.text
        for separator in SEPARATOR.finditer(text):
            found.append(features(text, separator, keyword))
            labels.append(int(separator.start() == pair.boundary))
    for text in singles:
        for separator in SEPARATOR.finditer(text):
            found.append(features(text, separator, keyword))
            labels.append(0)
    return found, labels


class BoundaryModel:
    """The probability that a soft separator lies between two requests."""

    def __init__(self, pairs: list[Pair], singles: list[str], keyword: Claims | None) -> None:
        from sklearn.feature_extraction import FeatureHasher
        from sklearn.linear_model import LogisticRegression

        self.keyword = keyword
        self.hasher = FeatureHasher(n_features=2**18, input_type="dict")
        found, labels = examples(pairs, singles, keyword)
        self.regression = LogisticRegression(C=1.0, max_iter=3000, class_weight="balanced")
        self.regression.fit(self.hasher.transform(found), labels)

    def probability(self, text: str, separator: re.Match[str]) -> float:
        row = self.hasher.transform([features(text, separator, self.keyword)])
        return float(self.regression.predict_proba(row)[0, 1])


def grammar_then_model(
    split: Callable[[str], list[str]], model: BoundaryModel, tau: float, only_and: bool = False
) -> Callable[[str], list[str]]:
    """The grammar's parts, each cut again where the model is at least `tau` sure (at an
    "and" only, with `only_and`)."""

    def parts(text: str) -> list[str]:
        found: list[str] = []
        for part in split(text):
            position = 0
            for separator in SEPARATOR.finditer(part):
                if only_and and separator.group(0).lower() != "and":
                    continue
                if model.probability(part, separator) >= tau:
                    found.append(part[position : separator.start()].strip(" ,"))
                    position = separator.end()
            found.append(part[position:].strip(" ,"))
        return [p for p in found if p]

    return parts


@dataclass(slots=True)
class Tally:
    right: int = 0
    compounds: int = 0
    over_split: int = 0
    singles: int = 0

    def add(self, split: Callable[[str], list[str]], pairs: list[Pair], rows: list[Row]) -> Tally:
        for pair in pairs:
            expected = [normal(pair.first), normal(pair.second)]
            self.right += [normal(p) for p in split(pair.text)] == expected
        self.compounds += len(pairs)
        self.over_split += sum(len(split(text)) > 1 for text, _ in rows)
        self.singles += len(rows)
        return self

    def merge(self, other: Tally) -> None:
        self.right += other.right
        self.compounds += other.compounds
        self.over_split += other.over_split
        self.singles += other.singles

    def line(self) -> str:
        return (
            f"compounds right {self.right / self.compounds:.3f} ({self.right}/{self.compounds}), "
            f"singles over-split {self.over_split}/{self.singles}"
        )


def measure(
    compound: int, taus: list[float], only_and: bool = False
) -> dict[str, dict[str, Tally]]:
    """Per left-out corpus, per splitter ("grammar", "tau 0.9", ...): its tally."""
    import routing.language.decompose as grammar

    keyword = claims()

    def split(text: str) -> list[str]:
        return grammar.decompose(text, keyword)

    corpora = corpus_rows()
    found: dict[str, dict[str, Tally]] = {}
    for held_out, rows in corpora.items():
        others = [row for name, rs in corpora.items() if name != held_out for row in rs]
        model = BoundaryModel(
            draw_pairs(others, _TRAINING_PAIRS, "boundary-train"),
            [text for text, _ in others],
            keyword,
        )
        pairs = draw_pairs(rows, compound, "boundary-test")
        found[held_out] = {"grammar": Tally().add(split, pairs, rows)}
        for tau in taus:
            found[held_out][f"tau {tau:g}" + (", at 'and' only" if only_and else "")] = Tally().add(
                grammar_then_model(split, model, tau, only_and), pairs, rows
            )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compound", type=int, default=600, help="compounds per corpus")
    parser.add_argument("--tau", type=float, nargs="+", default=[0.8, 0.9, 0.95, 0.98])
    parser.add_argument("--only-and", action="store_true", help="the model cuts at 'and' only")
    args = parser.parse_args(argv)
    if args.compound < 1 or not all(0 < tau < 1 for tau in args.tau):
        print("--compound must be at least 1 and each --tau within (0, 1)", file=sys.stderr)
        return 2
    when = stamp()
    found = measure(args.compound, args.tau, args.only_and)
    pooled: dict[str, Tally] = {}
    for held_out, tallies in found.items():
        for name, tally in tallies.items():
            print(f"{when} {held_out} left out, {name}: {tally.line()}")
            pooled.setdefault(name, Tally()).merge(tally)
    for name, tally in pooled.items():
        print(f"{when} pooled, {name}: {tally.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
