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

from routing.chain.events import record
from routing.chain.steps import Step
from sources.base import ActingSource, Command, Item, Source, SourceError, SourceUnavailable
from sources.registry import SourceConfig, register_kind
from sources.workers import run_source_work


class Config(SourceConfig):
    type: Literal["scripted"]
    items: int = 2
    delay_s: float = 0.0
    # "not-items": a buggy source's answer, None instead of a list
    fail: Literal["error", "unavailable", "empty", "crash", "hang", "not-items"] | None = None
    record_in_thread: bool = False
    control_prefix: str | None = None  # queries starting with it are commands
    allow_control: bool = False
    crash_message: str | None = None  # with fail: crash, the RuntimeError's message


class ScriptedSource(ActingSource):
    """Answers made-up items; with `control_prefix`, queries starting with it are commands,
    and `acted` lists every command `act` carried out (the tests' witness of the world)."""

    kind = "scripted"

    def __init__(self, name: str, config: Config) -> None:
        super().__init__(name, config.timeout_s)
        self.config = config
        self.allow_control = config.allow_control
        self.calls = 0
        self.acted: list[Command] = []
        self.acts_started = 0  # commands `act` was given, carried out or not (yet)

    async def search(self, query: str) -> list[Item]:
        self.calls += 1
        if self.config.delay_s:
            await asyncio.sleep(self.config.delay_s)
        if self.config.record_in_thread:
            await run_source_work(self._blocking_work, query)
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
        if fail == "not-items":
            return None  # type: ignore[return-value]
        return [
            Item(
                f"{self.name} #{i} for {query}",
                f"text {i} about {query}",
                f"http://{self.name}/{i}",
            )
            for i in range(self.config.items)
        ]

    def command(self, query: str) -> Command | None:
        prefix = self.config.control_prefix
        if not prefix or not query.lower().startswith(prefix):
            return None
        return Command(action=prefix, target=query[len(prefix) :].strip(), query=query)

    async def act(self, command: Command) -> list[Item]:
        self.acts_started += 1
        if self.config.delay_s:
            await asyncio.sleep(self.config.delay_s)
        if self.config.fail == "error":
            raise SourceError(f"{self.name} failed on purpose")
        self.acted.append(command)
        if self.config.fail == "not-items":
            return None  # type: ignore[return-value]
        return [Item(f"{self.name} did {command.describe()}", "done")]

    def _blocking_work(self, query: str) -> None:
        time.sleep(0.001)
        record(Step.WORKER_THREAD, source=self.name, query=query)


def build(name: str, config: SourceConfig) -> Source:
    assert isinstance(config, Config)
    return ScriptedSource(name, config)


def register() -> None:
    register_kind("scripted", __name__)
