"""An app factory for process managers: `uvicorn --factory search.api.asgi:app_factory`.

Worker processes import this and read the config path from `$SEARCH_CONFIG`, which
`search serve --workers N` sets before starting them.
"""

from __future__ import annotations

from starlette.applications import Starlette

from search.api.app import create_app
from search.config import load_config


def app_factory() -> Starlette:
    return create_app(load_config(), settle=True)  # a worker process: its heap is ours
