"""A source kind for tests of the routing machinery itself: its behaviour is scripted.

It implements the real `Source` interface, so the dispatcher times it, caches it and
falls back from it exactly as from any other source. Tests that need a *real* backend
(libzim, kiwix-serve, Home Assistant, HTTP wire formats) use those instead; this one is
for properties of the router (fallback order, concurrency, deadlines, event isolation).
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from routing.events import record, run_in_thread
from sources.base import Item, Source, SourceError, SourceUnavailable
from sources.registry import SourceConfig, register_kind


class Config(SourceConfig):
    type: Literal["scripted"]
    items: int = 2
    delay_s: float = 0.0
    fail: Literal["error", "unavailable", "empty", "crash", "hang"] | None = None
    record_in_thread: bool = False
    control_prefix: str | None = None  # queries starting with it "change state"
    crash_message: str | None = None  # with fail: crash, the RuntimeError's message


class ScriptedSource(Source):
    kind = "scripted"

    def __init__(self, name: str, config: Config) -> None:
        super().__init__(name, config.timeout_s, config.description)
        self.config = config
        self.calls = 0

    async def search(self, query: str) -> list[Item]:
        self.calls += 1
        if self.config.delay_s:
            await asyncio.sleep(self.config.delay_s)
        if self.config.record_in_thread:
            await run_in_thread(self._blocking_work, query)
        fail = self.config.fail
        if fail == "hang":
            await asyncio.sleep(3600)
        if fail == "error":
            raise SourceError(f"{self.name} failed on purpose")
        if fail == "unavailable":
            raise SourceUnavailable(f"{self.name} is unreachable on purpose")
        if fail == "crash":
            raise RuntimeError(self.config.crash_message or f"{self.name} crashed on purpose")
        if fail == "empty":
            return []
        return [
            Item(f"{self.name} #{i} for {query}", f"text {i} about {query}", f"http://{self.name}/{i}")
            for i in range(self.config.items)
        ]

    def is_control(self, query: str) -> bool:
        prefix = self.config.control_prefix
        return bool(prefix) and query.lower().startswith(prefix)

    def _blocking_work(self, query: str) -> None:
        time.sleep(0.001)
        record("worker_thread", source=self.name, query=query)


def build(name: str, config: SourceConfig) -> Source:
    assert isinstance(config, Config)
    return ScriptedSource(name, config)


def register() -> None:
    register_kind("scripted", __name__)
