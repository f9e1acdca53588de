"""Calling sources: result cache, timed calls, fallback chains and fusion.

Every event here is recorded where the thing happens: `result_cache_hit` at the lookup
that hit, `source_invoked` around the awaited call itself, `fallback` when the chain
moves on, `fusion` when a fusion route fans out.

With shared state (`cache.redis_url`), a local result-cache miss asks the Redis tier and
the circuit breakers are asked through Redis (`routing.shared_state`); without it these
paths are the plain local ones, with nothing awaited.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from routing.breaker import CircuitBreaker
from routing.events import capture, record
from routing.fusion import reciprocal_rank_fusion
from routing.shared_state import SharedBreaker, SharedCache
from routing.text import normalise
from routing.ttl_cache import TTLCache
from sources.base import Item, Source, SourceDisabled, SourceError
from sources.workers import source_deadline


@dataclass(slots=True)
class Answer:
    """What a route produced for one part."""

    source: str | None
    status: str  # "ok" | "empty" | "error"
    items: list[Item] = field(default_factory=list)
    error: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class _Outcome:
    outcome: str  # ok | empty | error | timeout
    items: list[Item]
    reason: str
    message: str


def expand_chain(name: str, fallbacks: dict[str, list[str]]) -> list[str]:
    """`name` then its fallbacks, depth first, each source once (config rejects cycles)."""
    chain: list[str] = []

    def visit(node: str) -> None:
        if node in chain:
            return
        chain.append(node)
        for nxt in fallbacks.get(node, []):
            visit(nxt)

    visit(name)
    return chain


class Dispatcher:
    """Answers a part from a route: one source with its fallback chain, or a fusion."""

    def __init__(
        self,
        sources: dict[str, Source],
        fallbacks: dict[str, list[str]],
        fusion: dict[str, list[str]],
        result_cache: TTLCache[tuple[str, str], list[Item]],
        enabled: dict[str, bool] | None = None,
        max_concurrency: dict[str, int] | None = None,
        breakers: dict[str, CircuitBreaker] | None = None,
        cache_ttl_s: dict[str, float | None] | None = None,
        shared_results: SharedCache[tuple[str, str], list[Item]] | None = None,
        shared_breakers: dict[str, SharedBreaker] | None = None,
    ) -> None:
        """`shared_results` is the Redis tier behind `result_cache`; `shared_breakers`
        hold the same local breakers as `breakers`, with their state in Redis."""
        self.sources = sources
        self.fusion = fusion
        self.result_cache = result_cache
        self.enabled = enabled or {name: True for name in sources}
        self.chains = {name: expand_chain(name, fallbacks) for name in self.enabled}
        limits = max_concurrency or {}
        self._slots = {name: asyncio.Semaphore(limits.get(name, 8)) for name in sources}
        self.breakers = breakers or {}
        self.cache_ttl_s = cache_ttl_s or {}
        self.shared_results = shared_results
        self.shared_breakers = shared_breakers or {}

    def routes(self) -> list[str]:
        return [*self.enabled, *self.fusion]

    async def answer(self, route: str, query: str) -> Answer:
        if route in self.fusion:
            return await self._fuse(route, query)
        return await self._with_fallback(route, query)

    async def _with_fallback(self, name: str, query: str) -> Answer:
        chain = self.chains[name]
        empty_from: str | None = None
        last = _Outcome("error", [], "error", "no source tried")
        for position, source_name in enumerate(chain):
            if position > 0:
                record(
                    "fallback",
                    from_source=chain[position - 1],
                    to_source=source_name,
                    query=query,
                    reason=last.reason,
                )
            last = await self._call(source_name, query)
            if last.outcome == "ok":
                return Answer(source_name, "ok", last.items)
            if last.outcome == "empty":
                empty_from = source_name
        if empty_from is not None:
            return Answer(empty_from, "empty", [])
        return Answer(None, "error", [], {"type": last.reason, "message": last.message})

    async def _call(self, name: str, query: str) -> _Outcome:
        """One source, through the result cache, timed around the call itself.

        A call that changes state ("turn off the light") is never answered from the cache,
        or it would silently not happen the second time.
        """
        key = (name, normalise(query))
        source = self.sources.get(name)
        cacheable = source is not None and not source.is_control(query)
        cached = self.result_cache.get(key) if cacheable else None
        if cached is not None:
            record("result_cache_hit", source=name, query=query, result_count=len(cached))
            return _Outcome("ok", cached, "", "")
        if cacheable and self.shared_results is not None:
            cached = await self.shared_results.fetch(key, self.cache_ttl_s.get(name))
            if cached is not None:  # another worker or replica fetched it
                record("result_cache_hit", source=name, query=query,
                       result_count=len(cached), tier="shared")
                return _Outcome("ok", cached, "", "")
        if source is None or not self.enabled.get(name, True):
            error = SourceDisabled(f"{name} is disabled in config")
            record("source_skipped", source=name, query=query, reason=error.reason)
            return _Outcome("error", [], error.reason, str(error))
        breaker = self.breakers.get(name)
        shared = self.shared_breakers.get(name) if self.shared_breakers else None
        if breaker is not None:
            admission = breaker.admit() if shared is None else await shared.admit()
            if not admission.allowed:
                record(
                    "source_skipped",
                    source=name,
                    query=query,
                    reason="circuit_open",
                    time_left_s=admission.time_left_s,
                )
                return _Outcome("error", [], "circuit_open", f"{name}'s circuit is open")
        async with self._slots[name]:
            started = time.perf_counter()
            try:
                # paused while the call waits for a local worker: the source is timed, not us
                async with source_deadline(source.timeout_s):
                    items = await source.search(query)
                outcome = _Outcome("ok" if items else "empty", items, "" if items else "empty", "")
            except TimeoutError:
                outcome = _Outcome("timeout", [], "timeout", f"{name} took over {source.timeout_s}s")
            except SourceError as exc:
                kind = "timeout" if exc.reason == "timeout" else "error"
                outcome = _Outcome(kind, [], exc.reason, str(exc))
            except Exception as exc:  # a buggy source must not take the request down
                outcome = _Outcome("error", [], "error", f"{type(exc).__name__}: {exc}")
            elapsed_ms = round((time.perf_counter() - started) * 1000.0, 3)
        fields: dict[str, object] = {}
        if outcome.outcome in ("error", "timeout"):
            fields = {"reason": outcome.reason, "message": outcome.message}
        record(
            "source_invoked",
            source=name,
            query=query,
            elapsed_ms=elapsed_ms,
            outcome=outcome.outcome,
            result_count=len(outcome.items),
            **fields,
        )
        if shared is not None:
            await (shared.succeeded() if outcome.outcome in ("ok", "empty") else shared.failed())
        elif breaker is not None:
            if outcome.outcome in ("ok", "empty"):
                breaker.succeeded()
            else:
                breaker.failed()
        if outcome.outcome in ("ok", "empty"):
            capture(name, query, outcome.items)
        if outcome.outcome == "ok" and cacheable:
            self.result_cache.set(key, outcome.items, self.cache_ttl_s.get(name))
            if self.shared_results is not None:
                self.shared_results.publish(key, outcome.items, self.cache_ttl_s.get(name))
        return outcome

    async def _fuse(self, route: str, query: str) -> Answer:
        members = self.fusion[route]
        record("fusion", query=query, sources=list(members), route=route, method="rrf")
        outcomes = await asyncio.gather(*(self._call(name, query) for name in members))
        lists = [o.items for o in outcomes if o.outcome == "ok"]
        if lists:
            return Answer(route, "ok", reciprocal_rank_fusion(lists))
        if any(o.outcome == "empty" for o in outcomes):
            return Answer(route, "empty", [])
        last = outcomes[-1]
        return Answer(None, "error", [], {"type": last.reason, "message": last.message})
