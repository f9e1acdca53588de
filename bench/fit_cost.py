"""What `search fit --shipped` costs: its time on this machine and the artefact it writes.

Runs the shipped fit in-process (model load and fit-corpus encoding included; the
encodings are cached on disk by model and text, so `--cold` clears that cache first to
time a first fit) and prints the seconds, the rows, and the artefact's size beside the
route data it reads at start-up. It first times the fit of the `none` route's classifier
prior from the committed Banking77 requests (routing/fitting/prior_fit.py), as `search fit
--shipped` always does. With `--situatedqa DIR` it also times the fit of the encyclopedia
route's prior, fits the weights with both as `search fit` does, and then times the fit of
the time-sensitivity model (routing/fitting/time_fit.py), sizing each artefact; without
it the shipped ones are sized. Nothing is written to routing/fitted/.

    .venv/bin/python bench/fit_cost.py [--config config.yaml] [--cold]
        [--situatedqa DIR] [--json-out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--cold", action="store_true", help="without the embedding cache")
    parser.add_argument("--situatedqa", default="", help="also time the time-sensitivity fit")
    parser.add_argument("--json-out", default="")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.cold:
        os.environ["SEARCH_EMBEDDING_CACHE"] = tempfile.mkdtemp(prefix="fit-cost-")
    from routing.fitting import fit
    from routing.stages.route_data import shipped_routes
    from search.config import load_config

    config = load_config(args.config)
    rows = fit.shipped_rows()
    from routing.fitting import prior_fit
    from routing.stages.classifier_prior import ARTEFACT as PRIOR_ARTEFACT
    from routing.stages.classifier_prior import load_priors
    from routing.stages.embedder import load_embedder

    embedder = load_embedder(config.routing.semantic.model_path)
    started = time.perf_counter()
    unserved = prior_fit.fit_unserved(embedder)
    unserved_seconds = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as scratch:
        written = Path(scratch) / "classifier_prior_none.npz"
        unserved.save(written)
        unserved_bytes = written.stat().st_size
    priors: list[Any] = [p for p in load_priors() if p.label == prior_fit.LABEL]
    prior_seconds = None
    if args.situatedqa:
        from routing.fitting import time_fit

        started = time.perf_counter()
        questions = time_fit.read_situatedqa(Path(args.situatedqa))
        prior = prior_fit.fit_with(embedder, questions)
        priors = [prior]
        prior_seconds = time.perf_counter() - started
        with tempfile.TemporaryDirectory() as scratch:
            written = Path(scratch) / "classifier_prior.npz"
            prior.save(written)
            prior_bytes = written.stat().st_size
    else:
        prior_bytes = PRIOR_ARTEFACT.stat().st_size
    started = time.perf_counter()
    model, _ = asyncio.run(fit.fit(config, rows=rows, priors=[*priors, unserved]))
    seconds = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as scratch:
        written = Path(scratch) / "confidence.json"
        fit.write(model, written)  # the artefact exactly as `search fit` writes it
        artefact = written.stat().st_size
    from routing.fitting import time_fit
    from routing.stages.time_sensitivity import ARTEFACT as TIME_ARTEFACT

    time_seconds = None
    if args.situatedqa:
        started = time.perf_counter()
        questions = time_fit.training_questions(Path(args.situatedqa))
        vectors = load_embedder(config.routing.semantic.model_path).encode_exemplars(
            [q.text for q in questions]
        )
        time_model = time_fit.fit_time_model(questions, vectors)
        time_seconds = time.perf_counter() - started
        with tempfile.TemporaryDirectory() as scratch:
            written = Path(scratch) / "time_sensitive.npz"
            time_model.save(written)
            time_artefact = written.stat().st_size
    else:
        time_artefact = TIME_ARTEFACT.stat().st_size
    exemplars = sum(len(route.exemplars) for route in shipped_routes().values())
    routes_bytes = sum(p.stat().st_size for p in (ROOT / "routing" / "routes").glob("*.yaml"))
    print(
        f"search fit --shipped: {seconds:.1f} s for {len(rows)} rows"
        f"{' (cold: no embedding cache)' if args.cold else ''}, {os.cpu_count()} cores; "
        f"artefact {artefact:,} bytes; route data {routes_bytes:,} bytes "
        f"({exemplars:,} exemplars)"
    )
    print(
        "classifier prior: "
        + (f"{prior_seconds:.1f} s to fit, " if prior_seconds is not None else "")
        + f"artefact {prior_bytes:,} bytes"
    )
    print(
        f"`none` classifier prior: {unserved_seconds:.1f} s to fit, "
        f"artefact {unserved_bytes:,} bytes"
    )
    print(
        "time-sensitivity model: "
        + (f"{time_seconds:.1f} s to fit, " if time_seconds is not None else "")
        + f"artefact {time_artefact:,} bytes"
    )
    if args.json_out:
        from bench import results

        results.write(
            args.json_out,
            "fit_cost",
            "python bench/fit_cost.py --cold --situatedqa DIR --json-out bench/results/fit_cost.json"
            if args.cold and args.situatedqa
            else "python bench/fit_cost.py --json-out bench/results/fit_cost.json",
            {
                "seconds": round(seconds, 1),
                "rows": len(rows),
                "cold": args.cold,
                "cores": os.cpu_count(),
                "artefact_bytes": artefact,
                "route_data_bytes": routes_bytes,
                "exemplars": exemplars,
                "time_model_seconds": None if time_seconds is None else round(time_seconds, 1),
                "time_model_bytes": time_artefact,
                "prior_seconds": None if prior_seconds is None else round(prior_seconds, 1),
                "prior_bytes": prior_bytes,
                "unserved_prior_seconds": round(unserved_seconds, 1),
                "unserved_prior_bytes": unserved_bytes,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
