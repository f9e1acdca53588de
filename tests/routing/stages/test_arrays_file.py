"""Fitted artefacts as arrays with a JSON header (routing/stages/arrays_file.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from routing.stages.arrays_file import load_arrays, save_arrays


def test_arrays_and_header_come_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "model.npz"  # its directory is made
    save_arrays(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"t": 0.8, "k": ["a"]})
    arrays, meta = load_arrays(path, "test model", {"w": np.float64})
    assert arrays["w"].dtype == np.float64 and arrays["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert meta == {"t": 0.8, "k": ["a"]}
    first = path.read_bytes()
    save_arrays(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"k": ["a"], "t": 0.8})
    assert path.read_bytes() == first  # the same fit writes the same bytes


@pytest.mark.parametrize(
    ("arrays", "header"),
    [
        ({"w": np.zeros(2)}, None),  # no header at all
        ({}, np.frombuffer(b"[1, 2]", np.uint8)),  # a header, but no "w"
        ({"w": np.zeros(2)}, np.frombuffer(b"[1, 2]", np.uint8)),  # a header not an object
        ({"w": np.asarray([{"a": 1}], dtype=object)}, np.frombuffer(b"{}", np.uint8)),  # pickle
    ],
)
def test_a_malformed_file_is_refused_naming_what_and_where(
    tmp_path: Path, arrays: dict[str, np.ndarray], header: np.ndarray | None
) -> None:
    path = tmp_path / "bad.npz"
    with path.open("wb") as handle:
        np.savez(handle, **arrays, **({} if header is None else {"meta": header}))
    with pytest.raises(ValueError, match=r"test model .*bad\.npz: unreadable"):
        load_arrays(path, "test model", {"w": np.float32})
