"""`search fit [--config PATH] [--dry-run] [--json]`: fit the household's routing.

Reads the labels stored beside the trace store, chooses the confidence weights (the
shipped ones for the shipped routes; otherwise fitted on the shipped corpora for the
household's routes: search/correction/label_fit.py), reports what the new artefact does by
running it (the labelled queries, and the stored traces replayed as `search replay --all`
would), and writes `routing-household.json` into the data directory (the trace store's
directory), where every command, and a running server within a second or two, routes
with it. `--dry-run` reports and writes nothing.

`search fit --shipped [--output PATH]` is how the project refreshes what it ships: the
weights fitted on the shipped corpora alone, hermetic (no household data is read, nothing
is written to the data directory), to routing/fitted/confidence.json (or PATH). It first
refits the `none` route's classifier prior from the committed requests nobody here serves,
routing/fitted/classifier_prior_none.npz (or `--unserved-prior-output`; a file that
already holds what the fit gives is left as it is). With
`--situatedqa DIR` (a local copy of SituatedQA, whose rows are not shipped) it first fits
the exemplar classifier's prior, routing/fitted/classifier_prior.npz (or `--prior-output`),
then the weights with that prior in place, then the time-sensitivity model,
routing/fitted/time_sensitive.npz (or `--time-output`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from search.config import ConfigError, load_config
from search.terminal import say

EXIT_OK, EXIT_USAGE = 0, 2


def add_fit_command(commands: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    fit = commands.add_parser("fit", help="fit routing from the shipped data and your labels")
    fit.add_argument("--config")
    fit.add_argument("--dry-run", action="store_true", help="report only; write nothing")
    fit.add_argument(
        "--shipped",
        action="store_true",
        help="fit the weights the package ships (routing/fitted/confidence.json), hermetic",
    )
    fit.add_argument("--output", help="with --shipped: where to write the weights")
    fit.add_argument(
        "--situatedqa",
        metavar="DIR",
        help="with --shipped: also fit the classifier prior and the time-sensitivity model "
        "from a local copy of SituatedQA (a checkout or git directory; its rows are not "
        "shipped)",
    )
    fit.add_argument(
        "--prior-output", help="with --situatedqa: where to write the classifier prior"
    )
    fit.add_argument(
        "--time-output", help="with --situatedqa: where to write the time-sensitivity model"
    )
    fit.add_argument(
        "--unserved-prior-output",
        help="with --shipped: where to write the `none` route's classifier prior",
    )
    fit.add_argument("--json", action="store_true", help="print the report as JSON")
    return {"fit": _guarded(cmd_fit)}


def _guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (ConfigError, NoFitData) as exc:
            say(f"search: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run


class NoFitData(Exception):
    """Nothing to fit on: the package's fit data is missing."""


def progress(message: str) -> None:
    """A progress line, on a terminal only (a redirected stderr stays clean)."""
    if sys.stderr.isatty():
        print(f"search fit: {message}", file=sys.stderr, flush=True)


def cmd_fit(args: argparse.Namespace) -> int:
    for flag, given in (
        ("--output", args.output),
        ("--situatedqa", args.situatedqa),
        ("--unserved-prior-output", args.unserved_prior_output),
    ):
        if given and not args.shipped:
            raise ConfigError(
                f"{flag} goes with --shipped (a household fit writes its data directory)"
            )
    for flag, given in (("--time-output", args.time_output), ("--prior-output", args.prior_output)):
        if given and not args.situatedqa:
            raise ConfigError(f"{flag} goes with --situatedqa")
    config = load_config(args.config)
    return _fit_shipped(config, args) if args.shipped else _fit_household(config, args)


def _fit_shipped(config: Any, args: argparse.Namespace) -> int:
    from routing.fitting import fit, prior_fit
    from routing.stages.classifier_prior import load_priors

    rows = fit.shipped_rows()
    if not rows:
        raise NoFitData(f"no fit data in {fit.FIT_DATA}: nothing was written")
    questions = _time_questions(args.situatedqa) if args.situatedqa else None
    unserved = _fit_unserved_prior(config, args)  # first: its rows are package data
    if questions is not None:
        encyclopedia = [_fit_prior(config, args, questions)]
    else:  # the shipped one (its questions are not in the repository)
        encyclopedia = [p for p in load_priors() if p.label == prior_fit.LABEL]
    priors = [*encyclopedia, unserved]
    progress(f"fitting on {len(rows)} utterances of the shipped corpora")
    model, report = asyncio.run(fit.fit(config, rows=rows, priors=priors))
    if args.json:
        say(json.dumps(report, indent=2), json_text=True)
    else:
        say(fit.render(model, report))
    if not args.dry_run:
        path = Path(args.output) if args.output else fit.ARTEFACT
        fit.write(model, path)
        say(f"wrote {path}")
    if questions is not None:
        _fit_time_model(config, args, questions)
    else:
        say("time-sensitivity model: kept as shipped (--situatedqa DIR refits it)")
    return EXIT_OK


def _time_questions(situatedqa: str) -> list[Any]:
    """SituatedQA's train split and the shipped fit rows, read before anything is fitted
    (a wrong directory fails before a file is written)."""
    from routing.fitting import time_fit

    try:
        return time_fit.training_questions(Path(situatedqa))
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"--situatedqa: {exc}") from exc


def _fit_prior(config: Any, args: argparse.Namespace, questions: list[Any]) -> Any:
    """The exemplar classifier's prior from SituatedQA's stable train questions."""
    from routing.fitting import prior_fit
    from routing.stages.classifier_prior import ARTEFACT
    from routing.stages.embedder import load_embedder

    progress("fitting the classifier prior")
    embedder = load_embedder(config.routing.semantic.model_path)
    try:
        prior = prior_fit.fit_with(embedder, questions)
    except ValueError as exc:
        raise ConfigError(f"--situatedqa: {exc}") from exc
    say(prior_fit.render(prior))
    if not args.dry_run:
        path = Path(args.prior_output) if args.prior_output else ARTEFACT
        prior.save(path)
        say(f"wrote {path}")
    return prior


def _fit_unserved_prior(config: Any, args: argparse.Namespace) -> Any:
    """The `none` route's classifier prior from the committed requests nobody serves."""
    from routing.fitting import prior_fit
    from routing.stages.classifier_prior import UNSERVED_ARTEFACT
    from routing.stages.embedder import load_embedder

    progress("fitting the `none` route's classifier prior")
    embedder = load_embedder(config.routing.semantic.model_path)
    try:
        prior = prior_fit.fit_unserved(embedder)
    except (OSError, ValueError, KeyError) as exc:  # missing, unreadable or too few rows
        raise NoFitData(f"the `none` route's prior: {exc}: nothing was written") from exc
    say(prior_fit.render(prior))
    path = Path(args.unserved_prior_output or UNSERVED_ARTEFACT)
    if path.is_file() and _holds(path, prior):
        say(f"{path}: unchanged")  # the shipped rows reproduce it: a fit writes only --output
    elif not args.dry_run:
        prior.save(path)
        say(f"wrote {path}")
    return prior


def _holds(path: Path, prior: Any) -> bool:
    """Whether the prior at `path` is `prior` (False for an unreadable file)."""
    from routing.stages.classifier_prior import ClassifierPrior

    try:
        return bool(ClassifierPrior.load(path).same_as(prior))
    except ValueError:
        return False


def _fit_time_model(config: Any, args: argparse.Namespace, questions: list[Any]) -> None:
    """The time-sensitivity model from SituatedQA's train split and the shipped fit rows."""
    from routing.fitting import time_fit
    from routing.stages.embedder import load_embedder
    from routing.stages.time_sensitivity import ARTEFACT

    progress(f"fitting the time-sensitivity model on {len(questions)} questions")
    embedder = load_embedder(config.routing.semantic.model_path)
    vectors = embedder.encode_exemplars([q.text for q in questions])
    model = time_fit.fit_time_model(questions, vectors)
    say(time_fit.render(model))
    if not args.dry_run:
        path = Path(args.time_output) if args.time_output else ARTEFACT
        model.save(path)
        say(f"wrote {path}")


def _household_store(config: Any) -> Any:
    from search.traces.store import SQLiteTraceStore

    store = SQLiteTraceStore(config.trace.model_copy(update={"enabled": True}))
    return store if store.path.exists() else None


def _fit_household(config: Any, args: argparse.Namespace) -> int:
    from routing.fitting import fit
    from search.correction import household
    from search.correction.label_fit import applied_labels, household_weights, labels_report

    store = _household_store(config)
    try:
        labels = store.labels() if store is not None else []
        where = store.path if store is not None else household.data_dir(config)
        # with --json, stdout is the JSON document alone; the status lines go to stderr
        status = sys.stderr if args.json else None
        say(
            f"labels: {len(labels)} stored in {where}"
            if labels
            else f"labels: none stored in {where} (nothing to correct; the weights are still checked)",
            file=status,
        )
        if not fit.shipped_rows():
            raise NoFitData(f"no fit data in {fit.FIT_DATA}: nothing was written")
        try:
            current = household.load(config)
        except ConfigError as exc:  # a damaged artefact is what this fit replaces
            say(f"search fit: {exc}; fitting anew", file=sys.stderr)
            current = None
        progress("choosing the confidence weights")
        weights, weight_report = asyncio.run(household_weights(config))
        applied, _ = applied_labels(labels, config)
        data = household.encode(applied, weights, {"weights": weight_report} if weights else None)
        new = household.decode(data)
        report = asyncio.run(labels_report(config, store, labels, current, new, progress))
    finally:
        if store is not None:
            store.close_sync()
    if args.json:
        body = {"artefact": new.name, "weights": weight_report or "shipped", **report.to_json()}
        say(json.dumps(body, indent=2, ensure_ascii=False), json_text=True)
    else:
        if weights is None:
            say("weights: the shipped ones (your routes are the shipped routes)")
        else:
            say("weights: fitted for your routes on the shipped corpora")
            say(fit.render(weights, weight_report))
        say("\n".join(report.lines()))
    if not args.dry_run:
        path = household.artefact_path(config)
        household.write(path, data)
        say(
            f"wrote {path} ({new.name}, {len(applied)} label(s)); a running server picks it up",
            file=sys.stderr if args.json else None,
        )
    return EXIT_OK
