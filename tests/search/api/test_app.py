"""`search.api.app.create_app`: what the app does with the service it is given, over its
lifespan, beside the routes (tests/search/api/test_http.py covers `/search` itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from search.api.app import create_app
from search.service import Service
from sources.base import Item, Source
from tests.support.app import asgi_client, scripted_config

ROOT = Path(__file__).resolve().parents[3]


class Watched(Source):
    """Wraps a source and notes when the app starts and closes it."""

    def __init__(self, inner: Source, log: list[str]) -> None:
        super().__init__(inner.name, inner.timeout_s)
        self.inner = inner
        self.log = log

    async def search(self, query: str) -> list[Item]:
        return await self.inner.search(query)

    async def start(self) -> None:
        self.log.append(f"start {self.name}")

    async def aclose(self) -> None:
        self.log.append(f"close {self.name}")


async def test_sources_are_opened_for_the_lifespan_and_closed_after_it() -> None:
    log: list[str] = []
    config = scripted_config({"kiwix": {}, "web": {}})
    service = Service(config, wrap_source=lambda s: Watched(s, log))
    async with asgi_client(create_app(config, service)) as client:
        assert sorted(log) == ["start kiwix", "start web"]
        assert (await client.post("/search", json={"query": "hello"})).status_code == 200
    assert sorted(log[2:]) == ["close kiwix", "close web"]


async def test_a_given_service_gets_metrics_counted() -> None:
    config = scripted_config({"kiwix": {}})
    service = Service(config)  # built without observers
    async with asgi_client(create_app(config, service)) as client:
        await client.post("/search", json={"query": "hello"})
        metrics = (await client.get("/metrics")).text
    assert 'search_requests_total{status="200"} 1.0' in metrics


async def test_mcp_is_served_only_when_enabled() -> None:
    config = scripted_config({"kiwix": {}})
    for enabled, expected in ((True, 406), (False, 404)):
        config.mcp.enabled = enabled
        async with asgi_client(create_app(config, Service(config))) as client:
            response = await client.post("/mcp", json={}, headers={"Accept": "text/plain"})
        assert response.status_code == expected, (enabled, response.text)


async def test_healthz_names_the_worker_and_version() -> None:
    config = scripted_config({"kiwix": {}})
    async with asgi_client(create_app(config, Service(config))) as client:
        body = (await client.get("/healthz")).json()
    assert body["status"] == "ok" and body["pid"] == os.getpid()
    assert isinstance(body["version"], str) and body["version"]


# The heap is frozen by the serving process only: an app embedded elsewhere leaves the
# garbage collector alone. In a subprocess, since freezing is for the whole process.
FREEZE_PROBE = """
import asyncio, gc, json
from tests.support import scripted
scripted.register()
from search.api.app import create_app
from tests.support.app import asgi_client, scripted_config

async def count(settle):
    config = scripted_config({"kiwix": {}})
    async with asgi_client(create_app(config, settle=settle)):
        return gc.get_freeze_count()

embedded = asyncio.run(count(False))
served = asyncio.run(count(True))
print(json.dumps([embedded, served]))
"""


def test_only_a_serving_process_freezes_the_heap() -> None:
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", FREEZE_PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    embedded, served = json.loads(done.stdout.strip().splitlines()[-1])
    assert embedded == 0
    assert served > 0
