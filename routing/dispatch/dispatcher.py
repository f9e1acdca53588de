"""Calling sources: result cache, timed calls, fallback chains and fusion.

Every event here is recorded where the thing happens: `result_cache_hit` at the lookup
that hit, `source_invoked` around the awaited call itself, `fallback` when the chain
moves on, `fusion` when a fusion route fans out.

With shared state (`cache.redis_url`), a local result-cache miss asks the Redis tier and
the circuit breakers are asked through Redis (`routing.shared_state`); without it these
paths are the plain local ones, with nothing awaited.

A part whose words are a command to an acting source goes through `_command`, the only
place that calls `act`: the control gate (`routing.dispatch.control`) decides first, and a
command is never answered from the result cache, never fused and never sent down a
fallback chain (an unlock that failed must not turn into a web search). A command that ran
drops that source's cached answers, here and in the shared tier.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from routing.chain.events import capture, record
from routing.chain.steps import Step
from routing.dispatch.breaker import CircuitBreaker
from routing.dispatch.control import (
    REASON_WORDS,
    Circumstances,
    deferral,
    withheld_reasons,
    without_deferral,
)
from routing.dispatch.fusion import reciprocal_rank_fusion
from routing.language.text import normalise
from routing.shared_state import SharedBreaker, SharedCache
from routing.ttl_cache import TTLCache
from sources.base import (
    ActingSource,
    Command,
    Item,
    Source,
    SourceDisabled,
    SourceError,
    Unchanged,
)
from sources.workers import source_deadline


@dataclass(slots=True)
class Answer:
    """What a route produced for one part."""

    source: str | None
    status: str  # "ok" | "empty" | "error" | "withheld"
    items: list[Item] = field(default_factory=list)
    error: dict[str, str] | None = None
    withheld: dict[str, object] | None = None  # why a command did not run, and what it was


@dataclass(frozen=True, slots=True)
class _Outcome:
    outcome: str  # ok | empty | error | timeout
    items: list[Item]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    """What a part's route would try, as a dry run shows it: its sources in order (a
    command's one source, a fusion's members, else the fallback chain) and, of those, the
    ones that could not be called now and why (`disabled` in config, `circuit_open`), as
    this process knows it without calling anything."""

    sources: tuple[str, ...]
    unavailable: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"sources": list(self.sources), "unavailable": dict(self.unavailable)}


def expand_chain(name: str, fallbacks: dict[str, list[str]]) -> list[str]:
    """`name`, then the sources it names as its own fallbacks, each once.

    Not their fallbacks in turn: a fallback stands in for one source on that source's
    questions. `web` falling back to `kiwix` serves web's questions; followed on from
    `forecast -> web`, it would answer a weather question with an encyclopedia article.
    A route that should end at `kiwix` says so in its own list.
    """
    chain = [name]
    for nxt in fallbacks.get(name, []):
        if nxt not in chain:
            chain.append(nxt)
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
        acting: bool = True,
    ) -> None:
        """`shared_results` is the Redis tier behind `result_cache`; `shared_breakers`
        hold the same local breakers as `breakers`, with their state in Redis. With
        `acting` false (a replay) no command ever runs."""
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
        self.acting = acting

    def reset(self) -> None:
        """Empty the result cache and close every circuit: as at start-up."""
        self.result_cache.clear()
        for breaker in self.breakers.values():
            breaker.reset()

    def routes(self) -> list[str]:
        return [*self.enabled, *self.fusion]

    def command_for(self, route: str, query: str) -> tuple[str, Command, str | None] | None:
        """(source, command, time qualifier) when `query` asks the route's source to change
        something; None for a question, a fusion route or a source that cannot act."""
        source = self.sources.get(route)
        if source is None or route in self.fusion or type(source).command is Source.command:
            return None  # a source that reads no commands: nothing to parse on the hot path
        command = source.command(query)
        when = deferral(query)
        if command is None and when is not None:  # "in ten minutes, turn off the oven"
            command = source.command(without_deferral(query))
        if command is None:
            return None
        return route, command, when

    def plan(self, route: str, query: str, then: tuple[str, ...] = ()) -> Plan:
        """What `answer` would try for `query` on `route`, without calling a source, the
        result cache or Redis: for a dry run, so it can say a part would fail (its source is
        disabled, its circuit open, and nothing stands in) before a real run finds out."""
        found = self.command_for(route, query)
        if found is not None:
            sources: list[str] = [found[0]]  # a command is never sent down a chain
        elif route in self.fusion:
            sources = list(self.fusion[route])
        else:
            sources = self._chain(route, then)
        unavailable = {name: why for name in sources if (why := self._unavailable(name, query))}
        return Plan(tuple(sources), unavailable)

    def _unavailable(self, name: str, query: str) -> str | None:
        """Why `name` would be skipped right now, as far as this process knows: `disabled`
        in config, or `circuit_open` with no answer to `query` in this process's result
        cache (which `_call` asks first). The circuit is this process's own, as its calls
        left it: with circuits shared in Redis, what other workers met is not asked."""
        if name not in self.sources or not self.enabled.get(name, True):
            return "disabled"
        breaker = self.breakers.get(name)
        shut = breaker is not None and not breaker.would_admit().allowed
        if shut and not self.result_cache.holds((name, normalise(query))):
            return "circuit_open"
        return None

    def _chain(self, name: str, then: tuple[str, ...] = ()) -> list[str]:
        """The sources a read of route `name` tries in order: its chain, then `then`'s."""
        chain = list(self.chains.get(name, [name]))
        for extra in then:
            chain += [s for s in self.chains.get(extra, [extra]) if s not in chain]
        return chain

    def withhold_plan(self, route: str, query: str, circumstances: Circumstances) -> bool:
        """On a dry run: record why a command in the plan would not run now; True if any."""
        found = self.command_for(route, query)
        if found is None:
            return False
        self._withheld(*found, query, circumstances)
        return True

    async def answer(
        self,
        route: str,
        query: str,
        circumstances: Circumstances | None = None,
        then: tuple[str, ...] = (),
    ) -> Answer:
        """`then`: routes whose chains follow the route's own when it fails (a live
        source standing in for the snapshot the part was routed to)."""
        found = self.command_for(route, query)
        if found is not None:
            return await self._command(*found, query, circumstances or Circumstances())
        if route in self.fusion:
            return await self._fuse(route, query)
        return await self._with_fallback(route, query, then)

    def is_command(self, query: str) -> bool:
        """Whether any source would read `query` as a command to change something."""
        return any(self.command_for(name, query) is not None for name in self.sources)

    def _withheld(
        self,
        name: str,
        command: Command,
        when: str | None,
        query: str,
        circumstances: Circumstances,
        unplaced: tuple[str, ...] = (),
    ) -> Answer | None:
        """The gate: records `control_withheld` and answers "withheld", or None to act.

        Asked twice for a command that passes: before the source hears of it, and after
        the source (read-only) matched its words to devices, with the `unplaced` ones."""
        # What the user's config says (a replay's wrapped source reports it too); whether
        # the source can act at all is checked again before `act`.
        allowed = bool(getattr(self.sources[name], "allow_control", False))
        if circumstances.part != query:  # the words the gate judges are the command's own
            circumstances = replace(circumstances, part=query)
        if when is None:
            when = circumstances.when
        reasons = withheld_reasons(
            allowed=allowed,
            acting=self.acting,
            deferred=when is not None,
            circumstances=circumstances,
            unplaced=bool(unplaced),
        )
        if not reasons:
            return None
        fields: dict[str, object] = {"when": when} if when is not None else {}
        if circumstances.condition is not None:
            fields["condition"] = circumstances.condition
        doubt = circumstances.doubt
        if doubt is not None:
            fields["doubt"] = doubt
        if unplaced:
            fields["unplaced"] = list(unplaced)
        record(
            Step.CONTROL_WITHHELD,
            query=query,
            source=name,
            reason=reasons[0].value,
            reasons=[r.value for r in reasons],
            command=command.to_dict(),
            **fields,
        )
        words = "; ".join(REASON_WORDS[r] for r in reasons)
        if doubt is not None:
            words += f" (the request also says '{doubt}')"
        if unplaced:
            words += f" ({', '.join(repr(w) for w in unplaced)} names none of {name}'s devices)"
        item = Item(
            title="Not carried out",
            text=f"Would {command.describe()} with {name}, but did nothing: {words}.",
        )
        return Answer(
            name,
            "withheld",
            [item],
            withheld={
                "reason": reasons[0].value,
                "reasons": [r.value for r in reasons],
                "command": command.to_dict(),
            },
        )

    async def _command(
        self,
        name: str,
        command: Command,
        when: str | None,
        query: str,
        circumstances: Circumstances,
    ) -> Answer:
        """A command through the gate: once, never cached, fused or fallen back from."""
        withheld = self._withheld(name, command, when, query, circumstances)
        if withheld is not None:
            return withheld
        source = self.sources[name]
        if not isinstance(source, ActingSource):  # reads commands but has no way to act
            return self._cannot_act(name, command, query)
        if not self.enabled.get(name, True):
            record(Step.SOURCE_SKIPPED, source=name, query=query, reason="disabled")
            return Answer(
                None, "error", [], {"type": "disabled", "message": f"{name} is disabled in config"}
            )
        async with self._slots[name]:
            command = await self._recognized(name, source, command, query)
            unplaced = await self._unplaced(source, command)
            if unplaced:
                withheld = self._withheld(name, command, when, query, circumstances, unplaced)
                if withheld is not None:  # always: unplaced words are a reason
                    return withheld
            started = time.perf_counter()
            error: SourceError | None = None
            items: list[Item] = []
            try:
                async with source_deadline(source.timeout_s):
                    items = _as_items(await source.act(command), name, "act")
                # An act that answered only what it left as it was changed nothing.
                outcome = "ok" if any(not isinstance(i, Unchanged) for i in items) else "empty"
            except TimeoutError:
                outcome, error = "timeout", SourceError(f"{name} took over {source.timeout_s}s")
            except SourceError as exc:
                outcome, error = ("timeout" if exc.reason == "timeout" else "error"), exc
            except asyncio.CancelledError:
                await self._cancelled_act(name, command, query, started)
                raise
            except Exception as exc:  # noqa: BLE001 - a buggy source must not take the request down
                outcome, error = "error", SourceError(f"{type(exc).__name__}: {exc}")
            elapsed_ms = round((time.perf_counter() - started) * 1000.0, 3)
        reason = "timeout" if outcome == "timeout" else (error.reason if error else "")
        fields: dict[str, object] = {}
        if error is not None:
            fields = {"reason": reason, "message": str(error)}
        why = {i.reason for i in items if isinstance(i, Unchanged)}
        if outcome == "empty" and len(why) == 1:
            fields = {"reason": why.pop()}  # why nothing changed, as the source said
        record(
            Step.SOURCE_INVOKED,
            source=name,
            query=query,
            elapsed_ms=elapsed_ms,
            outcome=outcome,
            result_count=len(items),
            operation="act",
            command=command.to_dict(),
            **fields,
        )
        # Even a call that failed or came late may have changed something: what was read
        # of this source before is no longer to be trusted.
        await self.forget(name)
        if error is not None:
            return Answer(None, "error", [], {"type": reason, "message": str(error)})
        return Answer(name, outcome, items)

    async def _cancelled_act(self, name: str, command: Command, query: str, started: float) -> None:
        """A command whose request went away (the client left, the deadline passed) while
        the source had it: the call may have taken effect, so it is recorded as sent, with
        no result, and the source's cached answers are dropped all the same. Shielded: the
        cancellation that is ending the request must not also cut the forgetting short."""
        _record_cut_off(
            name,
            query,
            started,
            "the command may have taken effect",
            operation="act",
            command=command.to_dict(),
        )
        await asyncio.shield(self.forget(name))

    async def _recognized(
        self, name: str, source: ActingSource, command: Command, query: str
    ) -> Command:
        """The command as the source understands it (read-only), recorded where it is
        learnt; a recognition that fails leaves the command as the gate saw it."""
        try:
            async with source_deadline(source.timeout_s):
                recognized = await source.recognize(command)
        except Exception as exc:  # noqa: BLE001 - understanding is an extra; acting goes on
            failed: dict[str, Any] = {"recognizer": source.kind, "intent": None}
            failed.update(matched=False, slots={}, targets=[], error=type(exc).__name__)
            recognized = replace(command, recognized=failed)
        if recognized.recognized is not None:
            record(Step.COMMAND_RECOGNIZED, query=query, source=name, **recognized.recognized)
        return recognized

    async def _unplaced(self, source: ActingSource, command: Command) -> tuple[str, ...]:
        """The command's target words that name none of the source's devices (read-only).
        A source that cannot be read now answers (): `act` reads it the same way and
        fails there, recorded as the call's outcome."""
        try:
            async with source_deadline(source.timeout_s):
                return tuple(await source.unplaced(command))
        except Exception:  # noqa: BLE001 - the failure is the act's to report
            return ()

    def _cannot_act(self, name: str, command: Command, query: str) -> Answer:
        record(
            Step.CONTROL_WITHHELD,
            query=query,
            source=name,
            reason="not_allowed",
            reasons=["not_allowed"],
            command=command.to_dict(),
        )
        return Answer(
            name,
            "withheld",
            [Item("Not carried out", f"{name} cannot act.")],
            withheld={
                "reason": "not_allowed",
                "reasons": ["not_allowed"],
                "command": command.to_dict(),
            },
        )

    async def forget(self, name: str) -> None:
        """Drop every cached answer of source `name` (this process and the shared tier)."""
        self.result_cache.discard_where(lambda key: key[0] == name)
        if self.shared_results is not None:
            await self.shared_results.discard_prefix(
                "[" + json.dumps(name, ensure_ascii=False) + ","
            )

    async def _with_fallback(self, name: str, query: str, then: tuple[str, ...] = ()) -> Answer:
        chain = self._chain(name, then)
        empty_from: str | None = None
        last = _Outcome("error", [], "error", "no source tried")
        for position, source_name in enumerate(chain):
            if position > 0:
                record(
                    Step.FALLBACK,
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
        message = last.message
        if len(chain) > 1:
            message = f"none of {' -> '.join(chain)} answered; the last: {message}"
        return Answer(None, "error", [], {"type": last.reason, "message": message})

    async def _call(self, name: str, query: str) -> _Outcome:
        """One source's `search` (it only reads), through the result cache, timed around
        the call itself. The words of a command are never cached even here (a fusion member
        reading them): their answer describes a state that is about to change.
        """
        key = (name, normalise(query))
        source = self.sources.get(name)
        cacheable = source is not None and source.command(query) is None
        # A source that may act is read from the shared tier alone when there is one: a
        # command run by another worker drops the shared copy, not this process's.
        local = cacheable and not (
            self.shared_results is not None and getattr(source, "allow_control", False)
        )
        cached = await self._cached(key, query, cacheable=cacheable, local=local)
        if cached is not None:
            return _Outcome("ok", cached, "", "")
        if source is None or not self.enabled.get(name, True):
            error = SourceDisabled(f"{name} is disabled in config")
            record(Step.SOURCE_SKIPPED, source=name, query=query, reason=error.reason)
            return _Outcome("error", [], error.reason, str(error))
        breaker = self.breakers.get(name)
        shared = self.shared_breakers.get(name) if self.shared_breakers else None
        if breaker is not None:
            admission = breaker.admit() if shared is None else await shared.admit()
            if not admission.allowed:
                record(
                    Step.SOURCE_SKIPPED,
                    source=name,
                    query=query,
                    reason="circuit_open",
                    time_left_s=admission.time_left_s,
                )
                return _Outcome("error", [], "circuit_open", f"{name}'s circuit is open")
        outcome = await self._timed_search(name, source, query)
        answered = outcome.outcome in ("ok", "empty")
        if shared is not None:
            await (shared.succeeded() if answered else shared.failed())
        elif breaker is not None and answered:
            breaker.succeeded()
        elif breaker is not None:
            breaker.failed()
        if answered:
            capture(name, query, outcome.items)
        if outcome.outcome == "ok" and cacheable:
            if local:
                self.result_cache.set(key, outcome.items, self.cache_ttl_s.get(name))
            if self.shared_results is not None:
                self.shared_results.publish(key, outcome.items, self.cache_ttl_s.get(name))
        return outcome

    async def _cached(
        self, key: tuple[str, str], query: str, *, cacheable: bool, local: bool
    ) -> list[Item] | None:
        """A cached answer from this process (when `local`) or the shared tier, recorded
        as the hit it is; None on a miss or when the answer may not be cached."""
        name = key[0]
        cached = self.result_cache.get(key) if local else None
        if cached is not None:
            record(Step.RESULT_CACHE_HIT, source=name, query=query, result_count=len(cached))
            return cached
        if not cacheable or self.shared_results is None:
            return None
        cached = await self.shared_results.fetch(
            key, self.cache_ttl_s.get(name), keep_locally=local
        )
        if cached is not None:  # another worker or replica fetched it
            record(
                Step.RESULT_CACHE_HIT,
                source=name,
                query=query,
                result_count=len(cached),
                tier="shared",
            )
        return cached

    async def _timed_search(self, name: str, source: Source, query: str) -> _Outcome:
        """The awaited `search` in one of the source's slots, timed and recorded as
        `source_invoked`; every failure becomes an outcome (a buggy source must not take
        the request down)."""
        async with self._slots[name]:
            started = time.perf_counter()
            try:
                # paused while the call waits for a local worker: the source is timed, not us
                async with source_deadline(source.timeout_s):
                    items = _as_items(await source.search(query), name, "search")
                outcome = _Outcome("ok" if items else "empty", items, "" if items else "empty", "")
            except TimeoutError:
                outcome = _Outcome(
                    "timeout", [], "timeout", f"{name} took over {source.timeout_s}s"
                )
            except asyncio.CancelledError:
                _record_cut_off(name, query, started)
                raise
            except SourceError as exc:
                kind = "timeout" if exc.reason == "timeout" else "error"
                outcome = _Outcome(kind, [], exc.reason, str(exc))
            except Exception as exc:  # noqa: BLE001 - a buggy source must not take the request down
                outcome = _Outcome("error", [], "error", f"{type(exc).__name__}: {exc}")
            elapsed_ms = round((time.perf_counter() - started) * 1000.0, 3)
        fields: dict[str, object] = {}
        if outcome.outcome in ("error", "timeout"):
            fields = {"reason": outcome.reason, "message": outcome.message}
        record(
            Step.SOURCE_INVOKED,
            source=name,
            query=query,
            elapsed_ms=elapsed_ms,
            outcome=outcome.outcome,
            result_count=len(outcome.items),
            **fields,
        )
        return outcome

    async def _fuse(self, route: str, query: str) -> Answer:
        members = self.fusion[route]
        record(Step.FUSION, query=query, sources=list(members), route=route, method="rrf")
        outcomes = await asyncio.gather(*(self._call(name, query) for name in members))
        lists = [o.items for o in outcomes if o.outcome == "ok"]
        if lists:
            return Answer(route, "ok", reciprocal_rank_fusion(lists))
        if any(o.outcome == "empty" for o in outcomes):
            return Answer(route, "empty", [])
        last = outcomes[-1]
        return Answer(None, "error", [], {"type": last.reason, "message": last.message})


def _record_cut_off(
    name: str, query: str, started: float, consequence: str = "", **extra: Any
) -> None:
    """A source call the end of its request cut off (the deadline passed, the client went
    away): the chain still shows the call, for how long it had run, and, for a command,
    that it may have taken effect. `outcome` is `timeout`, as for any call that did not
    answer in time; `reason: cancelled` says which way it ended."""
    message = f"{name} had not answered when the request ended"
    record(
        Step.SOURCE_INVOKED,
        source=name,
        query=query,
        elapsed_ms=round((time.perf_counter() - started) * 1000.0, 3),
        outcome="timeout",
        result_count=0,
        **extra,
        reason="cancelled",
        message=f"{message}: {consequence}" if consequence else message,
    )


def _as_items(answer: object, name: str, operation: str) -> list[Item]:
    """What a source's `search` or `act` answered, when it is a list of items; otherwise a
    TypeError, which the call's outcome records as an error (a buggy source must neither
    take the request down nor go unrecorded, and its fallbacks are still tried)."""
    if isinstance(answer, list) and all(isinstance(item, Item) for item in answer):
        return answer
    raise TypeError(f"{name}.{operation} answered {type(answer).__name__}, not a list of items")
