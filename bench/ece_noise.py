"""How large an ECE a perfectly calibrated model scores on a small set, by simulation.

    .venv/bin/python bench/ece_noise.py [--rows 400] [--mean 0.87] [--sd 0.12] [--draws 20000] [--json-out PATH]

A held-out ECE on a few hundred rows is not zero even when the model is calibrated: each
bin's accuracy is a sample. This draws `--rows` stated confidences from a Beta with the
given mean and spread, draws each row's outcome as right with exactly that probability
(calibrated by construction), and scores the ECE as `bench/routing_quality.py` does (10
equal-width bins). It prints the mean ECE over the draws and the 95th percentile: an
observed ECE below that percentile is within noise of calibrated. Fixed seed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402

BINS = 10


def ece(confidence: np.ndarray, right: np.ndarray) -> float:
    """Expected calibration error over 10 equal-width bins (a confidence of 1 in the last)."""
    index = np.minimum((confidence * BINS).astype(int), BINS - 1)
    total = 0.0
    for b in range(BINS):
        mask = index == b
        if mask.any():
            total += mask.sum() * abs(confidence[mask].mean() - right[mask].mean())
    return total / len(confidence)


def simulate(rows: int, mean: float, sd: float, draws: int, seed: int = 0) -> np.ndarray:
    """ECEs of `draws` calibrated samples of `rows` rows."""
    if not (0 < mean < 1 and 0 < sd**2 < mean * (1 - mean)):
        raise SystemExit("--mean must be in (0, 1) and --sd below sqrt(mean * (1 - mean))")
    concentration = mean * (1 - mean) / sd**2 - 1
    alpha, beta = mean * concentration, (1 - mean) * concentration
    rng = np.random.default_rng(seed)
    scores = np.empty(draws)
    for i in range(draws):
        confidence = rng.beta(alpha, beta, rows)
        right = (rng.random(rows) < confidence).astype(float)
        scores[i] = ece(confidence, right)
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--mean", type=float, default=0.87, help="mean stated confidence")
    parser.add_argument("--sd", type=float, default=0.12, help="its standard deviation")
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--json-out", help="also write the figures, dated, here")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.draws < 1:
        parser.error("--rows and --draws must be at least 1")
    scores = simulate(args.rows, args.mean, args.sd, args.draws)
    mean_ece, p95 = float(scores.mean()), float(np.percentile(scores, 95))
    print(
        f"calibrated model, {args.rows} rows, stated confidence {args.mean} ± {args.sd}: "
        f"ECE mean {mean_ece:.3f}, 95th percentile {p95:.3f} ({args.draws} draws)"
    )
    if args.json_out:
        figures = {
            "rows": args.rows,
            "mean_confidence": args.mean,
            "sd_confidence": args.sd,
            "draws": args.draws,
            "ece_mean": round(mean_ece, 4),
            "ece_p95": round(p95, 4),
        }
        results.write(args.json_out, "ece_noise", "python bench/ece_noise.py", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
