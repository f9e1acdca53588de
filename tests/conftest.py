"""Suite-wide set-up: the scripted source kind, offline model loading."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tests.support import scripted  # noqa: E402

scripted.register()
