"""Decomposition measured on its own: does the splitter cut compound requests where the
requests meet, and leave a single request whole?

The splitter (routing/language/decompose.py) is scored alone, without routing: each query
goes through `decompose(query, claims)` with the shipped keyword rules' `claims`, as the
pipeline calls it. Three sets, built from the single-intent rows of routing/fit_data (the
corpora the project may tune on; no evaluation or sealed row):

- `compound`: two or three rows of different routes joined by connectors people use
  (", ", " and ", " and then ", " and also ", " also ", "; ", ". ", " then ", " plus "),
  drawn with a fixed seed. Right (`parts`) when the part count is the rows' count, and
  (`boundary`) when the parts' text is the rows' text after normalising (lower case,
  letters and digits only);
- `single`: every row on its own, which must stay one part (`over-split`: it did not);
- `single with "and"`: the rows whose own text holds " and " ("salt and pepper"), the
  same figure for the hardest singles.

`--ablate` measures the figures again with each of the splitter's rules switched off in
turn (by patching the module in this process only; production code has no switches),
and prints the change, so a rule that changes nothing or helps when removed shows it.

`--sealed` scores the same way over compounds built from the sealed corpora (via
bench/sealed_quality.py's loader, which checks their checksums) and the sealed rows as
singles, printing aggregates only: never a row. The rules were tuned on the fit_data sets
above, never on the sealed ones; the sealed figure is a confirmation of that choice, run
before and after it, not something to tune on.

    .venv/bin/python bench/decomposition.py [--compound N] [--ablate] [--sealed]
        [--json-out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import results as results_file  # noqa: E402
from bench.sealed_quality import stamp  # noqa: E402

FIT_DATA = ROOT / "routing" / "fit_data"
CONNECTORS = (", ", " and ", " and then ", " and also ", " also ", "; ", ". ", " then ", " plus ")
COMPOUND_ROWS = 2000
_END = " ?.!,;"
_NORMAL = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, slots=True)
class Single:
    text: str
    route: str


@dataclass(frozen=True, slots=True)
class Case:
    text: str
    pieces: tuple[str, ...]  # the rows it was built from: the parts it should split into


def fit_rows(directory: Path = FIT_DATA) -> list[Single]:
    rows = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                rows.append(Single(row["text"].strip(), row["route"]))
    return rows


def _join(pieces: list[str], connectors: list[str]) -> str:
    """The pieces joined as a person would type them: the joined piece loses its end
    punctuation, and a piece after a full stop opens with a capital."""
    text = pieces[0]
    for connector, piece in zip(connectors, pieces[1:], strict=True):
        if connector == ". ":
            piece = piece[:1].upper() + piece[1:]
        text = text.rstrip(_END) + connector + piece
    return text


def compounds(rows: list[Single], count: int, seed: str) -> list[Case]:
    """`count` requests of two (two in three) or three rows of different routes."""
    by_route: dict[str, list[Single]] = defaultdict(list)
    for row in rows:
        by_route[row.route].append(row)
    routes = sorted(by_route)
    draw = random.Random(seed)
    built = []
    for index in range(count):
        size = 3 if index % 3 == 2 and len(routes) >= 3 else 2
        chosen = draw.sample(routes, size)
        pieces = [draw.choice(by_route[route]).text for route in chosen]
        connectors = [draw.choice(CONNECTORS) for _ in pieces[1:]]
        built.append(Case(_join(pieces, connectors), tuple(pieces)))
    return built


def normal(text: str) -> tuple[str, ...]:
    return tuple(_NORMAL.findall(text.lower()))


Split = Callable[[str], list[str]]


@dataclass(frozen=True, slots=True)
class Figures:
    compounds: int
    parts_right: int  # the part count is the rows' count
    boundary_right: int  # the parts are the rows
    under_split: int  # fewer parts than rows
    singles: int
    over_split: int  # a single row in more than one part
    and_singles: int
    and_over_split: int

    def share(self, name: str) -> float:
        """`name`'s count as a share of its set."""
        total = {
            "parts_right": self.compounds,
            "boundary_right": self.compounds,
            "under_split": self.compounds,
            "over_split": self.singles,
            "and_over_split": self.and_singles,
        }[name]
        return getattr(self, name) / total if total else 0.0


def score(split: Split, joined: list[Case], singles: list[str]) -> Figures:
    parts_right = boundary_right = under = 0
    for case in joined:
        parts = split(case.text)
        parts_right += len(parts) == len(case.pieces)
        under += len(parts) < len(case.pieces)
        boundary_right += [normal(p) for p in parts] == [normal(p) for p in case.pieces]
    over = and_total = and_over = 0
    for text in singles:
        split_apart = len(split(text)) > 1
        over += split_apart
        if " and " in text.lower():
            and_total += 1
            and_over += split_apart
    return Figures(
        len(joined), parts_right, boundary_right, under, len(singles), over, and_total, and_over
    )


def claims() -> Callable[[str], str | None] | None:
    """The shipped keyword rules' verdict on a clause, as the pipeline gives it to the
    splitter (no model is loaded: the keyword stage needs none)."""
    from bench.routing_quality import isolated_config
    from routing.stages.build import build_resolver

    return build_resolver(isolated_config(ROOT / "config.yaml")).keyword_claims()


def splitter() -> Split:
    import routing.language.decompose as d

    keyword = claims()
    return lambda text: d.decompose(text, keyword)


# The rules, each switched off by patching routing.language.decompose: (name, what it does,
# the patch as {attribute: replacement} computed from the module).
Patch = Callable[[Any], dict[str, Any]]


def _words_of(d: Any, text: str) -> list[str]:
    return d._words(text)


def _without_complete_branch(test: Callable[[Any, list[str]], bool]) -> Patch:
    """is_complete_request without one of its early `return True` branches: where that
    branch fires, the answer is what the checks after it say."""

    def patch(d: Any) -> dict[str, Any]:
        original = d.is_complete_request

        def changed(text: str) -> bool:
            words = _words_of(d, text)
            if len(words) >= 2 and test(d, words):
                return (
                    words[0] in d.OPENERS or words[0] in d.TOPIC_OPENERS or d._topic_phrase(words)
                )
            return original(text)

        return {"is_complete_request": changed}

    return patch


def _hard_as_soft(d: Any) -> dict[str, Any]:
    """ ";", "and also", "and then" decided like any soft separator."""
    separators = re.compile(
        rf"(?P<hard>(?!x)x)|(?P<stop>{d._STOP})|(?P<soft>;|{d._SOFT})", re.IGNORECASE
    )
    return {"_SEPARATORS": separators}


def _no_sentence_ends(d: Any) -> dict[str, Any]:
    separators = re.compile(
        rf"(?P<hard>{d._HARD})|(?P<stop>(?!x)x)|(?P<soft>{d._SOFT})", re.IGNORECASE
    )
    return {"_SEPARATORS": separators}


# a full stop ends a sentence only after three letters (not "at 8 pm.", "in nc.")
_STOP_THREE_LETTERS = r"(?<=[?!])\s+(?=\S)|(?<=\w{3}\.)\s+(?=[A-Za-z])"


def _stop_after_three_letters(d: Any) -> dict[str, Any]:
    separators = re.compile(
        rf"(?P<hard>{d._HARD})|(?P<stop>{_STOP_THREE_LETTERS})|(?P<soft>{d._SOFT})",
        re.IGNORECASE,
    )
    return {"_SEPARATORS": separators}


def _no_when_question(d: Any) -> dict[str, Any]:
    original = d._can_stand_alone

    def changed(left: str) -> bool:
        words = d._words(left)
        if (
            len(words) >= 2
            and words[0] in {"when", "whenever"}
            and words[1] in d.QUESTION_AFTER_WHEN
        ):
            return original(left) and any(w in d._WH_WORDS for w in words[2:])
        return original(left)

    return {"_can_stand_alone": changed}


def _no_topic_opener(d: Any) -> dict[str, Any]:
    original = d.is_complete_request

    def changed(text: str) -> bool:
        words = d._words(text)
        if len(words) >= 2 and words[0] in d.TOPIC_OPENERS and words[0] not in d.OPENERS:
            return d._topic_phrase(words)
        return original(text)

    return {"is_complete_request": changed}


def _false(*_: object) -> bool:
    return False


def _none(*_: object) -> None:
    return None


RULES: tuple[tuple[str, str, Patch], ...] = (
    ("hard", '";", "and also", "and then" always split', _hard_as_soft),
    ("sentence_end", "a sentence end may split", _no_sentence_ends),
    (
        "stop_two_letters",
        "a full stop after two letters or a digit ends a sentence",
        _stop_after_three_letters,
    ),
    ("abbreviations", '"Mr." is no sentence end', lambda d: {"_ABBREVIATIONS": frozenset()}),
    (
        "context_sentence",
        '"I\'m planning a trip." stays with its request',
        lambda d: {"is_context": _false},
    ),
    ("greetings", '"Hi." / "sorry, ..." is no request', lambda d: {"is_greeting": _false}),
    (
        "leans_back",
        '"How tall is it?" stays with the sentence before',
        lambda d: {"_leans_back": _false},
    ),
    (
        "premise_statement",
        "a stated fact before a question is its premise",
        lambda d: {"is_statement": _false},
    ),
    (
        "joining_after_stop",
        '"? And when?" splits as the sentence end would',
        lambda d: {"_opens_sentence": _false},
    ),
    ("fillers", '"hey google, ..." alone is no request', lambda d: {"_FILLERS": frozenset()}),
    (
        "introductions",
        '"On average, ..." introduces the clause after it',
        lambda d: {"_introduces": _false},
    ),
    (
        "when_question",
        '"when will it be hot here and ..." is a question, not a condition',
        _no_when_question,
    ),
    (
        "condition_waits",
        '"if it rains, ..." waits for its consequence',
        lambda d: {"CONDITION_OPENERS": frozenset()},
    ),
    ("quotes", '"who said, ..." opens a quotation', lambda d: {"_quotes": _false}),
    (
        "paired_modifiers",
        '"the upper and lower falls" is one phrase',
        lambda d: {"_PAIRED": frozenset()},
    ),
    (
        "refers_back",
        '"and use it" continues the request before',
        lambda d: {"_refers_back": _false},
    ),
    (
        "asks_in_place",
        '"..., derives from which language" continues the question',
        lambda d: {"_asks_in_place": _false},
    ),
    (
        "participle_predicate",
        '"..., was built in 1900" continues the question',
        lambda d: {"_participle": _false},
    ),
    (
        "relative_clause",
        '"..., which means what" continues the question',
        lambda d: {"_RELATIVES": frozenset()},
    ),
    (
        "and_conditional",
        '"and if it rains close the windows" opens a request',
        lambda d: {"_conditional_request": _false},
    ),
    (
        "claims",
        "clauses the keyword rules give different routes split",
        lambda d: {"_claimed_apart": _none},
    ),
    (
        "its",
        '"it\'s ..." opens a request',
        _without_complete_branch(lambda d, w: w[0] in {"it's", "its"}),
    ),
    (
        "preposition_wh",
        '"at what age ..." opens a request',
        _without_complete_branch(lambda d, w: w[0] in d._PREPOSITIONS and w[1] in d._WH_WORDS),
    ),
    ("topic_opener", '"weather in Oslo" opens a request', _no_topic_opener),
    (
        "topic_phrase",
        '"the latest tech headlines" opens a request',
        lambda d: {"_topic_phrase": _false},
    ),
)


@contextmanager
def switched_off(patch: Patch) -> Iterator[None]:
    import routing.language.decompose as d

    replacements = patch(d)
    saved = {name: getattr(d, name) for name in replacements}
    for name, value in replacements.items():
        setattr(d, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(d, name, value)


def _pct(figures: Figures, name: str) -> str:
    return f"{100 * figures.share(name):.1f}%"


def summary(label: str, f: Figures) -> list[str]:
    return [
        f"{label} compound ({f.compounds}): parts right {_pct(f, 'parts_right')}, "
        f"boundaries right {_pct(f, 'boundary_right')}, under-split {_pct(f, 'under_split')}",
        f"{label} single ({f.singles}): over-split {_pct(f, 'over_split')}; "
        f'with "and" ({f.and_singles}): over-split {_pct(f, "and_over_split")}',
    ]


def by_connector(split: Split, joined: list[Case]) -> dict[str, float]:
    """Boundary accuracy of the two-row compounds, per connector."""
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case in joined:
        if len(case.pieces) != 2:
            continue
        connector = case.text[len(case.pieces[0].rstrip(_END)) :][: -len(case.pieces[1])]
        parts = split(case.text)
        tally[connector][0] += [normal(p) for p in parts] == [normal(p) for p in case.pieces]
        tally[connector][1] += 1
    return {c: right / total for c, (right, total) in sorted(tally.items()) if total}


def _delta(after: Figures, before: Figures, name: str) -> float:
    return 100 * (after.share(name) - before.share(name))


def ablation(split: Split, joined: list[Case], singles: list[str], base: Figures) -> list[dict]:
    rows = []
    for name, what, patch in RULES:
        with switched_off(patch):
            off = score(split, joined, singles)
        # wrong cases the rule saves: compounds cut wrong plus singles cut apart
        saved = (off.compounds - off.boundary_right + off.over_split) - (
            base.compounds - base.boundary_right + base.over_split
        )
        rows.append(
            {
                "rule": name,
                "what": what,
                "boundary_delta_pp": round(_delta(off, base, "boundary_right"), 2),
                "parts_delta_pp": round(_delta(off, base, "parts_right"), 2),
                "over_split_delta_pp": round(_delta(off, base, "over_split"), 2),
                "and_over_split_delta_pp": round(_delta(off, base, "and_over_split"), 2),
                "cases_saved": saved,
            }
        )
    return rows


def _figures_json(f: Figures) -> dict[str, Any]:
    return {
        "compounds": f.compounds,
        "parts_right": round(f.share("parts_right"), 4),
        "boundary_right": round(f.share("boundary_right"), 4),
        "under_split": round(f.share("under_split"), 4),
        "singles": f.singles,
        "over_split": round(f.share("over_split"), 4),
        "and_singles": f.and_singles,
        "and_over_split": round(f.share("and_over_split"), 4),
    }


def sealed_sets(count: int) -> tuple[list[Case], list[str]]:
    """Compounds and singles from the sealed corpora; their text never leaves this process."""
    from bench.sealed_quality import SEALED_DIR, load

    rows = [Single(r.text, r.expected[0]) for rs in load(SEALED_DIR).values() for r in rs]
    return compounds(rows, count, "sealed-decomposition"), [r.text for r in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compound", type=int, default=COMPOUND_ROWS)
    parser.add_argument("--ablate", action="store_true", help="each rule switched off in turn")
    parser.add_argument("--sealed", action="store_true", help="score the sealed corpora instead")
    parser.add_argument("--json-out", help="also write the figures, dated, here")
    args = parser.parse_args(argv)
    if args.compound < 1:
        print("--compound must be at least 1", file=sys.stderr)
        return 2
    if args.sealed and args.ablate:
        print("--ablate runs on the fit_data sets only, never on sealed ones", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    split = splitter()
    when = stamp()
    if args.sealed:
        from bench.sealed_quality import SealedDataError

        try:
            joined, singles = sealed_sets(args.compound)
        except SealedDataError as error:
            print(f"sealed data: {error}", file=sys.stderr)
            return 2
        label = "sealed"
    else:
        rows = fit_rows()
        joined, singles = compounds(rows, args.compound, "decomposition"), [r.text for r in rows]
        label = "fit_data"
    base = score(split, joined, singles)
    for line in summary(label, base):
        print(f"{when} {line}")
    connectors = by_connector(split, joined)
    cells = ", ".join(f"{c!r} {100 * v:.1f}%" for c, v in connectors.items())
    print(f"{when} {label} two-row boundaries right by connector: {cells}")
    figures: dict[str, Any] = {
        "set": label,
        **_figures_json(base),
        "by_connector": {c: round(v, 4) for c, v in connectors.items()},
    }
    if args.ablate:
        table = ablation(split, joined, singles, base)
        figures["ablation"] = table
        print(f"{when} {label} each rule switched off (Δ in points; saved: wrong cases it saves)")
        print(
            f"{'rule':<26}{'Δ boundary':>11}{'Δ parts':>9}{'Δ over-split':>14}"
            f"{'Δ and-over':>12}{'saved':>7}"
        )
        for row in table:
            print(
                f"{row['rule']:<26}{row['boundary_delta_pp']:>+11.2f}{row['parts_delta_pp']:>+9.2f}"
                f"{row['over_split_delta_pp']:>+14.2f}{row['and_over_split_delta_pp']:>+12.2f}"
                f"{row['cases_saved']:>7}"
            )
    if args.json_out:
        command = (
            "python bench/decomposition.py"
            + (" --sealed" if args.sealed else "")
            + (" --ablate" if args.ablate else "")
        )
        results_file.write(args.json_out, "decomposition", command, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
