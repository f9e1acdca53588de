"""Layers point one way: `search/` uses `routing/`, which uses `sources/`; never back.

Each check imports every module of a package in a fresh interpreter in which the layers
above it cannot be imported at all, so an import anywhere in the package (at module level
or inside a function that runs at import time) fails the test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import importlib, pkgutil, sys

blocked = set(sys.argv[2].split(","))

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is a layer above {sys.argv[1]}")
        return None

sys.meta_path.insert(0, Block())
package = importlib.import_module(sys.argv[1])
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    importlib.import_module(info.name)
print("imported", sys.argv[1])
"""


@pytest.mark.parametrize(
    ("package", "above"),
    [("sources", "routing,search"), ("routing", "search")],
)
def test_a_layer_imports_nothing_above_it(package: str, above: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, package, above],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"imported {package}" in done.stdout


def test_the_probe_does_catch_an_upward_import() -> None:
    """The same probe, with the layer below blocked, must fail: it is not vacuous."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "routing", "sources"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "is a layer above routing" in done.stderr
