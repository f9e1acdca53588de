"""Request deadlines that cost a dictionary entry each, not a loop timer each.

`asyncio.timeout` arms a timer per request and cancels it when the request ends in time,
which nearly every request does; on a cache hit the timer is a sizeable share of the
request, and every cancelled handle stays in the loop's heap until it is due or the heap
is rebuilt. `Deadlines` keeps the requests in flight on each loop and one timer there,
always armed at or before the earliest of their deadlines: a request that ends in time
removes its entry and touches no timer; when the timer fires, it cancels the requests
past their deadline and re-arms for the earliest of the rest. Expiry is as exact as
`asyncio.timeout`'s, and so is its meaning: the task is cancelled, and the block raises
`TimeoutError` unless someone else cancelled the task too.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class _Loop:
    """What one event loop's requests share: those in flight, and the timer."""

    __slots__ = ("loop", "in_flight", "timer", "armed_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.in_flight: dict[Deadline, None] = {}  # an ordered set
        self.timer: asyncio.TimerHandle | None = None
        self.armed_at = float("inf")

    def arm(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_at(when, self.fire)
        self.armed_at = when

    def fire(self) -> None:
        self.timer, self.armed_at = None, float("inf")
        now = self.loop.time()
        earliest = float("inf")
        for deadline in list(self.in_flight):
            if deadline.when <= now:
                del self.in_flight[deadline]
                deadline.expire()
            elif deadline.when < earliest:
                earliest = deadline.when
        if earliest != float("inf"):
            self.arm(earliest)


class Deadlines:
    """A source of per-request deadlines (`async with deadlines.after(s):`), one per
    service. Safe across event loops and threads: each loop has its own state."""

    __slots__ = ("_loops",)

    def __init__(self) -> None:
        self._loops: dict[asyncio.AbstractEventLoop, _Loop] = {}

    def after(self, seconds: float) -> Deadline:
        return Deadline(self, seconds)

    def _state(self, loop: asyncio.AbstractEventLoop) -> _Loop:
        state = self._loops.get(loop)
        if state is None:
            for old in list(self._loops):  # a copy: another thread's loop may add itself
                if old.is_closed():
                    self._loops.pop(old, None)  # a finished loop's requests ended with it
            state = self._loops[loop] = _Loop(loop)
        return state


class Deadline:
    """One request's deadline, `seconds` after the block is entered."""

    __slots__ = ("_deadlines", "_seconds", "_state", "_task", "_cancelling", "when", "expired")

    def __init__(self, deadlines: Deadlines, seconds: float) -> None:
        self._deadlines = deadlines
        self._seconds = seconds
        self.expired = False

    async def __aenter__(self) -> Deadline:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a deadline must be entered inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        state = self._state = self._deadlines._state(loop)
        self.when = loop.time() + self._seconds
        state.in_flight[self] = None
        if self.when < state.armed_at:
            state.arm(self.when)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._state.in_flight.pop(self, None)  # the timer finds it gone; nothing to cancel
        if (
            self.expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc

    def expire(self) -> None:
        self.expired = True
        self._task.cancel()
