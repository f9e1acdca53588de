"""Suite-wide set-up: the scripted source kind, offline model loading."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as the CLI sets it for itself
# The shipped config's data directory (traces, labels, fits, the demo ZIM): one of this
# run's own, so the suite never reads or writes a household's real one.
if "SEARCH_DATA_DIR" not in os.environ:
    import tempfile

    os.environ["SEARCH_DATA_DIR"] = tempfile.mkdtemp(prefix="search-data-")

from tests.support import scripted  # noqa: E402

scripted.register()


import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# A CI run explores the same examples every time: a property test finds new inputs on a
# developer's machine, where a failure is looked into, and never turns a CI run red by
# the luck of the draw.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes", "on"}:
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def demo_zim(tmp_path_factory: pytest.TempPathFactory):
    """The shipped corpus built into a real ZIM, once per test session."""
    from tests.support.zim import build_demo_zim

    return build_demo_zim(tmp_path_factory.mktemp("demo-zim"))
