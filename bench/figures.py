"""The documents' figure blocks (README, docs/, bench/README), rendered from the committed
results files.

    .venv/bin/python bench/figures.py            # exit 1 and name each block that differs
    .venv/bin/python bench/figures.py --write    # rewrite the blocks from bench/results/

A figure the README quotes sits between `<!-- figures:NAME -->` and `<!-- /figures -->`,
and is rendered by `RENDER[NAME]` from `bench/results/*.json`, which the benches write
(`--json-out`) or which were copied from a dated run's printed output. Each block names
the command that printed it, the date and the commit, so a reader can re-measure it, and a
figure edited by hand, or results re-measured without rewriting the README, fail
`tests/test_readme_figures.py`. To refresh a figure: run its bench with
`--json-out bench/results/NAME.json`, then `bench/figures.py --write`.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402
from bench.common import wilson  # noqa: E402

# The README, the reference pages it links to, and the benches' own page.
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md")
BLOCK = re.compile(r"<!-- figures:([a-z_]+) -->\n(.*?)<!-- /figures -->", re.DOTALL)


def _para(text: str) -> str:
    """One paragraph, wrapped as the READMEs are (92 columns)."""
    return textwrap.fill(text, width=92, break_long_words=False, break_on_hyphens=False) + "\n"


def _pct(right: int, of: int) -> str:
    return f"{100 * right / of:.1f}%"


def _when(body: dict[str, Any]) -> str:
    """`command`, date, commit: where a figure comes from."""
    copied = "" if body["source"] == results.MEASURED else ", as printed then"
    return f"`{body['command']}`, {body['date']} at {body['commit']}{copied}"


def route_batch() -> str:
    body = results.load("route_batch")
    f = body["figures"]
    return _para(
        f"Measured ({_when(body)}): {f['queries']:,} queries in {f['batch_s']:.1f} s on the "
        f"shared 2-core machine, of which {f['load_s']:.1f} s is the start-up and model load "
        f"one query alone also takes; routing ~{f['routing_ms_per_query']:.1f} ms per query "
        f"(load average {f['load_avg_at_start']} at the start, from other work)."
    )


def cli_latency() -> str:
    body = results.load("cli_latency")
    f = body["figures"]
    return _para(
        f"Measured ({_when(body)}): {f['server_s']:.2f} s with a server running, against "
        f"{f['local_s']:.1f} s in-process (a fresh CLI process each, "
        f"{f.get('note') or 'median of ' + str(f['rounds']) + ' rounds'}; target "
        f"{f['target_s']:g} s with a server)."
    )


def llm_quality() -> str:
    body = results.load("llm_quality")
    f = body["figures"]
    n = f["rows"]

    def run(label: str, key: str) -> str:
        decided = f[f"{key}_decided"]
        failed = f.get(f"{key}_failed")
        return (
            f"| {label} | {_pct(f[f'{key}_right'], n)} ({f[f'{key}_right']}) | {decided} "
            f"({f[f'{key}_decided_right']}) | {'–' if failed is None else failed} |\n"
        )

    return (
        _para(f"Measured ({_when(body)}), {f['server']}, all {n:,} utterances of `../shared/eval`:")
        + "\n"
        "| | right | rows with a part the LLM decided (right) | rows it failed on |\n"
        "|---|---|---|---|\n"
        f"| no LLM | {_pct(f['no_llm_right'], n)} ({f['no_llm_right']}) | – | – |\n"
        + run("LLM, every answer", "every_answer")
        + run("LLM, bias check (default)", "bias_check")
        + "\n"
        + _para(
            "These are in-corpus figures (the rows were read while the rules were written). "
            "For unseen language quote the sealed estimate."
        )
    )


def llm_overhead_real() -> str:
    body = results.load("llm_overhead_real")
    f = body["figures"]
    beyond = f["stage_p50_ms"] - f["bare_post_ms"]
    verdict = (
        "the stage's own work is lost in the HTTP floor; the model is everything else"
        if beyond < 1.0
        else f"the stage's own work adds {beyond:.2f} ms to the HTTP floor"
    )
    return _para(
        f"Measured ({_when(body)}): the stage adds {f['stage_p50_ms']:.2f} ms p50 (p99 "
        f"{f['stage_p99_ms']:.2f} ms) to the server's own {f['server_ms']} ms, against "
        f"{f['bare_post_ms']:.2f} ms for a bare httpx POST of the same body ({f['calls']} "
        f"calls each, interleaved): {verdict}."
    )


def _pct_ci(right: int, of: int) -> str:
    """A share with its 95% Wilson interval."""
    low, high = wilson(right, of)
    return f"{_pct(right, of)} ({100 * low:.1f}–{100 * high:.1f})"


def sealed() -> str:
    body = results.load("sealed_quality")
    f = body["figures"]
    corpora = ", ".join(
        f"{name} {_pct_ci(*pair)} of {pair[1]:,}" for name, pair in f["corpora"].items()
    )
    routes = ", ".join(f"`{route}` {_pct_ci(*pair)}" for route, pair in f["per_route"].items())
    stages = ", ".join(
        f"`{stage}` {s['parts']:,} parts stated {s['stated']:.2f}, right {s['right']:.2f}"
        for stage, s in f["stages"].items()
        if s["parts"] >= 20
    )
    text = (
        f'The sealed estimate ({_when(body)}; bench/README.md, "Sealed estimate"), '
        f"through the real pipeline with no LLM (each share with its 95% interval), a part "
        f"that ended at the default counted as `none` (no stage decided it): "
        f"{corpora}; per route {routes}; unserved requests routed to a source "
        f"{_pct_ci(*f['none_routed'])}; two requests joined {_pct_ci(*f['compound'])} of "
        f"{f['compound'][1]:,}; calibration error (ECE) of the stated confidence "
        f"{f['pipeline_ece']:.3f}. Per stage: {stages}."
    )
    answered = f.get("answered")
    if answered:
        corpora = ", ".join(
            f"{name} {_pct_ci(*pair)}" for name, pair in answered["corpora"].items()
        )
        routes = ", ".join(
            f"`{route}` {_pct_ci(*pair)}" for route, pair in answered["per_route"].items()
        )
        text += (
            f" Counted instead by the source that answers each part (a part that ended at "
            f"the default is answered by the default source, here `kiwix`; only an unserved "
            f"part is `none`), the same run: {corpora}; per route {routes}; unserved "
            f"requests answered by a source {_pct_ci(*answered['none_routed'])}; two "
            f"requests joined {_pct_ci(*answered['compound'])}."
        )
    return _para(text)


def label_fit() -> str:
    body = results.load("label_fit")
    f = body["figures"]
    lines = [
        _para(
            f"Measured ({_when(body)}), {f['eval_rows']:,} eval utterances and "
            f"{f['quiz_rows']} quiz questions:"
        ),
        "| labels | `min_confidence` | eval sets | ECE (decided parts) | quiz questions "
        "| labels holding |",
        "|---|---|---|---|---|---|",
    ]
    for row in f["rows"]:
        holding = "–" if row["holding"] is None else "{}/{}".format(*row["holding"])
        lines.append(
            f"| {row['labels']} | {row['min_confidence']} | {row['eval']:.3f} | "
            f"{row['ece']:.3f} | {row['quiz']:.3f} | {holding} |"
        )
    return "\n".join(lines) + "\n"


def ha_parse() -> str:
    body = results.load("ha_parse")
    f = body["figures"]
    return _para(
        f"Measured ({_when(body)}; `ROUTING_EVAL_DIR=/path/to/eval`, it starts a real Home "
        f"Assistant {f['ha_version']} from the cached venv): of {f['commands']} on/off "
        f"commands, the router's parser reads {f['local_right']} right, Home Assistant's "
        f"matching {f['ha_right']}, either of them {f['either_right']}; of the {f['others']} "
        f"other sentences, the router's parser takes {f['local_false']} for an on/off "
        f"command, Home Assistant's {f['ha_false']}."
    )


def sentence_splits() -> str:
    body = results.load("sentence_splits")
    f = body["figures"]
    label = {
        "two requests": 'compound rows rejoined as two sentences ("Light up. Tell me the weather.")',
        "one request": "a statement of context and a request, written for the bench",
    }
    lines = [
        _para(f"Measured ({_when(body)}), no LLM, the shipped `config.yaml`:"),
        "| set | rows | two requests only (the rule) | every sentence end (the rule before) "
        "| ratio |",
        "|---|---|---|---|---|",
    ]
    for name, row in f.items():
        now, before = row["two requests only"], row["every sentence end"]
        ratio = f"{now / before:.2f}" if before else "–"
        lines.append(
            f"| {label.get(name, name)} | {row['rows']} | {now:.1%} | {before:.1%} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def ece_noise() -> str:
    body = results.load("ece_noise")
    f = body["figures"]
    return _para(
        f"A perfectly calibrated model scores an ECE of {f['ece_mean']:.3f} on average on "
        f"{f['rows']} rows, and above {f['ece_p95']:.3f} in only 5% of draws (simulated: "
        f"{_when(body)}, stated confidence {f['mean_confidence']} ± {f['sd_confidence']})."
    )


def decomposition() -> str:
    body = results.load("decomposition")
    f = body["figures"]
    lines = [
        _para(
            f"Measured ({_when(body)}), the splitter alone on routing/fit_data: "
            f"{f['compounds']:,} compounds, boundaries right {100 * f['boundary_right']:.1f}%, "
            f"parts right {100 * f['parts_right']:.1f}%, under-split "
            f"{100 * f['under_split']:.1f}%; {f['singles']:,} singles over-split "
            f'{100 * f["over_split"]:.1f}% ({f["and_singles"]} with "and": '
            f"{100 * f['and_over_split']:.1f}%). Each rule switched off (points; saved: wrong "
            "cases the rule saves):"
        ),
        '\n| rule | Δ boundaries | Δ over-split | Δ over-split, "and" | saved |\n',
        "|---|---|---|---|---|\n",
    ]
    for row in f.get("ablation", []):
        lines.append(
            f"| {row['rule']} | {row['boundary_delta_pp']:+.2f} | "
            f"{row['over_split_delta_pp']:+.2f} | {row['and_over_split_delta_pp']:+.2f} | "
            f"{row['cases_saved']} |\n"
        )
    return "".join(lines)


def cheap_path() -> str:
    """The table `bench/run_all.py` printed for the cheap-path benches, row for row."""
    from bench.run_all import main_rows

    body = results.load("cheap_path")
    f = body["figures"]
    head = _para(
        f"Measured ({_when(body)}), on {f['machine']} (load average at the end: {f['end_load']}):"
    )
    table = [
        "| measure | compared with | measured | target | verdict |",
        "|---|---|---|---|---|",
        *("| " + " | ".join(row) + " |" for row in main_rows(f["results"])),
    ]
    return head + "\n" + "\n".join(table) + "\n"


RENDER: dict[str, Callable[[], str]] = {
    "cheap_path": cheap_path,
    "route_batch": route_batch,
    "cli_latency": cli_latency,
    "llm_quality": llm_quality,
    "llm_overhead_real": llm_overhead_real,
    "sealed": sealed,
    "ece_noise": ece_noise,
    "label_fit": label_fit,
    "ha_parse": ha_parse,
    "sentence_splits": sentence_splits,
    "decomposition": decomposition,
}


def blocks(text: str) -> list[tuple[str, str]]:
    """Every figure block of a document: (name, its content)."""
    return BLOCK.findall(text)


def rendered(text: str) -> str:
    """`text` with every block's content rendered afresh; KeyError for an unknown block."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDER:
            raise KeyError(f"no renderer for figure block {name!r} (bench/figures.py RENDER)")
        return f"<!-- figures:{name} -->\n{RENDER[name]()}<!-- /figures -->"

    return BLOCK.sub(fill, text)


def stale(text: str) -> list[str]:
    """The names of the blocks whose content differs from their rendering."""
    fresh = dict(blocks(rendered(text)))
    return [name for name, content in blocks(text) if fresh[name] != content]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the blocks in place")
    args = parser.parse_args(argv)
    differs = False
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        names = stale(text)
        if args.write and names:
            doc.write_text(rendered(text), encoding="utf-8")
            print(f"{doc.relative_to(ROOT)}: rewrote {', '.join(names)}")
        elif names:
            differs = True
            print(f"{doc.relative_to(ROOT)}: differs from bench/results: {', '.join(names)}")
    return 1 if differs else 0


if __name__ == "__main__":
    raise SystemExit(main())
