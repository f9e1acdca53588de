"""Routing quality on labelled utterances nobody on this project wrote (no LLM).

First, the figures that can be trusted: the sealed corpora (bench/sealed_quality.py, left
out of every rule, exemplar, word list, threshold and fit, never read row by row). The
figures after them come from corpora whose errors were read while routing was written,
so they flatter it even when the corpus is left out of the fit.

Runs the whole resolution the way the service does (a `Service` built from config,
`search(text, dry_run=True)`: decomposition, conditions, keyword, cache, semantic,
default) over `../shared/eval/*.jsonl` and prints, per file and per half (in-corpus: these
rows are in the fit, see routing/fit_data):
- accuracy per expected source, and a confusion matrix (rows: expected, columns: routed);
- for the compound files, the share of utterances whose parts, each routed, give exactly
  the expected set of labels;
- how many `none` rows went to a source with high confidence.

A part's label is its route, or `none` when it ended at a low-confidence default: a part
nothing could route ("set an alarm") is right to say so. The rows are split in two fixed
halves by a hash of the text ("tune" and "holdout"): tune on one, judge on the other, so
exemplars and rules that merely memorise sentences show up as a gap between the halves.

Then each file routed by a confidence fitted without its corpus (leave-one-corpus-out: accuracy per label, compound, `none` routed
confidently, the held-out calibration error; and the accuracy again with each part counted
as the route whose source answers it, where a part left to the default is the default's
route, not `none`), how many gibberish strings end at
`intent_default`, and how many requests no source serves are routed to one anyway
(routing/fit_data/staged/banking77_check.jsonl: Banking77 train rows that the `none`
route's classifier prior was not fitted on; at most 10%, as for unserved rows above). The
targets are checked against those, not the in-corpus ones.

    .venv/bin/python bench/routing_quality.py [--config config.yaml] [--eval-dir DIR]
        [--half all|tune|holdout] [--errors N] [--json]
        [--llm BASE_URL [--llm-model NAME] [--llm-timeout S] [--llm-server TEXT]
         [--json-out PATH]]

With `--llm BASE_URL` (an OpenAI-compatible server, `http://127.0.0.1:8000/v1`) the same
rows are routed three times, side by side: as configured without an LLM; with the LLM
stage's every answer taken where the earlier stages do not decide (`bias_check: false`);
and with its default bias check (the route the model names for a query with no content,
"N/A", is not taken for a real one). Per file it prints each accuracy, how many rows the LLM decided, how
many of those were right, and how many it failed on, so what escalating to that model
does to routing is measured, not guessed. The detailed tables are those of the last run.
`--json-out PATH` also writes the three runs' totals, dated (docs/llm.md renders them).

The eval directory defaults to `../shared/eval` next to the repository (or $ROUTING_EVAL_DIR).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SOURCES = ("forecast", "ha", "kiwix", "web")
LABELS = (*SOURCES, "none")
HALVES = ("tune", "holdout")

# Targets without an LLM, on language the fit never saw (leave-one-corpus-out).
SINGLE_TARGET = 0.85
COMPOUND_TARGET = 0.85
NONE_CONFIDENT_MAX = 0.10
ECE_MAX = 0.05
# Which fit corpus (routing/fitting/fit.py's groups) each evaluation file comes from: left out of
# the fit when that file is judged.
CORPUS_OF_FILE = {
    "slurp_devel.jsonl": "slurp+hwu64",
    "slurp_devel_compound.jsonl": "slurp+hwu64",
    "ha_intents_tests.jsonl": "ha-intents",
    "mixsnips_dev.jsonl": "snips",
}
# Strings that mean nothing in any language: no route may be confident of them.
GIBBERISH = (
    "qwertz uiop asdf",
    "blorp zibble quux",
    "ROUTE_TO_HA zqxv blorf",
    "vlemp korsh tandibuq",
    "zzzt prraf oong",
    "xjq wv plmkz",
    "fnord gleeb snarf",
    "asdfgh jkl qwerty zxcv",
)


def default_eval_dir() -> Path:
    env = os.environ.get("ROUTING_EVAL_DIR")
    return Path(env) if env else (ROOT / "../shared/eval").resolve()


def half_of(text: str) -> str:
    """A fixed split: the same text is always in the same half."""
    return HALVES[hashlib.md5(text.encode("utf-8")).digest()[0] % 2]


@dataclass(slots=True)
class Row:
    file: str
    text: str
    expected: str | tuple[str, ...]
    origin: str

    @property
    def compound(self) -> bool:
        return isinstance(self.expected, tuple)


@dataclass(slots=True)
class Outcome:
    row: Row
    parts: list[tuple[str, str, str]]  # (part text, label, stage)
    llm_failed: bool = False  # the LLM stage was asked and gave no usable answer
    # The routes whose source answers the parts, sorted: a part that ended at the default
    # counts as the default's route here (its source is asked), an unserved one as `none`.
    # Empty: the same as `labels`.
    answered: tuple[str, ...] = ()

    @property
    def answered_by_source(self) -> bool:
        """Some part is answered by a source: by a decision, or by the default's."""
        return any(label != "none" for label in self.answered or self.labels)

    @property
    def answered_correct(self) -> bool:
        """`correct`, each part counted as the route whose source answers it."""
        expected = self.row.expected if self.row.compound else (self.row.expected,)
        return (self.answered or self.labels) == expected

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(sorted({label for _, label, _ in self.parts}))

    @property
    def predicted(self) -> str:
        """The single label (or "a+b" when a single-intent row was split across routes)."""
        return "+".join(self.labels) or "none"

    @property
    def correct(self) -> bool:
        if self.row.compound:
            return self.labels == self.row.expected
        return self.labels == (self.row.expected,)

    @property
    def confident_source(self) -> bool:
        """Some part went to a source by a decision, not by the default."""
        return any(label != "none" for _, label, _ in self.parts)


def load_rows(eval_dir: Path) -> dict[str, list[Row]]:
    files: dict[str, list[Row]] = {}
    for path in sorted(eval_dir.glob("*.jsonl")):
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            data = json.loads(line)
            expected = data["expected"]
            if isinstance(expected, list):
                expected = tuple(sorted(set(expected)))
            rows.append(Row(path.name, data["text"], expected, data.get("origin_label", "")))
        files[path.name] = rows
    return files


def part_label(route: str | None, stage: str | None) -> str:
    if route is None or stage == "intent_default":
        return "none"
    return route


async def route_rows(service: Any, rows: Iterable[Row]) -> list[Outcome]:
    """Resolve every row through `service.search(dry_run=True)`, as `search route` does."""
    outcomes = []
    for row in rows:
        outcome = await service.search(row.text, dry_run=True)
        flat = []
        for result in outcome.results:
            if result.condition is not None:
                flat.append(result.condition)
            flat.append(result)
        parts = [(r.query, part_label(r.route, r.stage), r.stage or "") for r in flat]
        failed = any(e["step"] == "llm_error" for e in outcome.chain)
        answered = tuple(sorted({r.route or "none" for r in flat})) or ("none",)
        outcomes.append(Outcome(row, parts, failed, answered))
    return outcomes


@dataclass(slots=True)
class Score:
    """The numbers of one file and one half."""

    rows: int = 0
    correct: int = 0
    per_source: dict[str, list[int]] = field(default_factory=dict)  # label -> [right, total]
    confusion: dict[str, Counter[str]] = field(default_factory=dict)
    none_rows: int = 0
    none_confident: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.rows if self.rows else 1.0

    def source_accuracy(self, label: str) -> float | None:
        right, total = self.per_source.get(label, [0, 0])
        return right / total if total else None

    @property
    def none_confident_share(self) -> float | None:
        return self.none_confident / self.none_rows if self.none_rows else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "accuracy": round(self.accuracy, 4),
            "per_source": {k: {"right": v[0], "total": v[1]} for k, v in self.per_source.items()},
            "none_rows": self.none_rows,
            "none_confident": self.none_confident,
            "confusion": {k: dict(v) for k, v in self.confusion.items()},
        }


def score(outcomes: Iterable[Outcome]) -> Score:
    result = Score()
    for outcome in outcomes:
        row = outcome.row
        result.rows += 1
        result.correct += outcome.correct
        key = "+".join(row.expected) if row.compound else str(row.expected)
        tally = result.per_source.setdefault(key, [0, 0])
        tally[0] += outcome.correct
        tally[1] += 1
        result.confusion.setdefault(key, Counter())[outcome.predicted] += 1
        if not row.compound and row.expected == "none":
            result.none_rows += 1
            result.none_confident += outcome.confident_source
    return result


def check_targets(file: str, result: Score, compound: bool) -> list[str]:
    """The targets this file misses (an empty list when it meets them all)."""
    misses = []
    if compound:
        if result.rows and result.accuracy < COMPOUND_TARGET:
            misses.append(f"{file}: compound {result.accuracy:.1%} < {COMPOUND_TARGET:.0%}")
        return misses
    for label in SOURCES:
        value = result.source_accuracy(label)
        if value is not None and value < SINGLE_TARGET:
            misses.append(f"{file}: {label} {value:.1%} < {SINGLE_TARGET:.0%}")
    share = result.none_confident_share
    if share is not None and share > NONE_CONFIDENT_MAX:
        misses.append(f"{file}: none routed confidently {share:.1%} > {NONE_CONFIDENT_MAX:.0%}")
    return misses


def _pct(value: float | None) -> str:
    return "    -" if value is None else f"{value * 100:5.1f}%"


def render(file: str, by_half: dict[str, Score], compound: bool) -> str:
    lines = [f"== {file}"]
    halves = list(by_half)
    lines.append("   " + " " * 22 + "".join(f"{h:>20}" for h in halves))
    keys = sorted({k for s in by_half.values() for k in s.per_source})
    for key in keys:
        cells = []
        for half in halves:
            right, total = by_half[half].per_source.get(key, [0, 0])
            cells.append(f"{_pct(right / total if total else None)} ({right:>3}/{total:<3})")
        lines.append(f"   {key:<22}" + "".join(f"{c:>20}" for c in cells))
    cells = [
        f"{_pct(by_half[h].accuracy)} ({by_half[h].correct:>3}/{by_half[h].rows:<3})"
        for h in halves
    ]
    lines.append(f"   {'all rows':<22}" + "".join(f"{c:>20}" for c in cells))
    if not compound and any(s.none_rows for s in by_half.values()):
        cells = [
            f"{_pct(by_half[h].none_confident_share)} ({by_half[h].none_confident:>3}/"
            f"{by_half[h].none_rows:<3})"
            for h in halves
        ]
        lines.append(f"   {'none -> a source':<22}" + "".join(f"{c:>20}" for c in cells))
    merged: dict[str, Counter[str]] = defaultdict(Counter)
    for result in by_half.values():
        for key, counts in result.confusion.items():
            merged[key].update(counts)
    columns = sorted(
        {c for counts in merged.values() for c in counts},
        key=lambda c: (c not in LABELS, LABELS.index(c) if c in LABELS else 0, c),
    )
    lines.append("   confusion (" + "+".join(halves) + "; rows expected, columns routed):")
    widths = [max(len(c), 5) + 2 for c in columns]
    lines.append(
        "   " + " " * 22 + "".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=False))
    )
    for key in sorted(merged):
        lines.append(
            f"   {key:<22}"
            + "".join(
                f"{merged[key].get(c, 0):>{w}}" for c, w in zip(columns, widths, strict=False)
            )
        )
    return "\n".join(lines)


def isolated_config(config_path: Path) -> Any:
    """config_path with its sources swapped for the scripted test kind, routing untouched.

    Routing quality depends only on the `routing:` section; this keeps the measurement
    independent of whether a source's backend (a ZIM file, Home Assistant) is installed.
    """
    import yaml

    from search.config import parse_config
    from tests.support import scripted

    scripted.register()
    data = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    keep = ("enabled", "description", "fallback", "timeout_s")
    data["sources"] = {
        name: {**{k: v for k, v in entry.items() if k in keep}, "type": "scripted"}
        for name, entry in (data.get("sources") or {}).items()
    }
    data.setdefault("trace", {})["enabled"] = False
    return parse_config(data)


async def evaluate(
    config: Any, files: dict[str, list[Row]], household: Any = None
) -> dict[str, list[Outcome]]:
    """Outcomes per file, from one Service (one model load). `household`: a household's
    routing artefact to route with (default none: the shipped routing, whatever the data
    directory of this machine holds)."""
    from search.service import Service

    service = Service(config, household=household)
    await service.start(sources=False)
    try:
        return {name: await route_rows(service, rows) for name, rows in files.items()}
    finally:
        await service.aclose()


def summarise(
    outcomes: dict[str, list[Outcome]], halves: tuple[str, ...] = HALVES
) -> dict[str, dict[str, Score]]:
    return {
        name: {half: score(o for o in rows if half_of(o.row.text) == half) for half in halves}
        for name, rows in outcomes.items()
    }


def with_llm(config: Any, base_url: str, model: str, timeout_s: float, bias_check: bool) -> Any:
    """`config` with the LLM stage configured (everything else as it was)."""
    from routing.config import LLMConfig

    llm = LLMConfig(base_url=base_url, model=model, timeout_s=timeout_s, bias_check=bias_check)
    routing = config.routing.model_copy(update={"llm": llm})
    return config.model_copy(update={"routing": routing})


# The three runs of `--llm`, and their names in bench/results/llm_quality.json.
LLM_RUN_KEYS = {
    "no LLM": "no_llm",
    "LLM, every answer": "every_answer",
    "LLM, bias check": "bias_check",
}


def llm_counts(outcomes: list[Outcome]) -> list[int]:
    """[right, rows the LLM decided a part of, those right, rows it failed on]."""
    decided = [o for o in outcomes if any(stage == "intent_llm" for _, _, stage in o.parts)]
    return [
        sum(o.correct for o in outcomes),
        len(decided),
        sum(o.correct for o in decided),
        sum(o.llm_failed for o in outcomes),
    ]


def llm_totals(runs: dict[str, dict[str, list[Outcome]]]) -> dict[str, list[int]]:
    """`llm_counts` of each run over all its files."""
    return {
        label: [sum(column) for column in zip(*map(llm_counts, files.values()), strict=True)]
        for label, files in runs.items()
    }


def llm_figures(runs: dict[str, dict[str, list[Outcome]]], server: str) -> dict[str, Any]:
    """The side-by-side totals as bench/results/llm_quality.json keeps them."""
    rows = sum(len(outcomes) for outcomes in next(iter(runs.values())).values())
    figures: dict[str, Any] = {"rows": rows, "server": server}
    for label, (right, decided, decided_right, failed) in llm_totals(runs).items():
        key = LLM_RUN_KEYS[label]
        figures[f"{key}_right"] = right
        if key != "no_llm":
            figures[f"{key}_decided"] = decided
            figures[f"{key}_decided_right"] = decided_right
            figures[f"{key}_failed"] = failed
    return figures


def llm_report(runs: dict[str, dict[str, list[Outcome]]], seconds: float) -> str:
    """Per file: accuracy of each run (the first without an LLM), and what the LLM did."""
    labels = list(runs)
    plain = runs[labels[0]]
    header = f"   {'file':<28}" + "".join(f"{label:>22}" for label in labels)
    lines = [
        "== without and with the LLM, side by side (all rows; LLM: decided/right/failed)",
        header,
    ]
    totals = llm_totals(runs)
    rows_total = sum(len(without) for without in plain.values())
    for name, without in plain.items():
        rows = len(without)
        cells = [
            _run_cell(llm_counts(runs[label][name]), rows, label == labels[0]) for label in labels
        ]
        lines.append(f"   {name:<28}" + "".join(cells))
    lines.append(
        f"   {'all files':<28}"
        + "".join(_run_cell(totals[label], rows_total, label == labels[0]) for label in labels)
    )
    base = totals[labels[0]][0]
    for label in labels[1:]:
        delta = totals[label][0] - base
        verdict = "WORSE" if delta < 0 else "not worse" if delta == 0 else "better"
        lines.append(
            f"   {label}: routing is {verdict} than without an LLM ({delta:+d} rows, "
            f"{delta / rows_total:+.1%})"
        )
    lines.append(
        f"   ({rows_total} utterances; decided: rows with a part the LLM decided; "
        "failed: rows where it failed, answered unusably or named the route it names "
        f"for a query with no content; {seconds:.0f}s for the LLM runs)"
    )
    return "\n".join(lines)


def _run_cell(counts: list[int], rows: int, plain: bool) -> str:
    right, decided, decided_right, failed = counts
    if plain:
        return f"{right / rows:>14.1%} ({right:>4})"
    return f"{right / rows:>8.1%} {decided:>4}/{decided_right:>3}/{failed:<4}"


def with_confidence(config: Any, path: Path) -> Any:
    """`config` with its routing reading the confidence artefact at `path`."""
    routing = config.routing.model_copy(update={"confidence_path": str(path)})
    return config.model_copy(update={"routing": routing})


@dataclass(slots=True)
class LeftOut:
    """One evaluation file judged by a fit that never saw its corpus."""

    corpus: str
    score: Score
    ece: float | None  # the fit's held-out calibration error on that corpus
    compound: bool = False
    # [right, rows] counted by the source that answers each part, and of the `none` rows
    # [answered by a source, rows] (`Outcome.answered`)
    answered: tuple[int, int] = (0, 0)
    none_answered: tuple[int, int] = (0, 0)


def fit_only_name(corpus: str) -> str:
    """How a fit corpus with no evaluation file of its own is named among the files."""
    return f"{corpus} (fit data)"


async def leave_one_corpus_out(
    config: Any, files: dict[str, list[Row]], workdir: Path
) -> dict[str, LeftOut]:
    """Per file: fit without its corpus (the other corpora's rows only), route the file.
    A fit corpus that no evaluation file comes from (OpenTriviaQA) is routed the same way,
    from its own fit rows, so every corpus gets a left-out figure.

    What is left out is the corpus's rows in the fit of the confidence weights, nothing
    else: the shipped rules, exemplars, word lists and thresholds were written while reading
    these corpora's errors (none equals an evaluation text, but they are not blind to them),
    so these figures flatter routing; the sealed figures are the estimate of unseen language.
    """
    import numpy as np

    from routing.fitting import fit

    shipped = fit.shipped_rows()
    examples = await fit.describe(config, shipped)
    _, report = fit.fit_described(examples)
    corpora = np.asarray(examples.corpus)
    judged: dict[str, dict[str, list[Row]]] = defaultdict(dict)  # corpus -> its files
    for name, rows in files.items():
        if name in CORPUS_OF_FILE:
            judged[CORPUS_OF_FILE[name]][name] = rows
    for corpus in set(examples.corpus) - set(CORPUS_OF_FILE.values()):
        name = fit_only_name(corpus)
        judged[corpus][name] = [
            Row(name, r.text, r.route, "") for r in shipped if r.corpus == corpus
        ]
    found: dict[str, LeftOut] = {}
    for corpus in sorted(judged):
        model, _ = fit.fit_described(examples.subset(corpora != corpus))
        path = workdir / f"without-{corpus}.json"
        fit.write(model, path)
        outcomes = await evaluate(with_confidence(config, path), judged[corpus])
        for name, rows in outcomes.items():
            compound = any(o.row.compound for o in rows)
            ece = report["ece_per_corpus"].get(corpus)
            nones = [o for o in rows if o.row.expected == "none"]
            found[name] = LeftOut(
                corpus,
                score(rows),
                ece,
                compound,
                (sum(o.answered_correct for o in rows), len(rows)),
                (sum(o.answered_by_source for o in nones), len(nones)),
            )
    return found


async def gibberish_defaults(config: Any) -> tuple[int, int]:
    """(how many GIBBERISH strings ended at intent_default, how many there are)."""
    from search.service import Service

    service = Service(config, household=None)
    await service.start(sources=False)
    try:
        stages = [
            [r.stage for r in (await service.search(text, dry_run=True)).results]
            for text in GIBBERISH
        ]
    finally:
        await service.aclose()
    return sum(all(s == "intent_default" for s in found) for found in stages), len(GIBBERISH)


UNSERVED_CHECK = ROOT / "routing" / "fit_data" / "staged" / "banking77_check.jsonl"


async def unserved_routed(config: Any, path: Path = UNSERVED_CHECK) -> tuple[int, int, int]:
    """(how many of `path`'s requests, none of which any source serves, some part of went
    to a source by a decision; how many there are; how many some source answers, the
    default route's included). Banking77 train rows that the `none` route's classifier
    prior was not fitted on (routing/fitting/prior_fit.py)."""
    from search.service import Service

    texts = [json.loads(line)["text"] for line in path.read_text().splitlines() if line]
    service = Service(config, household=None)
    await service.start(sources=False)
    try:
        rows = [Row(path.name, text, "none", "") for text in texts]
        outcomes = await route_rows(service, rows)
    finally:
        await service.aclose()
    return (
        sum(o.confident_source for o in outcomes),
        len(outcomes),
        sum(o.answered_by_source for o in outcomes),
    )


def render_loco(found: dict[str, LeftOut]) -> str:
    lines = ["== leave-one-corpus-out (each file routed by a fit without its corpus)"]
    for name, left in sorted(found.items()):
        result = left.score
        cells = [
            f"{key} {_pct(right / total)}"
            for key, (right, total) in sorted(result.per_source.items())
            if total
        ]
        lines.append(f"   {name:<28} all {_pct(result.accuracy)}  " + ", ".join(cells))
        if result.none_rows:
            lines.append(f"   {'':<28} none -> a source {_pct(result.none_confident_share)}")
        right, rows = left.answered
        if rows:
            shown = f"   {'':<28} by the source that answers: all {_pct(right / rows)}"
            sourced, nones = left.none_answered
            if nones:
                shown += f", none answered by a source {_pct(sourced / nones)}"
            lines.append(shown)
        if left.ece is not None:
            lines.append(f"   {'':<28} ECE (held-out {left.corpus}) {left.ece:.3f}")
    return "\n".join(lines)


def cost_lines() -> list[str]:
    """What the routing measured above costs, as its benches last measured it (each
    figure with its command, date and commit; bench/results/)."""
    from bench import results

    lines = []
    found = {}
    for name in ("fit_cost", "semantic_stage", "route_batch"):
        try:
            found[name] = results.load(name)
        except (OSError, ValueError):
            lines.append(f"{name}: not measured (bench/results/{name}.json is missing)")
    when = {name: f"{body['date']} {body['commit']}" for name, body in found.items()}
    if "fit_cost" in found:
        f = found["fit_cost"]["figures"]
        lines.append(
            f"{when['fit_cost']} fit: {f['seconds']:.0f} s on {f['cores']} cores for "
            f"{f['rows']:,} rows; artefact {f['artefact_bytes'] / 1024:.1f} kB, route data "
            f"{f['route_data_bytes'] / 1024:.0f} kB ({f['exemplars']:,} exemplars)"
        )
        for what, key in (
            ("classifier prior", "prior"),
            ("`none` classifier prior", "unserved_prior"),
            ("time-sensitivity model", "time_model"),
        ):
            if f.get(f"{key}_bytes"):
                took = f.get(f"{key}_seconds")
                lines.append(
                    f"{when['fit_cost']} {what}: "
                    + (f"{took:.0f} s to fit, " if took is not None else "")
                    + f"artefact {f[f'{key}_bytes'] / 1024:.1f} kB"
                )
    if "semantic_stage" in found:
        f = found["semantic_stage"]["figures"]
        lines.append(
            f"{when['semantic_stage']} semantic stage p50 {f['p50_ms']:.1f} ms, p99 "
            f"{f['p99_ms']:.1f} ms (target p50 <= {f['target_ms']:g} ms)"
        )
    if "route_batch" in found:
        f = found["route_batch"]["figures"]
        lines.append(
            f"{when['route_batch']} search route --input, {f['queries']:,} queries: "
            f"{f['batch_s']:.1f} s (target < {f['target_s']:g} s, model load included)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--eval-dir", default=None, help="default: ../shared/eval")
    parser.add_argument("--half", choices=["all", *HALVES], default="all")
    parser.add_argument("--errors", type=int, default=0, help="print N misrouted rows per file")
    parser.add_argument(
        "--isolated",
        action="store_true",
        help="swap the sources for the scripted test kind (no backends needed)",
    )
    parser.add_argument("--only", default="", help="only files whose name contains this")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--llm",
        default="",
        metavar="BASE_URL",
        help="also route with this OpenAI-compatible LLM server, side by side",
    )
    parser.add_argument("--llm-model", default="router", help="the model name to ask for")
    parser.add_argument("--llm-timeout", type=float, default=30.0, help="routing.llm.timeout_s")
    parser.add_argument(
        "--llm-server",
        default="",
        help="what serves the model, as the figures name it (default: the model name)",
    )
    parser.add_argument(
        "--json-out",
        default="",
        metavar="PATH",
        help="with --llm: also write the side-by-side totals, dated (bench/results/llm_quality.json)",
    )
    parser.add_argument(
        "--no-sealed",
        action="store_true",
        help="skip the sealed-corpora figures (bench/sealed_quality.py) printed first",
    )
    parser.add_argument(
        "--no-loco",
        action="store_true",
        help="skip the leave-one-corpus-out figures (three more fits)",
    )
    args = parser.parse_args(argv)
    if args.json_out and not args.llm:
        parser.error("--json-out writes the LLM comparison: it needs --llm BASE_URL")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from search.config import load_config

    eval_dir = Path(args.eval_dir) if args.eval_dir else default_eval_dir()
    files = {k: v for k, v in load_rows(eval_dir).items() if args.only in k}
    if not files:
        print(f"no *.jsonl files in {eval_dir}", file=sys.stderr)
        return 2
    config = isolated_config(Path(args.config)) if args.isolated else load_config(args.config)
    sealed: list[str] = []
    if not args.no_sealed:
        from bench import sealed_quality

        try:
            sealed = sealed_quality.measure(config)
        except sealed_quality.SealedDataError as error:
            print(f"sealed data: {error}", file=sys.stderr)
            return 2
        if not args.json:
            print("== sealed corpora (the trusted estimate; bench/sealed/MANIFEST.md)")
            print("\n".join(sealed))
            print("== what it costs (bench/fit_cost.py, semantic_stage.py, route_batch.py)")
            print("\n".join(cost_lines()))
            print()
    runs: dict[str, dict[str, list[Outcome]]] = {}
    started = time.perf_counter()
    if args.llm:
        runs["no LLM"] = asyncio.run(evaluate(config, files))
        started = time.perf_counter()
        unchecked = with_llm(config, args.llm, args.llm_model, args.llm_timeout, False)
        runs["LLM, every answer"] = asyncio.run(evaluate(unchecked, files))
        config = with_llm(config, args.llm, args.llm_model, args.llm_timeout, True)
    outcomes = asyncio.run(evaluate(config, files))
    elapsed = time.perf_counter() - started
    if args.llm:
        runs["LLM, bias check"] = outcomes
    gibberish = asyncio.run(gibberish_defaults(config))
    unserved = asyncio.run(unserved_routed(config))
    loco: dict[str, LeftOut] = {}
    if not args.no_loco:
        import tempfile

        with tempfile.TemporaryDirectory() as workdir:
            loco = asyncio.run(leave_one_corpus_out(config, files, Path(workdir)))
    halves = HALVES if args.half == "all" else (args.half,)
    summary = summarise(outcomes, halves)
    misses: list[str] = []
    for name, left in loco.items():
        misses += [f"[loco] {m}" for m in check_targets(name, left.score, left.compound)]
        if left.ece is not None and left.ece > ECE_MAX:
            misses.append(f"[loco] {name}: ECE {left.ece:.3f} > {ECE_MAX}")
    if gibberish[0] < gibberish[1]:
        misses.append(f"gibberish: {gibberish[1] - gibberish[0]} of {gibberish[1]} routed")
    if unserved[0] > NONE_CONFIDENT_MAX * unserved[1]:
        misses.append(f"unserved check: {unserved[0]} of {unserved[1]} routed to a source")
    if args.json:
        print(
            json.dumps(
                {
                    "sealed": sealed,
                    "in_corpus": {
                        name: {half: s.to_dict() for half, s in by_half.items()}
                        for name, by_half in summary.items()
                    },
                    "leave_one_corpus_out": {
                        name: {
                            "corpus": left.corpus,
                            "ece": left.ece,
                            **left.score.to_dict(),
                            "answered": list(left.answered),
                            "none_answered": list(left.none_answered),
                        }
                        for name, left in loco.items()
                    },
                    "gibberish_to_default": {"defaulted": gibberish[0], "of": gibberish[1]},
                    "unserved_check": {
                        "routed": unserved[0],
                        "of": unserved[1],
                        "answered_by_a_source": unserved[2],
                    },
                },
                indent=2,
            )
        )
    else:
        for name, by_half in summary.items():
            compound = any(o.row.compound for o in outcomes[name])
            print(render(name, by_half, compound))
            if args.errors:
                wrong = [
                    o for o in outcomes[name] if not o.correct and half_of(o.row.text) in halves
                ]
                for o in wrong[: args.errors]:
                    parts = " | ".join(f"{p} -> {label} ({stage})" for p, label, stage in o.parts)
                    print(f"     x [{half_of(o.row.text)}] expected {o.row.expected}: {parts}")
            print()
        if runs:
            print(llm_report(runs, elapsed))
            print()
        if loco:
            print(render_loco(loco))
            print()
        print(f"gibberish -> intent_default: {gibberish[0]}/{gibberish[1]}")
        print(
            f"unserved check ({UNSERVED_CHECK.name}, not fitted on) -> a source: "
            f"{unserved[0]}/{unserved[1]} ({_pct(unserved[0] / unserved[1])}); answered by a "
            f"source, the default included: {unserved[2]}/{unserved[1]}"
        )
        total = sum(len(rows) for rows in outcomes.values())
        print(f"{total} utterances in {elapsed:.1f}s (model load included)")
        print("targets: all met" if not misses else "targets missed:\n  " + "\n  ".join(misses))
    if runs and args.json_out:
        from bench import results

        shown = sys.argv[1:] if argv is None else argv
        command = results.command_line("bench/routing_quality.py", shown, {"--llm": "URL"})
        server = args.llm_server or args.llm_model
        written = results.write(args.json_out, "llm_quality", command, llm_figures(runs, server))
        print(f"wrote {written}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
