"""A fitted artefact as one file: named numpy arrays and a JSON header beside them.

The shipped models whose numbers are too many for JSON (the classifier prior's centroids,
the time-sensitivity model's layers) are compressed `.npz` files with the arrays as
written and a `meta` array holding the UTF-8 JSON of everything else (thresholds, the fit's
report). Read without pickle: a file from elsewhere runs no code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def save_arrays(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), np.uint8)
    named: dict[str, Any] = {**arrays, "meta": header}
    with path.open("wb") as handle:  # np.savez_compressed(path) would append ".npz"
        np.savez_compressed(handle, **named)


def load_arrays(
    path: Path, what: str, dtypes: dict[str, Any]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays named in `dtypes` (as those types) and the JSON header of the file at
    `path`; ValueError naming `what` and the file when it cannot be read."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: np.asarray(data[name], dtype=kind) for name, kind in dtypes.items()}
            meta = json.loads(bytes(data["meta"]).decode("utf-8"))
    except (OSError, KeyError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} {path}: unreadable ({exc})") from exc
    if not isinstance(meta, dict):
        raise ValueError(f"{what} {path}: unreadable (its header is not an object)")
    return arrays, meta
