"""Suite-wide set-up: the scripted source kind, offline model loading."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as the CLI sets it for itself

from tests.support import scripted  # noqa: E402

scripted.register()


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def demo_zim(tmp_path_factory: pytest.TempPathFactory):
    """The shipped corpus built into a real ZIM, once per test session."""
    from tests.support.zim import build_demo_zim

    return build_demo_zim(tmp_path_factory.mktemp("demo-zim"))
