"""Bounded worker pools for blocking work, one per kind of work, carrying the request context.

Why separate pools: were source calls (libzim reads) and model inference (sentence
embeddings) to share asyncio's default thread pool, a single FIFO queue, a burst of
embedding work would queue kiwix calls behind it: they would time out and open kiwix's
circuit breaker, and every client's requests would fail for the cooldown. Each kind has
its own bounded pool (`SOURCES`, `INFERENCE`): inference waits only for inference, a source call only for
source calls.

Why the deadline pauses: a source's timeout measures the source, not this process's own
queue. `source_deadline(timeout_s)` is the timeout around one source call; while that call
waits for a free worker of a pool, its deadline is paused, and it goes on from the moment
a worker starts running the call, with what was left of it. It pauses again from the moment
the worker has answered until the call has the answer: a busy event loop may take seconds
to come round to it, and that is this process's time too. The request's own deadline is
another timeout and never pauses, so a pool that never frees up still ends the request.

Work runs in a copy of the caller's context (`contextvars`), so events recorded in the
worker reach the request's log and part, as with `asyncio.to_thread`.

The module lives in `sources/`, the bottom layer, so sources can use it without importing
`routing`; `routing` uses it too.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

SOURCES = "sources"
INFERENCE = "inference"


def _default_sizes() -> dict[str, int]:
    cores = os.cpu_count() or 1
    # Source calls mostly wait (on disk, a socket, a book's lock): more workers than cores.
    # Inference is CPU-bound: more concurrent encodes than cores only slows each one down.
    return {SOURCES: 16, INFERENCE: max(1, min(4, cores))}


class _Clock:
    """The deadline of one source call, paused while its work waits for a worker.

    Touched only from the event loop's thread (workers reach it through
    `call_soon_threadsafe`), so it needs no lock. Calls of one source call that wait at
    once share one pause: the clock runs again when the last of them has a worker.
    """

    __slots__ = ("timeout", "waiting", "remaining")

    def __init__(self, timeout: asyncio.Timeout) -> None:
        self.timeout = timeout
        self.waiting = 0
        self.remaining = 0.0

    def pause(self, since: float | None = None) -> bool:
        """Stop the deadline for one waiting call, as from `since` (the loop's clock; now
        by default); False when there is nothing to stop."""
        if self.waiting == 0:
            when = self.timeout.when()
            if when is None or self.timeout.expired():
                return False
            at = asyncio.get_running_loop().time() if since is None else since
            remaining = max(0.0, when - at)
            try:
                self.timeout.reschedule(None)
            except RuntimeError:  # its call has ended: work a task it started outlives it
                return False
            self.remaining = remaining
        self.waiting += 1
        return True

    def resume(self, started: float) -> None:
        """A waiting call got its worker at `started` (the loop's clock, `time.monotonic`)."""
        self.waiting -= 1
        if self.waiting == 0:
            try:
                self.timeout.reschedule(started + self.remaining)
            except RuntimeError:  # the call already ended (cancelled by the request)
                pass


_clock: contextvars.ContextVar[_Clock | None] = contextvars.ContextVar(
    "source_deadline", default=None
)


class source_deadline:  # noqa: N801 - used like asyncio.timeout: `async with source_deadline(5):`
    """`asyncio.timeout(seconds)` for one source call, paused while it waits for a worker.

    Raises `TimeoutError` on expiry, as `asyncio.timeout` does.
    """

    __slots__ = ("_timeout", "_token")

    def __init__(self, seconds: float | None) -> None:
        self._timeout = asyncio.timeout(seconds)

    async def __aenter__(self) -> source_deadline:
        await self._timeout.__aenter__()
        self._token = _clock.set(_Clock(self._timeout))
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        _clock.reset(self._token)
        await self._timeout.__aexit__(*exc_info)


class _Resume:
    """Tells the waiting call's clock, once, that a worker started running the call."""

    __slots__ = ("clock", "loop", "done")

    def __init__(self, clock: _Clock, loop: asyncio.AbstractEventLoop) -> None:
        self.clock = clock
        self.loop = loop
        self.done = False

    def from_worker(self) -> None:
        started = time.monotonic()  # what the loop's `time()` reads
        try:
            self.loop.call_soon_threadsafe(self.on_loop, started)
        except RuntimeError:  # the loop is closed: nobody waits for the answer
            pass

    def on_loop(self, started: float) -> None:
        if not self.done:
            self.done = True
            self.clock.resume(started)


class _Delivery:
    """Pauses the waiting call's clock from the moment its worker finished until the call
    has its answer: the answer waits on this process's event loop then, not on the source.
    A busy loop (a flood of requests) can take seconds to come round to it, and the
    deadline's timer, which fires in the same turn of the loop, would otherwise call a
    source that answered in a millisecond too slow. The worker's message is queued before
    that turn's timers run, so the pause it asks for stops the timer in time."""

    __slots__ = ("clock", "loop", "paused", "done")

    def __init__(self, clock: _Clock, loop: asyncio.AbstractEventLoop) -> None:
        self.clock = clock
        self.loop = loop
        self.paused = False
        self.done = False

    def from_worker(self) -> None:
        finished = time.monotonic()  # what the loop's `time()` reads
        try:
            self.loop.call_soon_threadsafe(self.on_loop, finished)
        except RuntimeError:  # the loop is closed: nobody waits for the answer
            pass

    def on_loop(self, finished: float) -> None:
        if not self.done:
            self.paused = self.clock.pause(since=finished)

    def collected(self, now: float) -> None:
        """The call has its answer (or was cancelled): the clock runs again from `now`."""
        self.done = True
        if self.paused:
            self.paused = False
            self.clock.resume(now)


class WorkerPool:
    """A bounded pool of threads for one kind of blocking work."""

    def __init__(self, name: str, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"worker pool {name!r}: workers must be at least 1")
        self.name = name
        self.workers = workers
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=f"{name}-worker")

    async def run(self, func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`func(*args, **kwargs)` in a worker, in a copy of the caller's context.

        Inside `source_deadline`, the time spent waiting for a free worker does not count
        against that deadline.
        """
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        clock = _clock.get()
        resume = _Resume(clock, loop) if clock is not None and clock.pause() else None
        delivery = _Delivery(clock, loop) if clock is not None else None

        def work() -> T:
            if resume is not None:
                resume.from_worker()
            try:
                return context.run(func, *args, **kwargs)
            finally:
                if delivery is not None:
                    delivery.from_worker()

        try:
            return await loop.run_in_executor(self._executor, work)
        finally:
            if resume is not None and not resume.done:
                # Never started (cancelled while queued): give back the pause. If the
                # worker did start, its message is already on the loop's queue and this
                # `done` flag makes that message a no-op.
                resume.on_loop(loop.time())
            if delivery is not None:
                delivery.collected(loop.time())

    def shutdown(self) -> None:
        """No new work; the threads end once the work already given them is done."""
        self._executor.shutdown(wait=False)


_POOLS: dict[str, WorkerPool] = {}
_SIZES: dict[str, int] = _default_sizes()
_LOCK = threading.Lock()


def pool(name: str) -> WorkerPool:
    """The process-wide pool `name` (`SOURCES`, `INFERENCE`), made on first use."""
    found = _POOLS.get(name)
    if found is not None:
        return found
    with _LOCK:
        found = _POOLS.get(name)
        if found is None:
            if name not in _SIZES:
                raise KeyError(f"unknown worker pool {name!r}")
            found = _POOLS[name] = WorkerPool(name, _SIZES[name])
        return found


async def run_source_work(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Blocking work of a source call (a libzim read) in the `SOURCES` pool."""
    return await pool(SOURCES).run(func, *args, **kwargs)


async def run_inference(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Model work (encoding text) in the `INFERENCE` pool."""
    return await pool(INFERENCE).run(func, *args, **kwargs)
