"""`search fit [--config PATH] [--dry-run] [--output PATH]`: fit routing's confidence.

Fits on the labelled utterances in routing/fit_data (see routing/fit.py), prints what it
measured leaving each corpus out, and writes the artefact routing reads from then on
(routing/fitted/confidence.json unless `--output`). `--dry-run` prints without writing.
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
    fit.add_argument("--output", help="where to write (default: the shipped artefact)")
    fit.add_argument("--json", action="store_true", help="print the report as JSON")
    return {"fit": cmd_fit}


def cmd_fit(args: argparse.Namespace) -> int:
    from routing import fit

    config = load_config(args.config)
    model, report = asyncio.run(fit.fit(config))
    print(json.dumps(report, indent=2) if args.json else fit.render(model, report))
    if not args.dry_run:
        path = Path(args.output) if args.output else fit.ARTEFACT
        fit.write(model, path)
        print(f"wrote {path}")
    return 0
