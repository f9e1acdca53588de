"""`search fit`, run as a user runs it: the real model over the repository's fit data."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from routing.stages.classifier_prior import ARTEFACT as prior_artefact
from routing.stages.classifier_prior import UNSERVED_ARTEFACT, ClassifierPrior
from routing.stages.confidence import ConfidenceModel, load_model
from routing.stages.time_sensitivity import TimeSensitivityModel
from search.config import load_config

ROOT = Path(__file__).resolve().parents[3]


def run(
    *args: str, cwd: Path = ROOT, data_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if data_dir is not None:
        env["SEARCH_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-m", "search", "fit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
        check=False,
    )


def _close(a: object, b: object, path: str = "") -> None:
    """The same JSON value, floats to 1e-3 (a refit on another machine's BLAS)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), path
        for key in a:
            _close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert np.isclose(float(a), float(b), atol=1e-3), (path, a, b)  # type: ignore[arg-type]
    else:
        assert a == b, (path, a, b)


def test_fit_shipped_is_hermetic_and_reproduces_the_whole_shipped_artefact(
    tmp_path: Path,
) -> None:
    """Run elsewhere than the checkout, with a household's data directory full of labels
    and a fit of its own: `--shipped` reads none of it, writes only its --output, and gives
    the artefact the package ships, threshold and report included; the `none` route's
    prior it refits from committed rows is the shipped one, so it is left untouched."""
    unserved_prior = UNSERVED_ARTEFACT.stat().st_mtime_ns
    household = tmp_path / "household"
    household.mkdir()
    (household / "routing-household.json").write_text("not even json")  # never read
    out = tmp_path / "confidence.json"
    done = run(
        "--shipped",
        "--config",
        str(ROOT / "config.yaml"),
        "--output",
        str(out),
        cwd=tmp_path,
        data_dir=household,
    )
    assert done.returncode == 0, done.stderr
    for heading in (
        "accuracy per route:",
        "calibration error (ECE):",
        "confusion (rows",
        "min_confidence",
    ):
        assert heading in done.stdout, done.stdout
    assert sorted(p.name for p in household.iterdir()) == ["routing-household.json"]
    assert f"{UNSERVED_ARTEFACT}: unchanged" in done.stdout
    assert UNSERVED_ARTEFACT.stat().st_mtime_ns == unserved_prior
    fitted = json.loads(out.read_text())
    shipped = json.loads((ROOT / "routing" / "fitted" / "confidence.json").read_text())
    _close(fitted, shipped)
    model = ConfidenceModel.from_json(fitted)
    assert model.min_confidence == load_model().min_confidence
    assert model.report["ece_held_out"] <= 0.05
    # the time-sensitivity model is kept as shipped: its training questions are not
    assert "time-sensitivity model: kept as shipped" in done.stdout


def _situatedqa(root: Path) -> Path:
    """A stand-in for a SituatedQA checkout: its layout, a few questions of each kind."""
    rows = [
        ("who is the current prime minister of the country", "yes"),
        ("who won the most recent league title", "yes"),
        ("what is the latest version of the phone", "yes"),
        ("who holds the record for the fastest mile today", "yes"),
        ("who wrote the first novel of the series", "no"),
        ("when was the bridge built", "no"),
        ("what is the boiling point of water", "no"),
        ("where was the composer born", "no"),
    ]
    path = root / "data" / "id_data" / "temp.train.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(
        "".join(
            json.dumps({"question": q, "is_dependent": d, "source_dataset": "nq_table.open"}) + "\n"
            for q, d in rows * 3
        )
    )
    return root


def test_fit_shipped_refits_the_time_model_and_prior_from_a_local_situatedqa(
    tmp_path: Path,
) -> None:
    out, time_out = tmp_path / "confidence.json", tmp_path / "time.json"
    prior_out = tmp_path / "prior.npz"
    shipped_prior = prior_artefact.stat().st_mtime_ns
    done = run(
        "--shipped",
        "--config",
        str(ROOT / "config.yaml"),
        "--output",
        str(out),
        "--situatedqa",
        str(_situatedqa(tmp_path / "situatedqa")),
        "--time-output",
        str(time_out),
        "--prior-output",
        str(prior_out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    # The prior: the 12 stable questions (three copies of four), one centroid of them all,
    # written where asked and nowhere else.
    assert "classifier prior: 1 centroids of 12 situatedqa rows for `kiwix`" in done.stdout
    prior = ClassifierPrior.load(prior_out)
    assert prior.label == "kiwix" and prior.counts.tolist() == [12]
    assert prior_artefact.stat().st_mtime_ns == shipped_prior
    assert "time-sensitivity model: " in done.stdout and f"wrote {time_out}" in done.stdout
    fitted = TimeSensitivityModel.load(time_out)
    assert fitted.dimension == 384
    assert fitted.report["rows"]["situatedqa"] == 24  # with the shipped fit rows beside it
    assert fitted.report["rows"]["opentriviaqa"] > 0


def test_situatedqa_goes_with_shipped_and_must_be_there(tmp_path: Path) -> None:
    done = run("--config", str(ROOT / "config.yaml"), "--situatedqa", str(tmp_path))
    assert done.returncode == 2 and "--situatedqa goes with --shipped" in done.stderr
    done = run("--config", str(ROOT / "config.yaml"), "--time-output", str(tmp_path / "t"))
    assert done.returncode == 2 and "--time-output goes with --situatedqa" in done.stderr
    done = run("--config", str(ROOT / "config.yaml"), "--prior-output", str(tmp_path / "p"))
    assert done.returncode == 2 and "--prior-output goes with --situatedqa" in done.stderr
    out = tmp_path / "confidence.json"
    done = run("--shipped", "--output", str(out), "--situatedqa", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "--situatedqa: data/id_data/temp.train.jsonl" in done.stderr
    assert not out.exists()  # refused before anything was fitted or written


def test_output_goes_with_shipped_only(tmp_path: Path) -> None:
    done = run("--config", str(ROOT / "config.yaml"), "--output", str(tmp_path / "x.json"))
    assert done.returncode == 2
    assert "--output goes with --shipped" in done.stderr
    assert not (tmp_path / "x.json").exists()
    done = run(
        "--config", str(ROOT / "config.yaml"), "--unserved-prior-output", str(tmp_path / "p")
    )
    assert done.returncode == 2 and "--unserved-prior-output goes with --shipped" in done.stderr


def test_the_unserved_prior_goes_where_asked_and_a_broken_one_is_replaced(
    tmp_path: Path,
) -> None:
    """`--unserved-prior-output` names where the `none` route's prior goes; a file there
    that is not a prior is replaced by the refit, which is the shipped one."""
    target = tmp_path / "none.npz"
    target.write_text("not a prior")
    args = ["--shipped", "--config", str(ROOT / "config.yaml"), "--output"]
    done = run(*args, str(tmp_path / "c.json"), "--unserved-prior-output", str(target))
    assert done.returncode == 0, done.stderr
    assert f"wrote {target}" in done.stdout
    assert ClassifierPrior.load(target).same_as(ClassifierPrior.load(UNSERVED_ARTEFACT))


def test_a_dry_run_with_a_bad_config_exits_2_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("routing: {min_confidence: 2}\n")
    done = run("--config", str(bad), "--dry-run")
    assert done.returncode == 2
    assert "routing.min_confidence" in done.stderr


def test_missing_rows_for_the_unserved_prior_are_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A package without its staged rows (or with unreadable ones) refuses by name and
    writes no prior."""
    from routing.fitting import prior_fit
    from search.correction import fit_cli

    def missing(embedder: object) -> None:
        raise FileNotFoundError("routing/fit_data/staged/banking77.jsonl")

    monkeypatch.setattr(prior_fit, "fit_unserved", missing)
    monkeypatch.setattr("routing.stages.embedder.load_embedder", lambda *a, **k: object())
    target = tmp_path / "none.npz"
    args = argparse.Namespace(unserved_prior_output=str(target), dry_run=False)
    config = load_config(ROOT / "config.yaml")
    with pytest.raises(fit_cli.NoFitData, match="`none` route's prior: .*banking77.jsonl"):
        fit_cli._fit_unserved_prior(config, args)
    assert not target.exists()
