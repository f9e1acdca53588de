"""Routing quality on sealed corpora: the estimate of unseen language that can be trusted.

No rule, exemplar, word list, threshold or confidence fit was written from the sealed
corpora (bench/sealed/MANIFEST.md), and nobody reads them row by row. This script is the one way they are scored, and it prints aggregates
only: never a row, a sentence or a per-row error. Every line names the day and commit.

It runs the decisions the service really makes (a `Service` in dry-run mode, as
`search route` does) over every sealed row, and over compound requests it builds from
them (two rows of different routes joined by ", ", " and ", " and then ", " and also ",
drawn with a fixed seed), and prints:
- accuracy per corpus and per route, and pooled per route;
- the share of unserved (`none`) rows some part of which went to a source;
- compound accuracy (the parts' labels are exactly the pair's two routes);
- each share with its 95% Wilson interval (a set of 1,000 rows is good to about ±2.6 points,
  1,500 to about ±2);
- per stage, over the single-intent rows' parts: how many, the mean confidence the stage
  stated on its intent event, the share right, and the calibration error (ECE, 10
  equal-width bins), and likewise for the parts a time redirect moved (`time_sensitive`,
  `time_stable`: the confidence they state for the new route); then the pipeline's ECE over
  each part's final statement (the redirect's where one moved it, else the intent
  stage's). A part's confidence is judged against the route its event names: a declined
  part's default (`kiwix` at the declining stage's 0.31 for it), or `none` for an unserved
  one; accuracy above counts a part that ended at the default as `none`, whatever the
  default route;
- the accuracy figures again counted by the source that answers each part (lines "by the
  source that answers"): the service answers a part that ended at the default from the
  default's source (`kiwix`), so there it counts as that route, and only an unserved part
  counts as `none`. The first count says whether the stages decided; this one says what
  the user gets: an encyclopedic question left to the default is answered right, and a
  request no source serves that fell to the default is answered by a source.

    .venv/bin/python bench/sealed_quality.py [--config config.yaml] [--isolated]
        [--sealed-dir DIR] [--compound N]

Exit 2 when a sealed file is missing or its checksum differs from bench/sealed/SHA256SUMS.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gzip
import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import wilson  # noqa: E402

SEALED_DIR = ROOT / "bench" / "sealed"
LABELS = ("forecast", "ha", "kiwix", "web", "none")
CONNECTORS = (", ", " and ", " and then ", " and also ")
COMPOUND_ROWS = 1000
BINS = 10


class SealedDataError(Exception):
    """A sealed file is missing or not what SHA256SUMS says."""


@dataclass(frozen=True, slots=True)
class Row:
    corpus: str
    text: str
    expected: tuple[str, ...]  # one route, or the sorted routes of a compound request

    @property
    def compound(self) -> bool:
        return len(self.expected) > 1


def verify(sealed_dir: Path) -> dict[str, Path]:
    """The sealed files by corpus name, each checked against SHA256SUMS."""
    sums = sealed_dir / "SHA256SUMS"
    if not sums.is_file():
        raise SealedDataError(f"{sums} is missing")
    files = {}
    for line in sums.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        digest, name = line.split(maxsplit=1)
        path = sealed_dir / name
        if not path.is_file():
            raise SealedDataError(f"{path} is missing")
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise SealedDataError(f"{path} does not match its SHA-256 in {sums}")
        files[path.name.split(".")[0]] = path
    if not files:
        raise SealedDataError(f"{sums} lists no file")
    return files


def load(sealed_dir: Path) -> dict[str, list[Row]]:
    found: dict[str, list[Row]] = {}
    for corpus, path in verify(sealed_dir).items():
        lines = gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        found[corpus] = [Row(corpus, r["text"], (r["expected"],)) for r in rows]
    return found


def compounds(corpora: dict[str, list[Row]], count: int) -> list[Row]:
    """`count` requests, each two single rows of different routes joined by a connector."""
    by_route: dict[str, list[Row]] = defaultdict(list)
    for rows in corpora.values():
        for row in rows:
            by_route[row.expected[0]].append(row)
    routes = sorted(by_route)
    if len(routes) < 2:
        return []
    pairs = [(a, b) for a in routes for b in routes if a != b]
    draw = random.Random("sealed-compound")
    built = []
    for index in range(count):
        first, second = draw.choice(pairs)
        a, b = draw.choice(by_route[first]), draw.choice(by_route[second])
        text = a.text.rstrip(" ?.!") + CONNECTORS[index % len(CONNECTORS)] + b.text
        built.append(Row("compound", text, tuple(sorted({first, second}))))
    return built


@dataclass(slots=True)
class Decided:
    """One part's statement: its last intent event (or the time redirect that moved it):
    which step, the route it named, how sure; `final` when no later step restated it."""

    stage: str
    label: str
    confidence: float
    final: bool = True


REDIRECTS = frozenset({"time_sensitive", "time_stable"})


@dataclass(slots=True)
class Outcome:
    row: Row
    labels: tuple[str, ...]  # the parts' labels, sorted, deduplicated
    decided: list[Decided] = field(default_factory=list)
    # The routes whose source answers the parts (`none` for an unserved part), sorted and
    # deduplicated: a part that ended at the default counts as the default's route here.
    # Empty: the same as `labels`.
    answered: tuple[str, ...] = ()

    @property
    def correct(self) -> bool:
        return self.labels == self.row.expected

    @property
    def to_a_source(self) -> bool:
        return any(label != "none" for label in self.labels)

    @property
    def answered_correct(self) -> bool:
        return (self.answered or self.labels) == self.row.expected

    @property
    def answered_by_a_source(self) -> bool:
        return any(label != "none" for label in self.answered or self.labels)


def part_label(route: str | None, stage: str | None) -> str:
    return "none" if route is None or stage == "intent_default" else route


async def route_all(service: Any, rows: list[Row]) -> list[Outcome]:
    outcomes = []
    for row in rows:
        outcome = await service.search(row.text, dry_run=True)
        labels, answered = set(), set()
        for result in outcome.results:
            for part in (result.condition, result):
                if part is not None:
                    labels.add(part_label(part.route, part.stage))
                    answered.add(part.route or "none")
        last: dict[str, dict[str, Any]] = {}
        moved: dict[str, dict[str, Any]] = {}
        for event in outcome.chain:
            step = str(event["step"])
            if "confidence" not in event:
                continue
            if step.startswith("intent_"):
                last[str(event.get("part"))] = event
            elif step in REDIRECTS:
                moved[str(event.get("part"))] = event
        # Judged against the route the event states its confidence for: a declined part
        # ends at the default with the default route's confidence ("kiwix, 0.31"), an
        # unserved one with the confidence that no source serves it, a redirected one at
        # its new route with the confidence the redirect states.
        decided = [
            Decided(
                str(e["step"]),
                str(e.get("decision") or "none"),
                float(e["confidence"]),
                final=part not in moved,
            )
            for part, e in last.items()
        ] + [
            Decided(str(e["step"]), str(e["to_route"]), float(e["confidence"]))
            for e in moved.values()
        ]
        outcomes.append(
            Outcome(
                row,
                tuple(sorted(labels)) or ("none",),
                decided,
                tuple(sorted(answered)) or ("none",),
            )
        )
    return outcomes


async def evaluate(config: Any, rows: list[Row]) -> list[Outcome]:
    """Outcomes from one Service (one model load), without sources, dry runs, no traces."""
    from search.service import Service
    from search.traces.records import NullTraceSink

    service = Service(config, traces=NullTraceSink(), household=None)
    await service.start(sources=False)
    try:
        return await route_all(service, rows)
    finally:
        await service.aclose()


def ece(pairs: list[tuple[float, bool]]) -> float:
    """Expected calibration error over (stated confidence, right) pairs."""
    if not pairs:
        return 0.0
    bins: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    for confidence, right in pairs:
        bins[min(int(confidence * BINS), BINS - 1)].append((confidence, right))
    total = 0.0
    for members in bins.values():
        stated = sum(c for c, _ in members) / len(members)
        actual = sum(r for _, r in members) / len(members)
        total += len(members) * abs(stated - actual)
    return total / len(pairs)


def stamp() -> str:
    """Today and the commit measured (marked +dirty when the work tree has changes)."""

    def git(*args: str) -> str:
        found = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return found.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    return f"{datetime.date.today().isoformat()} {commit}"


def _share(right: int, total: int) -> str:
    """The share, its counts and its 95% Wilson interval (`bench.common.wilson`)."""
    if not total:
        return "- (0/0)"
    low, high = wilson(right, total)
    return f"{right / total:.3f} ({right}/{total}, 95% CI {low:.3f}-{high:.3f})"


Counts = dict[str, dict[str, Counter[str]]]  # corpus -> expected route -> what -> rows


def _sorted_counts(counts: Counts) -> dict[str, dict[str, dict[str, int]]]:
    """`counts` as plain dicts, corpora and the counted names in order (stable JSON)."""
    return {
        corpus: {route: dict(sorted(tally.items())) for route, tally in counts[corpus].items()}
        for corpus in sorted(counts)
    }


def figures(singles: list[Outcome], joined: list[Outcome]) -> dict[str, Any]:
    """The aggregates as numbers, for the printed lines and bench/results/sealed_quality.json:
    [right, total] pairs per corpus, per corpus and route, and per route; unserved rows
    routed to a source, per corpus and pooled; per corpus and expected route, how many rows
    ended at each answer, and the stage that decided those answered wrongly; compound; and
    per stage its parts, mean stated confidence, share right and ECE; and under `answered`
    the accuracy figures counted by the source that answers each part. Nothing in them
    comes from a row's text."""
    # per corpus and expected route, the rows answered wrongly per the stage that had the
    # last word on them
    wrong_stages: Counts = defaultdict(lambda: defaultdict(Counter))
    by_stage: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    final: list[tuple[float, bool]] = []
    for o in singles:
        route = o.row.expected[0]
        if not o.correct:
            ended = "+".join(sorted({d.stage for d in o.decided if d.final} or {"none"}))
            wrong_stages[o.row.corpus][route][ended] += 1
        for d in o.decided:
            by_stage[d.stage].append((d.confidence, d.label == route))
            if d.final:
                final.append((d.confidence, d.label == route))
    return {
        "answered": _accuracy(singles, joined, by_the_answering_source=True),
        **_accuracy(singles, joined, by_the_answering_source=False),
        "wrong_stages": _sorted_counts(wrong_stages),
        "stages": {
            stage: {
                "parts": len(pairs),
                "stated": round(sum(c for c, _ in pairs) / len(pairs), 3),
                "right": round(sum(r for _, r in pairs) / len(pairs), 3),
                "ece": round(ece(pairs), 3),
            }
            for stage, pairs in sorted(by_stage.items())
        },
        "pipeline_ece": round(ece(final), 3),
    }


def _accuracy(
    singles: list[Outcome], joined: list[Outcome], *, by_the_answering_source: bool
) -> dict[str, Any]:
    """[right, total] per corpus, per corpus and route, per route and for the compound
    requests; the rows per answer (per corpus and expected route); unserved rows some part
    of which a source answers. Each part counted by its decision (`Outcome.labels`: a part
    that ended at the default is `none`, no stage decided it) or, `by_the_answering_source`,
    as the route whose source answers it (`Outcome.answered`: the default's source answers
    such a part, so an encyclopedic question left to the default `kiwix` is right, and a
    request no source serves that fell to it is answered by a source)."""
    corpora: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    routes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    cells: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    routed: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    confusion: Counts = defaultdict(lambda: defaultdict(Counter))

    def right(o: Outcome) -> bool:
        return o.answered_correct if by_the_answering_source else o.correct

    for o in singles:
        route = o.row.expected[0]
        for tally in (corpora[o.row.corpus], routes[route], cells[o.row.corpus][route]):
            tally[0] += right(o)
            tally[1] += 1
        shown = (o.answered or o.labels) if by_the_answering_source else o.labels
        confusion[o.row.corpus][route]["+".join(shown)] += 1
        if route == "none":
            sourced = o.answered_by_a_source if by_the_answering_source else o.to_a_source
            routed[o.row.corpus][0] += sourced
            routed[o.row.corpus][1] += 1
    return {
        "corpora": {name: corpora[name] for name in sorted(corpora)},
        "corpus_routes": {
            name: {route: cells[name][route] for route in LABELS if route in cells[name]}
            for name in sorted(cells)
        },
        "per_route": {route: routes[route] for route in LABELS if route in routes},
        "confusion": _sorted_counts(confusion),
        "corpus_none_routed": {name: routed[name] for name in sorted(routed)},
        "none_routed": [sum(r for r, _ in routed.values()), sum(t for _, t in routed.values())],
        "compound": [sum(right(o) for o in joined), len(joined)],
    }


def report(found: dict[str, Any], seconds: float) -> list[str]:
    """The aggregate lines (undated) of `figures`."""
    lines = []
    for corpus, pair in found["corpora"].items():
        cells = ", ".join(f"{k} {_share(*v)}" for k, v in found["corpus_routes"][corpus].items())
        lines.append(f"sealed {corpus}: all {_share(*pair)}; {cells}")
        if corpus in found["corpus_none_routed"]:
            share = _share(*found["corpus_none_routed"][corpus])
            lines.append(f"sealed {corpus}: none routed to a source {share}")
    for corpus, by_route in found.get("confusion", {}).items():
        for route, answers in by_route.items():
            cells = ", ".join(f"{answer} {count}" for answer, count in answers.items())
            lines.append(f"sealed {corpus}: {route} rows answered {cells}")
    for corpus, by_route in found.get("wrong_stages", {}).items():
        for route, stages in by_route.items():
            cells = ", ".join(f"{stage} {count}" for stage, count in stages.items())
            lines.append(f"sealed {corpus}: {route} rows answered wrongly, last decided by {cells}")
    cells = ", ".join(f"{k} {_share(*v)}" for k, v in found["per_route"].items())
    lines.append(f"sealed pooled per route: {cells}")
    lines.append(f"sealed pooled: none routed to a source {_share(*found['none_routed'])}")
    lines.append(f"sealed compound (two routes joined): {_share(*found['compound'])}")
    for stage, f in found["stages"].items():
        lines.append(
            f"sealed stage {stage}: parts {f['parts']}, stated {f['stated']:.3f}, "
            f"right {f['right']:.3f}, ECE {f['ece']:.3f}"
        )
    lines.append(
        f"sealed pipeline ECE (single-intent parts, each part's final statement): "
        f"{found['pipeline_ece']:.3f}"
    )
    answered = found.get("answered")
    if answered:  # the same rows, each part counted as the route whose source answers it
        by = "by the source that answers"
        for corpus, pair in answered["corpora"].items():
            cells = ", ".join(
                f"{k} {_share(*v)}" for k, v in answered["corpus_routes"][corpus].items()
            )
            lines.append(f"sealed {corpus}, {by}: all {_share(*pair)}; {cells}")
            if corpus in answered["corpus_none_routed"]:
                share = _share(*answered["corpus_none_routed"][corpus])
                lines.append(f"sealed {corpus}, {by}: none answered by a source {share}")
        for corpus, by_route in answered["confusion"].items():
            for route, answers in by_route.items():
                cells = ", ".join(f"{answer} {count}" for answer, count in answers.items())
                lines.append(f"sealed {corpus}, {by}: {route} rows answered {cells}")
        cells = ", ".join(f"{k} {_share(*v)}" for k, v in answered["per_route"].items())
        lines.append(f"sealed pooled per route, {by}: {cells}")
        lines.append(
            f"sealed pooled, {by}: none answered by a source {_share(*answered['none_routed'])}"
        )
        lines.append(f"sealed compound, {by}: {_share(*answered['compound'])}")
    singles = sum(total for _, total in found["corpora"].values())
    lines.append(
        f"sealed rows: {singles} single-intent, {found['compound'][1]} compound; "
        f"{seconds:.1f}s (model load included)"
    )
    return lines


def measure(config: Any, sealed_dir: Path = SEALED_DIR, compound: int = COMPOUND_ROWS) -> list[str]:
    """The dated aggregate lines for `config` (raises SealedDataError on a bad file)."""
    return measure_all(config, sealed_dir, compound)[0]


def measure_all(
    config: Any, sealed_dir: Path = SEALED_DIR, compound: int = COMPOUND_ROWS
) -> tuple[list[str], dict[str, Any]]:
    """`measure`'s lines and `figures`' numbers, from one run."""
    corpora = load(sealed_dir)
    singles = [row for rows in corpora.values() for row in rows]
    joined = compounds(corpora, compound)
    started = time.perf_counter()
    quiet = logging.root.manager.disable
    logging.disable(logging.WARNING)  # a log record may quote a query: none is printed
    try:
        outcomes = asyncio.run(evaluate(config, singles + joined))
    finally:
        logging.disable(quiet)
    elapsed = time.perf_counter() - started
    found = figures(outcomes[: len(singles)], outcomes[len(singles) :])
    when = stamp()
    return [f"{when} {line}" for line in report(found, elapsed)], found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument(
        "--isolated",
        action="store_true",
        help="swap the sources for the scripted test kind (no backends needed)",
    )
    parser.add_argument("--sealed-dir", default=str(SEALED_DIR))
    parser.add_argument("--compound", type=int, default=COMPOUND_ROWS)
    parser.add_argument(
        "--json-out", default="", help="also write the figures (bench/results/sealed_quality.json)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from bench.routing_quality import isolated_config
    from search.config import load_config

    config_path = Path(args.config)
    if not config_path.is_file():
        print(f"no config file at {config_path}", file=sys.stderr)
        return 2
    config = isolated_config(config_path) if args.isolated else load_config(args.config)
    try:
        lines, found = measure_all(config, Path(args.sealed_dir), args.compound)
    except SealedDataError as error:
        print(f"sealed data: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    if args.json_out:
        from bench import results

        shown = sys.argv[1:] if argv is None else argv
        command = results.command_line("bench/sealed_quality.py", shown)
        results.write(args.json_out, "sealed_quality", command, found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
