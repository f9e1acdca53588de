"""State shared by workers and replicas through Redis, degrading to each process's own.

Why: under `search serve --workers N` (or several replicas) every process has its own
memory. Without sharing, a routing decision the LLM made in one worker is asked again in
the next, a result is fetched once per worker, and a dead source is called N times as
often before every worker's circuit opens.

- `RedisLink`: the one client of a Service, with the rules every call follows: a short
  timeout on each call; a failure (timeout, refused, auth, a bad reply) makes the caller
  use its local state, records `shared_state_degraded` (component, reason) right there,
  at most once per request and component, and starts a back-off during which Redis is
  not tried at all (requests then record reason `backoff`), so a dead Redis costs one
  timeout per back-off, not one per request. Nothing here raises into a request.
- `SharedCache`: the Redis tier behind a local `TTLCache` (two tiers: local in front).
  A local miss asks Redis; a hit is kept locally for the entry's remaining lifetime.
  Writes go to the local cache at once and to Redis in the background (JSON values, the
  Redis TTL is the entry's TTL), so a write never delays a response. An entry that
  cannot be used (another version's, too big, too deep to parse) is a miss.
- `SharedBreaker`: a circuit breaker whose state lives in Redis (consecutive failures by
  INCR, open-until by SET PX, the half-open probe by SET NX as a lock so one worker in
  all probes), keeping its local `CircuitBreaker` up to date as the fallback.

`redis` is imported only when a Service is configured with `cache.redis_url`: without it
none of this is built, and the local paths never await anything here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from routing.chain.events import current_log, record
from routing.chain.steps import Step
from routing.dispatch.breaker import Admission, CircuitBreaker
from routing.ttl_cache import TTLCache

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

log = logging.getLogger("search.shared_state")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")

MAX_PENDING_WRITES: Final = 1000  # background writes beyond this are dropped, not queued
# Breaker keys that only matter while a source keeps failing expire this long after the
# last failure, so a source nobody asks about again leaves nothing behind in Redis.
STALE_AFTER_S: Final = 3600.0
# What a shared entry may hold. Redis is shared with whoever can reach it: an entry larger
# than anything this code writes is refused as a miss, not parsed and served. A result
# entry is one source's items, and no source returns more than its `max_results` (at most
# 200, Home Assistant's bound); decisions and turns are small objects.
MAX_VALUE_ITEMS: Final = 200
MAX_VALUE_BYTES: Final = 4 * 1024 * 1024


class _Unavailable:
    """The result of a Redis call that was not made or failed: use local state."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNAVAILABLE"


UNAVAILABLE: Final = _Unavailable()


def failure_reason(exc: BaseException) -> str:
    """A stable code for why a Redis call failed (never its message: it may name hosts)."""
    from redis import exceptions as rx

    if isinstance(exc, (TimeoutError, rx.TimeoutError)):
        return "timeout"
    if isinstance(exc, rx.AuthenticationError) or (
        isinstance(exc, rx.ResponseError) and str(exc).startswith(("NOAUTH", "WRONGPASS"))
    ):
        return "auth_error"
    if isinstance(exc, (rx.ConnectionError, OSError)):
        return "connection_error"
    if isinstance(exc, rx.ResponseError):
        return "response_error"
    return "error"


class RedisLink:
    """One Redis client and the timeout / back-off / event rules every call obeys."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "search:",
        timeout_s: float = 0.2,
        retry_after_s: float = 5.0,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # No client-side retries: a failed call falls back to local state at once, and
        # the back-off decides when Redis is tried again.
        self.client: Redis = Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self._now = now
        self._retry_at = 0.0  # while now < _retry_at, Redis is not tried
        self._down_reason: str | None = None
        self._pending: set[asyncio.Task[Any]] = set()

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    @property
    def degraded(self) -> bool:
        """Whether the last Redis call failed (and no later one succeeded)."""
        return self._down_reason is not None

    def usable(self, component: str) -> bool:
        """Whether Redis may be tried now; in the back-off, notes the request as degraded."""
        if self._down_reason is None:
            return True
        now = self._now()
        left = self._retry_at - now
        if left <= 0:
            # One trial call; until it is answered (one timeout at most) the other calls
            # stay local, so a Redis still dead costs one timeout per back-off in all.
            self._retry_at = now + self.timeout_s
            return True
        self.note(component, "backoff", retry_in_s=round(left, 3))
        return False

    async def call(self, component: str, op: Callable[[Redis], Awaitable[T]]) -> T | _Unavailable:
        """`op(client)` under the timeout, or UNAVAILABLE (noted where it failed)."""
        if not self.usable(component):
            return UNAVAILABLE
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await op(self.client)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - Redis never fails a request
            self._failed(component, exc)
            return UNAVAILABLE
        if self._down_reason is not None:
            log.info("shared state: Redis answers again; sharing resumed")
            self._down_reason = None
        return result

    def spawn(self, component: str, op: Callable[[Redis], Awaitable[Any]]) -> None:
        """Run `call(component, op)` in the background (a write nobody waits for)."""
        if not self.usable(component):
            return
        if len(self._pending) >= MAX_PENDING_WRITES:
            log.debug("shared state: %d writes pending; dropping one", len(self._pending))
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside the event loop (a worker thread): local only
            log.debug("shared state: no event loop here; the write stays local")
            return
        task = loop.create_task(self.call(component, op))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        """Wait for the background writes started so far."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def ping(self) -> bool:
        """Check Redis at start-up (logged, not recorded: there is no request yet)."""
        ok = await self.call("startup", lambda client: client.ping())
        return ok is not UNAVAILABLE

    async def aclose(self) -> None:
        try:
            async with asyncio.timeout(max(1.0, 5 * self.timeout_s)):
                await self.drain()
        except TimeoutError:
            for task in list(self._pending):
                task.cancel()
        try:
            await self.client.aclose()
        except Exception:
            log.debug("shared state: closing the Redis client failed", exc_info=True)

    def note(self, component: str, reason: str, **fields: Any) -> None:
        """Record `shared_state_degraded` once per request and component."""
        request_log = current_log()
        if request_log is None:
            return
        if request_log.happened(Step.SHARED_STATE_DEGRADED) and any(
            e["step"] == Step.SHARED_STATE_DEGRADED and e.get("component") == component
            for e in request_log.snapshot()
        ):
            return
        record(Step.SHARED_STATE_DEGRADED, component=component, reason=reason, **fields)

    def _failed(self, component: str, exc: BaseException) -> None:
        reason = failure_reason(exc)
        self._retry_at = self._now() + self.retry_after_s
        if self._down_reason is None:
            log.warning(
                "shared state: Redis call failed (%s, %s); using local state, retrying in %gs",
                reason,
                type(exc).__name__,
                self.retry_after_s,
            )
        self._down_reason = reason
        self.note(component, reason, retry_in_s=self.retry_after_s)


class SharedCache(Generic[K, V]):
    """The Redis tier behind a local TTLCache: asked on a local miss, written through."""

    def __init__(
        self,
        link: RedisLink,
        component: str,
        namespace: str,
        local: TTLCache[K, V],
        *,
        encode: Callable[[V], Any],
        decode: Callable[[Any], V],
        key: Callable[[K], str] = str,
    ) -> None:
        self.link = link
        self.component = component
        self.namespace = namespace
        self.local = local
        self._encode = encode
        self._decode = decode
        self._key = key
        self._bounded_script: AsyncScript | None = None

    def redis_key(self, key: K) -> str:
        return self.link.key(self.namespace, self._key(key))

    def caches(self, ttl_s: float | None) -> bool:
        """Whether entries with this lifetime (None: the cache's) are cached at all."""
        return self.local.max_entries > 0 and (self.local.ttl_s if ttl_s is None else ttl_s) > 0

    async def fetch(
        self, key: K, ttl_s: float | None = None, *, keep_locally: bool = True
    ) -> V | None:
        """The entry from Redis (kept locally for its remaining lifetime unless
        `keep_locally` is false), or None.

        `ttl_s` is the lifetime entries of this kind get (None: the cache's): when it is 0
        they are never cached, and Redis is not asked.
        """
        if not self.caches(ttl_s):
            return None
        name = self.redis_key(key)

        async def op(client: Redis) -> list[Any]:
            async with client.pipeline(transaction=False) as pipe:
                pipe.get(name)
                pipe.pttl(name)
                return await pipe.execute()

        got = await self.link.call(self.component, op)
        if isinstance(got, _Unavailable) or got[0] is None:
            return None
        raw, ttl_ms = got
        value = self._decoded(raw)
        if value is None:
            return None
        if not keep_locally:
            return value
        # Kept locally for what is left of its life in Redis, never past our own lifetime.
        limit = self.local.ttl_s if ttl_s is None else ttl_s
        left = ttl_ms / 1000.0 if isinstance(ttl_ms, int) and ttl_ms > 0 else limit
        self.local.set(key, value, min(left, limit))
        return value

    def _decoded(self, raw: Any) -> V | None:
        """The value an entry holds, or None when it is unusable: written by another
        version, for a route this process does not have, or by no process of ours (too
        big, too long a list, nested too deep to parse). Any failure is a miss, never an
        error: whatever is in Redis must not fail a request, and the miss's fresh answer
        overwrites the entry."""
        try:
            if len(raw) > MAX_VALUE_BYTES:
                raise ValueError(f"{len(raw)} bytes")
            data = json.loads(raw)
            if isinstance(data, list) and len(data) > MAX_VALUE_ITEMS:
                raise ValueError(f"{len(data)} items")
            return self._decode(data)
        except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError, a bad shape...
            log.debug(
                "shared state: unusable %s entry ignored (%s)", self.namespace, type(exc).__name__
            )
            return None

    def publish(self, key: K, value: V, ttl_s: float | None = None) -> None:
        """Write the entry to Redis in the background, to live `ttl_s` (default: the cache's)."""
        written = self._payload(value, ttl_s)
        if written is None:
            return
        payload, ttl_ms = written
        name = self.redis_key(key)
        self.link.spawn(self.component, lambda client: client.set(name, payload, px=ttl_ms))

    def publish_within(self, key: K, value: V, group: str, keep: int) -> None:
        """`publish`, keeping at most `keep` entries of `group` in Redis: writing one more
        deletes the group's entries written longest ago, in the same atomic step (one
        client's sessions: flooding new ones cannot grow Redis past `keep` of them)."""
        written = self._payload(value, None)
        if written is None or keep <= 0:
            return
        payload, ttl_ms = written
        name, index = self.redis_key(key), self.link.key(self.namespace + "-index", group)
        script = self._bounded_script
        if script is None:
            script = self._bounded_script = self.link.client.register_script(_BOUNDED_SCRIPT)
        self.link.spawn(
            self.component, lambda client: script(keys=[name, index], args=[payload, ttl_ms, keep])
        )

    def _payload(self, value: V, ttl_s: float | None) -> tuple[str, int] | None:
        """The entry as Redis holds it and its lifetime in ms; None when it is not shared
        (not cached at all, or too big for any reader to take: kept locally only)."""
        if not self.caches(ttl_s):
            return None
        ttl = self.local.ttl_s if ttl_s is None else ttl_s
        data = self._encode(value)
        payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        too_long = isinstance(data, list) and len(data) > MAX_VALUE_ITEMS
        if too_long or len(payload.encode("utf-8")) > MAX_VALUE_BYTES:
            log.debug("shared state: %s entry too big to share", self.namespace)
            return None
        return payload, max(1, int(ttl * 1000))

    async def discard_prefix(self, prefix: str) -> None:
        """Delete every shared entry whose key starts with `prefix` (the encoded key, e.g.
        one source's results after it changed something). Awaited, not spawned: a read
        that follows must not find what this removes."""
        pattern = self.link.key(self.namespace, _glob_escape(prefix)) + "*"

        async def op(client: Redis) -> None:
            batch: list[Any] = []
            async for name in client.scan_iter(match=pattern, count=500):
                batch.append(name)
                if len(batch) >= 500:
                    await client.delete(*batch)
                    batch.clear()
            if batch:
                await client.delete(*batch)

        await self.link.call(self.component, op)


def _glob_escape(text: str) -> str:
    """`text` as a literal inside a Redis MATCH pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


# KEYS: the entry, its group's index (a sorted set of the group's entry keys by write
# time). ARGV: payload, ttl_ms, keep. The index forgets members whose entries have expired,
# then the oldest beyond `keep`, deleting their entries; it lives as long as its newest
# entry. Redis's own clock (TIME), so workers' clocks need not agree. The evicted entries
# are named by the index, not in KEYS: a single Redis, as `cache.redis_url` is.
_BOUNDED_SCRIPT = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ttl_ms = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl_ms)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms - ttl_ms)
redis.call('ZADD', KEYS[2], now_ms, KEYS[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if over > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, over - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
  redis.call('DEL', unpack(old))
end
redis.call('PEXPIRE', KEYS[2], ttl_ms)
return over
"""

# KEYS: failures, open, tripped, probe. ARGV: stale_ms, threshold, cooldown_ms.
# One failure: count it; open the circuit when the count reaches the threshold or when it
# had already opened (a failed probe, or a call admitted before it opened).
_FAILED_SCRIPT = """
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if n >= tonumber(ARGV[2]) or redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[1])
  redis.call('DEL', KEYS[4])
  return 1
end
return 0
"""


class SharedBreaker:
    """A source's circuit in Redis, so every worker skips (and probes) it together.

    Keys under `<prefix>breaker:<source>:`: `failures` (consecutive, INCR), `open` (SET
    PX cool-down: its PTTL is the time left), `tripped` (it opened and no call has
    succeeded since: once `open` expires, the circuit is half-open), `probe` (SET NX PX:
    the one worker that probes). The local breaker is told everything too, and decides
    alone while Redis is unavailable.
    """

    component: Final = "breaker"

    def __init__(self, link: RedisLink, source: str, local: CircuitBreaker, probe_s: float) -> None:
        self.link = link
        self.local = local
        self.probe_ms = max(1, int(probe_s * 1000))
        self._failures = link.key("breaker", source, "failures")
        self._open = link.key("breaker", source, "open")
        self._tripped = link.key("breaker", source, "tripped")
        self._probe = link.key("breaker", source, "probe")
        self._script = link.client.register_script(_FAILED_SCRIPT)
        # Whether the last look at Redis found failures on record: a success then has
        # something to reset; otherwise (the usual case) it costs no Redis call.
        self._failures_seen = False

    async def admit(self) -> Admission:
        if self.local.failure_threshold <= 0:
            return Admission(True)

        async def state(client: Redis) -> list[Any]:
            async with client.pipeline(transaction=False) as pipe:
                pipe.pttl(self._open)
                pipe.exists(self._tripped)
                pipe.exists(self._failures)
                return await pipe.execute()

        got = await self.link.call(self.component, state)
        if isinstance(got, _Unavailable):
            return self.local.admit()
        open_ms, tripped, failures = got
        self._failures_seen = bool(tripped or failures)
        if open_ms > 0 or open_ms == -1:  # -1: no expiry (never set so); treat as a full cool-down
            left = open_ms / 1000.0 if open_ms > 0 else self.local.cooldown_s
            return Admission(False, time_left_s=round(left, 3))
        if not tripped:
            return Admission(True)
        won = await self.link.call(
            self.component, lambda client: client.set(self._probe, "1", nx=True, px=self.probe_ms)
        )
        if isinstance(won, _Unavailable):
            return self.local.admit()
        if won:
            return Admission(True, probe=True)
        return Admission(False, time_left_s=0.0)  # another worker is probing

    async def succeeded(self) -> None:
        reset = self._failures_seen or self.local.failures > 0
        self.local.succeeded()
        if not reset:
            return
        done = await self.link.call(
            self.component,
            lambda client: client.delete(self._failures, self._open, self._tripped, self._probe),
        )
        if not isinstance(done, _Unavailable):
            self._failures_seen = False

    async def failed(self) -> None:
        self.local.failed()
        if self.local.failure_threshold <= 0:
            return
        keys = [self._failures, self._open, self._tripped, self._probe]
        args = [
            int(STALE_AFTER_S * 1000),
            self.local.failure_threshold,
            max(1, int(self.local.cooldown_s * 1000)),
        ]
        self._failures_seen = True
        await self.link.call(self.component, lambda client: self._script(keys=keys, args=args))
