"""An app factory for process managers: `uvicorn --factory search.api.asgi:app_factory`.

Worker processes import this and read the config path from `$SEARCH_CONFIG`, which
`search serve --workers N` sets before starting them.
"""

from __future__ import annotations

from search.api.app import OneLineStartError, create_app
from search.config import load_config


def app_factory() -> OneLineStartError:
    return OneLineStartError(create_app(load_config(), settle=True))  # its heap is ours
