"""Sentence ends: splitting only between two requests vs splitting at every sentence end.

The rule before (kept here only to compare) split at every "?", "!" and at a full stop after
three letters; the rule now splits at a full stop after two letters or digits too ("in nc.",
"at 8 pm."), but only between two requests (routing/language/decompose.py, routing/language/sentences.py).

Both rules run side by side in one process, on one `Service` (the shipped config, sources
swapped for the scripted kind, dry run, no LLM), over two sets:

- `two requests`: the compound rows of `../shared/eval` whose two utterances were joined
  by "and then" / "and also", joined again as two sentences ("Light up. Tell me the
  weather for this week."). Right when the parts' routes give the expected labels: the
  new rule must not lose these splits.
- `one request`: a statement of context and a request, in both orders ("I'm planning a
  trip. What's the weather in Boston on Friday?"), written for this bench (not from any
  evaluation corpus). Right when the query stays one part and goes where its request goes.

    .venv/bin/python bench/sentence_splits.py [--eval-dir DIR] [--errors N] [--json-out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import results as results_file  # noqa: E402
from bench import routing_quality as rq  # noqa: E402

# Written for this bench: statements that ask nothing, and requests with their route.
CONTEXT = [
    "I'm planning a trip",
    "I'm free this weekend",
    "We have guests coming over tonight",
    "My car is almost out of gas",
    "It's my sister's birthday on Sunday",
    "This weekend we're staying in",
    "I like old films",
    "I want to go out tonight",
    "Our flight lands at six",
    "I just moved here",
]
REQUESTS = [
    ("What's the weather in Boston on Friday?", "forecast"),
    ("Will it rain tomorrow?", "forecast"),
    ("Turn on the living room lights.", "ha"),
    ("Who painted the Mona Lisa?", "kiwix"),
    ("What is the capital of Australia?", "kiwix"),
    ("What's in the news today?", "web"),
]
COMPOUND_FILES = ("slurp_devel_compound.jsonl", "mixsnips_dev.jsonl")
_JOINED = re.compile(r" and (?:then|also) ")


def two_request_rows(files: dict[str, list[rq.Row]]) -> list[rq.Row]:
    rows = []
    for name in COMPOUND_FILES:
        for row in files.get(name, []):
            pieces = _JOINED.split(row.text)
            if len(pieces) == 2 and all(pieces):
                text = ". ".join(p[0].upper() + p[1:] for p in pieces) + "."
                rows.append(rq.Row(name, text, row.expected, row.origin))
    return rows


def one_request_rows() -> list[rq.Row]:
    rows = []
    for context in CONTEXT:
        for request, route in REQUESTS:
            for text in (f"{context}. {request}", f"{request} {context}."):
                rows.append(rq.Row("one request", text, route, "written for this bench"))
    return rows


def _every_sentence_end(left: str, right: str) -> bool:
    """The rule before: any sentence end between two non-empty texts splits."""
    from routing.language.decompose import CLAUSE_TRIM

    return bool(left.strip(CLAUSE_TRIM)) and bool(right.strip(CLAUSE_TRIM))


# The separators before: a full stop ended a sentence only after three letters.
_OLD_STOP = r"(?<=[?!])\s+(?=\S)|(?<=\w{3}\.)\s+(?=[A-Za-z])"


@dataclass(frozen=True)
class Rule:
    decide: Callable[[str, str], bool]
    separators: re.Pattern[str]


def _use(rule: Rule) -> None:
    import routing.language.decompose as decompose
    import routing.pipeline as pipeline

    decompose._two_requests = rule.decide  # type: ignore[assignment]
    decompose._SEPARATORS = rule.separators
    pipeline._top_level.cache_clear()  # parses are memoised per query


def _rules() -> dict[str, Rule]:
    import routing.language.decompose as decompose

    old = re.compile(
        rf"(?P<hard>{decompose._HARD})|(?P<stop>{_OLD_STOP})|(?P<soft>{decompose._SOFT})",
        re.IGNORECASE,
    )
    return {
        "two requests only": Rule(decompose._two_requests, decompose._SEPARATORS),
        "every sentence end": Rule(_every_sentence_end, old),
    }


def correct(outcome: rq.Outcome) -> bool:
    if outcome.row.compound:
        return outcome.correct
    return len(outcome.parts) == 1 and outcome.parts[0][1] == outcome.row.expected


async def measure(sets: dict[str, list[rq.Row]]) -> dict[str, dict[str, list[rq.Outcome]]]:
    from search.service import Service

    rules = _rules()
    service = Service(rq.isolated_config(ROOT / "config.yaml"))
    await service.start(sources=False)
    results: dict[str, dict[str, list[rq.Outcome]]] = {name: {} for name in rules}
    try:
        # alternate which rule goes first; the routing caches are emptied before each run
        for order in (list(rules), list(reversed(rules))):
            for name in order:
                _use(rules[name])
                for set_name, rows in sets.items():
                    service.reset_routing_state()
                    results[name][set_name] = await rq.route_rows(service, rows)
    finally:
        _use(rules["two requests only"])
        await service.aclose()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-dir", default=None, help="default: ../shared/eval")
    parser.add_argument("--errors", type=int, default=0)
    parser.add_argument("--json-out", help="also write the figures, dated, here")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    eval_dir = Path(args.eval_dir) if args.eval_dir else rq.default_eval_dir()
    files = rq.load_rows(eval_dir) if eval_dir.is_dir() else {}
    sets = {"two requests": two_request_rows(files), "one request": one_request_rows()}
    if not sets["two requests"]:
        print(f"no compound rows in {eval_dir}: measuring the written set only", file=sys.stderr)
    results = asyncio.run(measure(sets))
    names = list(results)
    figures: dict[str, dict[str, object]] = {}
    print(f"{'set':<16}{'rows':>6}" + "".join(f"{n:>22}" for n in names) + f"{'ratio':>8}")
    for set_name, rows in sets.items():
        if not rows:
            continue
        shares = [sum(map(correct, results[n][set_name])) / len(rows) for n in names]
        ratio = shares[0] / shares[1] if shares[1] else float("inf")
        figures[set_name] = {
            "rows": len(rows),
            **{n: round(v, 4) for n, v in zip(names, shares, strict=True)},
        }
        print(
            f"{set_name:<16}{len(rows):>6}"
            + "".join(f"{s:>22.1%}" for s in shares)
            + f"{ratio:>8.2f}"
        )
        for name in names:
            wrong = [o for o in results[name][set_name] if not correct(o)]
            for o in wrong[: args.errors]:
                parts = " | ".join(f"{p} -> {label}" for p, label, _ in o.parts)
                print(f"   x [{name}] expected {o.row.expected}: {parts}")
    if args.json_out:
        command = "python bench/sentence_splits.py"
        results_file.write(args.json_out, "sentence_splits", command, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
