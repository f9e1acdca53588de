"""The running service: sources, caches and the router built from config, and one request.

HTTP, the CLI and any other surface call `Service.search`; they differ only in how they
present its `SearchOutcome`. The route log is opened here, once per request, before any
fan-out; the response's `cached` and `fallback_occurred` are read from that same log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from routing.chain.events import FIELDS, RecordedChain, RouteLog, record, route_log
from routing.chain.steps import Step
from routing.dispatch.breaker import CircuitBreaker
from routing.dispatch.dispatcher import Dispatcher
from routing.pipeline import PartResult, Router, TooManyParts
from routing.shared_state import RedisLink, SharedBreaker, SharedCache
from routing.stages.build import build_resolver
from routing.stages.labels import HouseholdRouting
from routing.stages.resolver import Resolver
from routing.stages.sessions import SessionStore
from routing.ttl_cache import TTLCache
from search.config import Config, ConfigError
from search.correction import household as household_artefact
from search.deadlines import Deadlines
from search.observability.telemetry import current_trace_id
from search.scrub import Scrubber
from search.trace_ids import new_trace_id
from search.traces.records import RequestObserver, TraceRecord, TraceSink
from search.traces.store import open_trace_sink
from sources.base import Item, Source, SourceError
from sources.registry import kind_module

# A request its client cancelled before the answer (nginx's "client closed request"): only
# in the trace store, never sent, since nobody is there to read it.
CLIENT_CLOSED = 499

log = logging.getLogger("search")


def decode_items(data: Any) -> list[Item]:
    """Items back from the JSON the result cache keeps in Redis."""
    return [Item.from_dict(d) for d in data]


@dataclass(slots=True)
class SearchOutcome:
    """A finished request: HTTP status, response body, and the full recorded chain."""

    status_code: int
    body: dict[str, Any]
    trace_id: str
    recorded: RecordedChain
    results: list[PartResult] = field(default_factory=list)
    dropped_events: int = 0
    duration_ms: float = 0.0

    @property
    def chain(self) -> list[dict[str, Any]]:
        """The event dicts, built on first read (shared with the stored trace)."""
        return self.recorded.events()


class Service:
    """Everything one process needs to answer `/search`."""

    def __init__(
        self,
        config: Config,
        *,
        recorder: Callable[[int], RouteLog] = RouteLog,
        traces: TraceSink | None = None,
        wrap_source: Callable[[Source], Source] | None = None,
        observers: list[RequestObserver] | None = None,
        acting: bool = True,
        household: HouseholdRouting | None | Literal["data_dir"] = "data_dir",
    ) -> None:
        """`wrap_source` lets replay answer from captured results instead of live calls;
        `observers` (metrics, telemetry) see every finished request's recorded chain;
        with `acting` false (a replay) no command is ever carried out. `household`: the
        labels and weights `search fit` wrote (read from the data directory by default;
        None routes as shipped)."""
        self.config = config
        self.deadlines = Deadlines()  # each request's routing.request_deadline_s
        self.household: HouseholdRouting | None = (
            household_artefact.load(config) if household == "data_dir" else household
        )
        self._watch: asyncio.Task[None] | None = None
        self.recorder = recorder
        self.traces: TraceSink = traces or open_trace_sink(config.trace)
        self.observers: list[RequestObserver] = list(observers or [])
        self.sources: dict[str, Source] = {
            name: kind_module(entry.type).build(name, entry)
            for name, entry in config.sources.items()
            if entry.enabled
        }
        if wrap_source is not None:
            self.sources = {name: wrap_source(src) for name, src in self.sources.items()}
        self.scrubber = Scrubber.from_config(config)
        for source in self.sources.values():
            for method in ("search", "act"):
                if callable(getattr(source, method, None)):
                    self._log_unexpected(source, method, SourceError)
        self.result_cache: TTLCache[tuple[str, str], list[Item]] = TTLCache(
            config.cache.result_max_entries, config.cache.result_ttl_s
        )
        breakers = {
            name: CircuitBreaker(entry.circuit_failures, entry.circuit_cooldown_s)
            for name, entry in config.sources.items()
        }
        # Shared state (cache.redis_url): decisions, results and breakers through Redis.
        # Not for a replay (`wrap_source`): it must answer from its captures alone, and
        # must not publish them to the live workers.
        self.shared: RedisLink | None = None
        if config.cache.redis_url is not None and wrap_source is None:
            self.shared = RedisLink(
                config.cache.redis_url.get_secret_value(),
                prefix=config.cache.redis_key_prefix,
                timeout_s=config.cache.redis_timeout_s,
                retry_after_s=config.cache.redis_retry_after_s,
            )
        self.dispatcher = self._dispatcher(breakers, acting)
        self.resolver = self._resolver(self.household)
        self._log_unexpected(self.dispatcher, "answer")
        self.router = self._router(self.resolver)
        self._started_sources: list[Source] = []

    def _dispatcher(self, breakers: dict[str, CircuitBreaker], acting: bool) -> Dispatcher:
        """The dispatcher over this service's sources, caches and breakers (through Redis
        when the service has a link)."""
        config = self.config
        shared_results: SharedCache[tuple[str, str], list[Item]] | None = None
        shared_breakers: dict[str, SharedBreaker] | None = None
        if self.shared is not None:
            shared_results = SharedCache(
                self.shared,
                "result_cache",
                "result",
                self.result_cache,
                encode=lambda items: [item.to_dict() for item in items],
                decode=decode_items,
                key=lambda key: json.dumps(key, ensure_ascii=False, separators=(",", ":")),
            )
            shared_breakers = {
                name: SharedBreaker(
                    self.shared, name, breakers[name], config.sources[name].timeout_s + 1.0
                )
                for name in breakers
            }
        return Dispatcher(
            self.sources,
            fallbacks={name: entry.fallback for name, entry in config.sources.items()},
            fusion=config.routing.fusion,
            result_cache=self.result_cache,
            enabled={name: entry.enabled for name, entry in config.sources.items()},
            max_concurrency={n: e.max_concurrency for n, e in config.sources.items()},
            breakers=breakers,
            cache_ttl_s={name: entry.cache_ttl_s for name, entry in config.sources.items()},
            shared_results=shared_results,
            shared_breakers=shared_breakers,
            acting=acting,
        )

    def _router(self, resolver: Resolver) -> Router:
        return Router(
            resolver,
            self.dispatcher,
            self.config.routing.max_parts,
            time_sensitive=self.config.routing.time_sensitive,
            max_query_chars=self.config.server.max_query_chars,
        )

    def _resolver(
        self, household: HouseholdRouting | None, sessions: SessionStore | None = None
    ) -> Resolver:
        resolver = build_resolver(self.config, self.shared, household, sessions)
        self._log_unexpected(resolver, "resolve")
        return resolver

    @property
    def routing_name(self) -> str:
        """The artefact routing runs with, as the chain names it."""
        return self.household.name if self.household is not None else "shipped"

    async def reload_household(self) -> bool:
        """Route with the artefact now in the data directory, if it changed: the new
        resolver is built and started beside the running one, then swapped in, so a
        request in flight finishes with the routing it started with. False: unchanged,
        or unreadable (logged; the running routing stays)."""
        try:
            household = household_artefact.load(self.config)
        except ConfigError as exc:
            log.error("routing not reloaded: %s", exc)
            return False
        name = household.name if household is not None else "shipped"
        if name == self.routing_name:
            return False
        # The conversations in progress carry on under the new routing (a fit changes how
        # words are routed, not what was said); decisions cached by the old one do not.
        resolver = self._resolver(household, self.resolver.sessions)
        await resolver.start()
        old = self.resolver
        self.household, self.resolver = household, resolver
        self.router = self._router(resolver)
        await old.aclose()
        log.info("routing reloaded: %s", name)
        return True

    def watch_household(self, interval_s: float = 1.0) -> None:
        """Poll the data directory's artefact (a stat every `interval_s`) and reload routing
        when `search fit` rewrites it; the server calls this once it has started."""
        watch = household_artefact.ArtefactWatch(household_artefact.artefact_path(self.config))

        async def poll() -> None:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    if await asyncio.to_thread(watch.changed):
                        await self.reload_household()
                except Exception as exc:  # noqa: BLE001 - the watch must outlive one bad reload
                    log.error("routing reload failed: %s", self.scrubber.exception(exc))

        if self._watch is None:
            self._watch = asyncio.create_task(poll(), name="household-watch")

    def reset_routing_state(self) -> None:
        """Forget what earlier requests left behind: cached results and decisions, learned
        decisions, sessions, open circuits. A replay does this before each trace."""
        self.dispatcher.reset()
        self.resolver.reset()

    async def start(self, *, sources: bool = True) -> None:
        """Open sources and load the intent stages' models once, in the app's lifespan."""
        await self.resolver.start()
        if self.shared is not None:
            await self.shared.ping()  # logs (once) when Redis is unreachable
        if sources:
            for source in self.sources.values():
                await source.start()
                self._started_sources.append(source)
        await self.traces.start()

    async def aclose(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for source in self._started_sources:
            try:
                await source.aclose()
            except Exception as exc:  # noqa: BLE001 - closing must go on for the others
                log.error("closing source %s failed: %s", source.name, self.scrubber.exception(exc))
        self._started_sources.clear()
        if self.shared is not None:
            await self.shared.aclose()  # after its last background writes
        await self.resolver.aclose()
        await self.traces.aclose()

    def _log_unexpected(
        self, owner: Any, method: str, expected: type[Exception] | None = None
    ) -> None:
        """Log an exception escaping `owner.method` once, with its traceback, scrubbed.

        The dispatcher and the pipeline turn such exceptions into a part's error (they
        must not take the request down) and keep only the message; the traceback, which
        the operator needs, is logged here, where it is still at hand. `expected`
        failures (a source that is down) are outcomes, recorded as events: not logged.
        """
        call = getattr(owner, method)
        scrubber = self.scrubber

        async def logged(*args: Any, **kwargs: Any) -> Any:
            try:
                return await call(*args, **kwargs)
            except Exception as exc:
                if not (expected and isinstance(exc, expected)) and not getattr(
                    exc, "_search_logged", False
                ):
                    where = getattr(owner, "name", type(owner).__name__)
                    log.error(
                        "unexpected error in %s.%s: %s", where, method, scrubber.exception(exc)
                    )
                    try:
                        exc._search_logged = True  # type: ignore[attr-defined]
                    except AttributeError:  # an exception type with __slots__
                        pass
                raise

        setattr(owner, method, logged)

    def _scrub_chain(self, recorded: RecordedChain) -> None:
        """Messages in the recorded events, scrubbed before anything reads the chain."""
        for entry in recorded.entries:
            fields = entry[FIELDS]
            # few events have these (a captured LLM answer may echo the key it was sent)
            if "message" in fields or "detail" in fields or "raw_answer" in fields:
                for key in ("message", "detail", "raw_answer"):
                    value = fields.get(key)
                    if isinstance(value, str):
                        fields[key] = self.scrubber.text(value)

    def _scrub_result(self, result: dict[str, Any]) -> dict[str, Any]:
        if result.get("error"):
            result["error"] = self.scrubber.error(result["error"])
        if isinstance(result.get("condition"), dict):
            result["condition"] = self._scrub_result(result["condition"])
        return result

    async def _route(
        self,
        query: str,
        dry_run: bool,
        session_id: str | None,
        read_only: bool = False,
        explain: bool = False,
        authorized: bool = False,
        client: str | None = None,
    ) -> tuple[int, dict[str, str] | None, list[PartResult]]:
        """Run the router under the request deadline; (status, error, results).

        Must run inside the request's route log: the `error` event that ends a failed
        request is recorded here, last.
        """
        deadline_s = self.config.routing.request_deadline_s
        results: list[PartResult] = []
        error: dict[str, str] | None = None
        status_code = 200
        try:
            async with self.deadlines.after(deadline_s):
                results = await self.router.run(
                    query,
                    dry_run=dry_run,
                    session_id=session_id,
                    client=client,
                    read_only=read_only,
                    authorized=authorized,
                )
        except TooManyParts as exc:  # the surfaces check first; this is for any other caller
            status_code = 422
            error = {"type": "too_many_parts", "message": str(exc), "field": "query"}
        except TimeoutError:
            status_code = 504
            error = {
                "type": "deadline_exceeded",
                "message": f"the request deadline of {deadline_s:g}s passed",
            }
        except Exception as exc:  # noqa: BLE001 - the contract's 502, never a 500
            if not getattr(exc, "_search_logged", False):
                log.error("request failed: %s", self.scrubber.exception(exc))
            status_code = 502
            message = self.scrubber.text(str(exc) or type(exc).__name__)
            error = {"type": type(exc).__name__, "message": message}
        else:
            # a condition that was answered is an answer, even when its consequence failed
            answered = [p for r in results for p in (r, r.condition) if p is not None]
            if answered and all(p.status == "error" for p in answered):
                status_code = 502
                error = {
                    "type": "all_parts_failed",
                    "message": "every part of the query failed; "
                    + (
                        "see the explanation"
                        if explain
                        else "ask again with explain: true to see the chain"
                    ),
                }
        if error is not None:
            record(Step.ERROR, query=query, error_type=error["type"], message=error["message"])
        return status_code, error, results

    async def search(
        self,
        query: str,
        *,
        explain: bool = False,
        dry_run: bool = False,
        session_id: str | None = None,
        replay_of: str | None = None,
        read_only: bool = False,
        authorized: bool = False,
        client: str | None = None,
    ) -> SearchOutcome:
        """One request. `read_only`: the caller promised not to act (a read-only tool), so
        every command in it is withheld. `authorized`: the requester may act (the surface
        checked a token or that the client is on this machine); never by default.
        `client`: who the requester is as far as the server can tell (the HTTP surface
        passes the peer address): `session_id` names a conversation of that client's only.
        The trace keeps the `session_id` the client sent, so its turns are listed by it.

        A request cancelled on its way (the client went away, an MCP `cancelled`) is still
        traced, as status 499 with what it recorded so far (a command it may have sent
        among it), and the cancellation then goes on."""
        trace_id = new_trace_id()
        started_wall = time.time()
        trace_token = current_trace_id.set(trace_id)  # log records carry it (telemetry)
        cancelled: asyncio.CancelledError | None = None
        try:
            with route_log(self.config.routing.max_events, self.recorder) as chain_log:
                try:
                    status_code, error, results = await self._route(
                        query, dry_run, session_id, read_only, explain, authorized, client
                    )
                except asyncio.CancelledError as exc:
                    cancelled = exc
                    status_code, results = CLIENT_CLOSED, []
                    error = {"type": "cancelled", "message": "the request was cancelled"}
                    record(
                        Step.ERROR, query=query, error_type="cancelled", message=error["message"]
                    )
                recorded = chain_log.freeze()
                self._scrub_chain(recorded)
                dropped = chain_log.dropped_events
                past_bound = chain_log.dropped_summary() if dropped else None
                steps = chain_log.steps()
                cached = Step.RESULT_CACHE_HIT in steps
                fallback = Step.FALLBACK in steps
                duration_ms = round(chain_log.elapsed_ms(), 3)
        finally:
            current_trace_id.reset(trace_token)
        result_dicts = [self._scrub_result(r.to_dict()) for r in results]
        if error is None:
            body: dict[str, Any] = {
                "query": query,
                "trace_id": trace_id,
                "results": result_dicts,
                "cached": cached,
                "fallback_occurred": fallback,
                "dropped_events": dropped,
                "explanation": recorded.events() if explain else None,
            }
        else:
            body = {
                "error": error,
                "trace_id": trace_id,
                "dropped_events": dropped,
                "explanation": recorded.events() if explain else None,
            }
        outcome = SearchOutcome(
            status_code, body, trace_id, recorded, results, dropped, duration_ms
        )
        trace = TraceRecord(
            trace_id=trace_id,
            started_at=started_wall,
            query=query,
            status_code=status_code,
            duration_ms=duration_ms,
            chain=recorded,
            dropped_events=dropped,
            error=error,
            results=result_dicts,
            dry_run=dry_run,
            replay_of=replay_of,
            captures=chain_log.captures,
            session_id=session_id,
            dropped=past_bound,
        )
        self.traces.submit(trace)
        for observer in self.observers:
            try:
                observer.observe(trace)
            except Exception as exc:  # noqa: BLE001 - a broken exporter must not fail requests
                log.error("observer %r failed: %s", observer, self.scrubber.exception(exc))
        if cancelled is not None:
            raise cancelled
        return outcome
