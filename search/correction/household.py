"""The household's routing artefact: what `search fit` wrote, in the data directory.

The data directory is the trace store's (`trace.path`'s directory): the traces, the
labels beside them, and `routing-household.json`, the one artefact a household fit
writes. A package upgrade never replaces it, and nothing is written into a checkout.

The artefact holds the labels the fit applied (query -> route, the latest label per
query) and, when the household's routes differ from the shipped ones, the confidence
weights fitted for them (otherwise none: the shipped weights are right for the shipped
routes). Its name, `household:<digest>`, is what the chain shows on every intent event
the artefact shaped (`fit`), so a trace says which fit routed it.

`load` is called by `Service` (one place for every command that routes); a running
server watches the file (`ArtefactWatch`) and reloads routing when it changes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from routing.stages.confidence import FULL_FEATURES, KEYWORD_FEATURES, ConfidenceModel
from routing.stages.labels import HouseholdRouting
from search.config import Config, ConfigError

ARTEFACT_NAME = "routing-household.json"
VERSION = 2
# A weight no fit gives (they are L2-regularised, single figures): past it a damaged file,
# whose logits could overflow to inf and make every confidence NaN.
MAX_WEIGHT = 1e6


def data_dir(config: Config) -> Path:
    """Where the household's data lives: the trace store's directory."""
    return Path(os.path.abspath(os.path.expanduser(config.trace.path))).parent


def artefact_path(config: Config) -> Path:
    return data_dir(config) / ARTEFACT_NAME


@dataclass(frozen=True, slots=True)
class AppliedLabel:
    """A label as the artefact applies it."""

    query: str
    route: str
    label_id: int
    trace_id: str
    part: str

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "route": self.route,
            "label_id": self.label_id,
            "trace_id": self.trace_id,
            "part": self.part,
        }


def encode(
    labels: Sequence[AppliedLabel],
    weights: ConfidenceModel | None,
    report: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> bytes:
    """The artefact's bytes (what `write` stores; its digest names it)."""
    body = {
        "version": VERSION,
        "created_at": datetime.fromtimestamp(
            now if now is not None else datetime.now(UTC).timestamp(), UTC
        ).isoformat(timespec="seconds"),
        "labels": [label.to_json() for label in labels],
        "weights": weights.to_json() if weights is not None else None,
        "report": dict(report or {}),
    }
    return (json.dumps(body, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode()


def name_of(data: bytes) -> str:
    return "household:" + hashlib.sha256(data).hexdigest()[:10]


def _number(value: Any, where: str, low: float, high: float) -> float:
    """`value` as a finite float within low..high; ValueError names it. A string ("nan")
    or a bool is no number here, though `float()` would take it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} is not a number")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise ValueError(f"{where} is {number!r}, not within {low:g}..{high:g}")
    return number


def _labels(entries: Any) -> dict[str, str]:
    """query -> route, each entry `{query, route}` of strings (later entries win)."""
    if not isinstance(entries, list):
        raise ValueError("labels is not a list")
    labels = {}
    for index, entry in enumerate(entries):
        query, route = entry["query"], entry["route"]
        if not isinstance(query, str) or not isinstance(route, str):
            raise ValueError(f"labels[{index}]: query and route must be strings")
        labels[query] = route
    return labels


def _weights(weights: Mapping[str, Any]) -> ConfidenceModel:
    """The confidence model, every number checked first: a NaN threshold or weight would
    load silently and change every decision (`x < nan` is never true)."""
    for model, features in (("keyword", KEYWORD_FEATURES), ("full", FULL_FEATURES)):
        table = weights[model]
        if not isinstance(table, Mapping):
            raise ValueError(f"weights.{model} is not a mapping")
        for feature in features:
            if feature in table:
                _number(table[feature], f"weights.{model}.{feature}", -MAX_WEIGHT, MAX_WEIGHT)
    # within 0..1 as `routing.min_confidence` is in config.yaml
    _number(weights["min_confidence"], "weights.min_confidence", 0.0, 1.0)
    return ConfidenceModel.from_json(weights)


def decode(data: bytes, where: Path | str = "artefact") -> HouseholdRouting:
    """The routing an artefact's bytes give; ConfigError names a damaged file (the CLI
    prints it as one line and exits 2; a running server keeps its routing and logs it)."""
    try:
        body = json.loads(data)
        if body.get("version") != VERSION:
            raise ValueError(f"version {body.get('version')!r}, this release reads {VERSION}")
        labels = _labels(body["labels"])
        weights = body.get("weights")
        model = _weights(weights) if weights else None
    except RecursionError:  # JSON nested thousands deep: the decoder recurses per level
        raise ConfigError(
            f"{where}: not a household routing artefact (nested too deep); "
            "run `search fit` to rewrite it"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"{where}: not a household routing artefact ({_cut(str(exc))}); "
            "run `search fit` to rewrite it"
        ) from None
    return HouseholdRouting.of(labels, model, name_of(data))


def _cut(text: str, limit: int = 200) -> str:
    """A reason as one short line (a KeyError of a huge key would be the whole key)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load(config: Config) -> HouseholdRouting | None:
    """The household's routing, or None when `search fit` never wrote one."""
    path = artefact_path(config)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return decode(data, path)


def write(path: Path, data: bytes) -> None:
    """Written whole or not at all (a temporary file renamed over the old one), private:
    it holds the household's own phrasing, like the trace store. A data directory that
    cannot take it (read-only, full, a directory in the file's place) is a `ConfigError`
    naming the file; the artefact there before is left as it was."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temp, 0o600)
        os.replace(temp, path)
    except BaseException as exc:
        Path(temp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ConfigError(f"{path}: cannot write ({exc.strerror or exc})") from None
        raise


class ArtefactWatch:
    """Tells when the artefact file changed since last asked (a stat: cheap to poll)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen = self._stamp()

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def changed(self) -> bool:
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        self._seen = stamp
        return True
