"""`search fit [--config PATH] [--dry-run] [--output PATH]`: fit routing's confidence.

Fits on the labelled utterances in routing/fit_data (see routing/fitting/fit.py) and the household's
labels in the trace store (weighted above them, search/correction/label_fit.py), prints what it
measured leaving each corpus out and what the labels change (accuracy on the labelled set
before and after, the stored decisions that change), and writes the artefacts routing reads
from then on, both in the data directory beside the trace store, so a package upgrade never
overwrites them: the fitted weights, `routing-confidence.json` (`--output` elsewhere), and
the household's labels, `routing-labels.json`. `--shipped` writes the weights to the
package's own routing/fitted/confidence.json instead (how the project refreshes what it
ships). `--dry-run` prints without writing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from search.config import load_config


def add_fit_command(commands: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    fit = commands.add_parser("fit", help="fit routing's confidence from labelled utterances")
    fit.add_argument("--config")
    fit.add_argument("--dry-run", action="store_true", help="report only; write nothing")
    fit.add_argument("--output", help="where to write the weights (default: the data directory)")
    fit.add_argument(
        "--shipped",
        action="store_true",
        help="write the weights the package ships (routing/fitted/confidence.json)",
    )
    fit.add_argument("--json", action="store_true", help="print the report as JSON")
    return {"fit": cmd_fit}


def _household(config: Any) -> Any:
    """The trace store with the household's labels, when there is one."""
    from search.traces.store import SQLiteTraceStore

    store = SQLiteTraceStore(config.trace.model_copy(update={"enabled": True}))
    return store if store.path.exists() else None


def cmd_fit(args: argparse.Namespace) -> int:
    from routing.fitting import fit
    from search.correction.label_fit import (
        TrainingRow,
        artefact_path,
        confidence_path,
        labels_report,
        write_artefact,
    )

    # Not the labels fitted last time: this fit starts from the shipped data and the store.
    config = load_config(args.config, fitted_labels=False)
    store = _household(config)
    try:
        rows: list[TrainingRow] = []
        label_lines = ["no trace store: no labels to fit"]
        if store is not None:
            rows, _, label_lines = asyncio.run(labels_report(config, store))
    finally:
        if store is not None:
            store.close_sync()
    extra = [fit.Labelled(r.text, r.route, corpus=fit.HOUSEHOLD, weight=r.weight) for r in rows]
    model, report = asyncio.run(fit.fit(config, extra=extra))
    if args.json:
        print(json.dumps({**report, "labels": label_lines}, indent=2))
    else:
        print(fit.render(model, report))
        print()
        print("\n".join(label_lines))
    if not args.dry_run:
        path = (
            Path(args.output)
            if args.output
            else fit.ARTEFACT
            if args.shipped
            else confidence_path(config)
        )
        fit.write(model, path)
        print(f"wrote {path}")
        labels_path = artefact_path(config)
        if rows or labels_path.exists():  # no labels, never fitted: leave the directory be
            write_artefact(labels_path, rows)
            print(f"wrote {labels_path} ({len(rows)} label(s))")
    return 0
