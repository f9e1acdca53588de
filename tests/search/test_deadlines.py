"""Request deadlines: one timer per loop, with `asyncio.timeout`'s meaning."""

from __future__ import annotations

import asyncio
import threading

import pytest

from search.deadlines import Deadlines


async def test_a_request_past_its_deadline_raises_timeout_error() -> None:
    deadlines = Deadlines()
    started = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError):
        async with deadlines.after(0.05):
            await asyncio.sleep(5)
    assert 0.04 <= asyncio.get_running_loop().time() - started < 1.0


async def test_a_request_in_time_is_untouched_and_leaves_nothing_behind() -> None:
    deadlines = Deadlines()
    async with deadlines.after(5) as deadline:
        await asyncio.sleep(0)
    assert not deadline.expired
    (state,) = deadlines._loops.values()
    assert state.in_flight == {}


async def test_a_shorter_deadline_entered_later_still_expires_on_time() -> None:
    """The timer is armed for the earliest deadline in flight, not the first entered."""
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    ended: dict[str, float] = {}

    async def request(name: str, seconds: float, sleep: float) -> None:
        started = loop.time()
        try:
            async with deadlines.after(seconds):
                await asyncio.sleep(sleep)
        except TimeoutError:
            ended[name] = loop.time() - started

    long = asyncio.create_task(request("long", 3.0, 10))
    await asyncio.sleep(0.01)
    await request("short", 0.05, 10)
    assert ended["short"] < 0.5
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long


async def test_many_requests_each_expire_at_their_own_deadline() -> None:
    """Requests ending early leave the armed timer behind; the rest still expire."""
    deadlines = Deadlines()
    outcomes: list[str] = []

    async def request(seconds: float, sleep: float) -> None:
        try:
            async with deadlines.after(seconds):
                await asyncio.sleep(sleep)
            outcomes.append("done")
        except TimeoutError:
            outcomes.append("timed out")

    await asyncio.gather(
        request(0.03, 0.0),  # ends first, before the timer armed for it fires
        request(0.06, 0.01),
        request(0.08, 1.0),
        request(0.1, 1.0),
        request(1.0, 0.02),
    )
    assert sorted(outcomes) == ["done", "done", "done", "timed out", "timed out"]


async def test_a_cancellation_from_elsewhere_is_not_turned_into_a_timeout() -> None:
    deadlines = Deadlines()

    async def request() -> None:
        async with deadlines.after(5):
            await asyncio.sleep(10)

    task = asyncio.create_task(request())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_expired_request_that_is_also_cancelled_stays_cancelled() -> None:
    """As with asyncio.timeout: a second cancel request wins over the deadline."""
    deadlines = Deadlines()
    entered = asyncio.Event()

    async def request() -> None:
        async with deadlines.after(0.02):
            entered.set()
            try:
                await asyncio.sleep(10)
            finally:
                asyncio.current_task().cancel()  # type: ignore[union-attr]
                await asyncio.sleep(0)

    task = asyncio.create_task(request())
    await entered.wait()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_loops_in_two_threads_keep_their_own_timers() -> None:
    deadlines = Deadlines()
    results: list[str] = []

    def run() -> None:
        async def main() -> None:
            try:
                async with deadlines.after(0.05):
                    await asyncio.sleep(5)
            except TimeoutError:
                results.append("timed out")

        asyncio.run(main())

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert results == ["timed out", "timed out"]


def test_a_closed_loops_state_is_dropped() -> None:
    deadlines = Deadlines()

    async def main() -> None:
        async with deadlines.after(1):
            pass

    asyncio.run(main())
    asyncio.run(main())
    assert len(deadlines._loops) == 1
