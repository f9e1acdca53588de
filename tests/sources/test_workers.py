"""The worker pools: bounded, separate, carrying the request context; and a source's
deadline that does not count the wait for a worker.

Blocking work is held on `threading.Event` gates that the test opens itself, so what runs
when is decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from routing.chain.events import part_scope, record, route_log
from sources.workers import (
    INFERENCE,
    SOURCES,
    WorkerPool,
    pool,
    run_source_work,
    source_deadline,
)

WAIT_S = 10.0  # bound on every wait for a thread to get somewhere: never reached when correct


class Gate:
    """Blocking work that holds its worker until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.started = threading.Semaphore(0)
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0

    def work(self, value: str = "") -> str:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        self.started.release()
        try:
            assert self.opened.wait(WAIT_S), "the test never opened the gate"
            return value
        finally:
            with self.lock:
                self.active -= 1

    async def wait_started(self, count: int) -> None:
        for _ in range(count):
            assert await asyncio.to_thread(self.started.acquire, True, WAIT_S)


@pytest.fixture
def gate() -> Iterator[Gate]:
    gate = Gate()
    try:
        yield gate
    finally:
        gate.opened.set()  # never leave a pool's workers blocked for the next test


async def test_work_runs_in_the_callers_context() -> None:
    def blocking(query: str) -> str:
        record("in_worker", query=query)
        return threading.current_thread().name

    with route_log() as log, part_scope("1.0"):
        name = await WorkerPool("test", 1).run(blocking, "q")
    assert name.startswith("test-worker")
    [event] = log.snapshot()
    assert event["step"] == "in_worker" and event["part"] == "1.0" and event["query"] == "q"


async def test_a_pool_runs_at_most_its_size_at_once(gate: Gate) -> None:
    workers = WorkerPool("bounded", 2)
    tasks = [asyncio.ensure_future(workers.run(gate.work, str(i))) for i in range(6)]
    await gate.wait_started(2)
    # A third would start at once on an unbounded pool; give it ample time to show up.
    assert not await asyncio.to_thread(gate.started.acquire, True, 0.2)
    assert gate.active == 2
    gate.opened.set()
    assert await asyncio.gather(*tasks) == [str(i) for i in range(6)]
    assert gate.peak == 2


async def test_a_busy_inference_pool_does_not_hold_up_source_work(gate: Gate) -> None:
    inference = pool(INFERENCE)
    held = [asyncio.ensure_future(inference.run(gate.work)) for _ in range(inference.workers)]
    queued = [asyncio.ensure_future(inference.run(gate.work)) for _ in range(20)]
    await gate.wait_started(inference.workers)
    # every inference worker is held and twenty more encodes wait: a source call still runs
    assert await asyncio.wait_for(pool(SOURCES).run(lambda: "answered"), WAIT_S) == "answered"
    assert not any(task.done() for task in held + queued)
    gate.opened.set()
    await asyncio.gather(*held, *queued)


async def test_waiting_for_a_worker_does_not_count_against_the_deadline(gate: Gate) -> None:
    workers = WorkerPool("one", 1)
    busy = asyncio.ensure_future(workers.run(gate.work))
    await gate.wait_started(1)

    async def source_call() -> str:
        async with source_deadline(1.0):
            return await workers.run(lambda: "ran")

    call = asyncio.ensure_future(source_call())
    await asyncio.sleep(2.0)  # twice the source's deadline, all of it queued
    assert not call.done(), "the wait for a worker was counted against the source"
    gate.opened.set()
    assert await asyncio.wait_for(call, WAIT_S) == "ran"
    await busy


async def test_the_deadline_runs_while_the_worker_runs() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with source_deadline(0.2):
            await WorkerPool("slow", 1).run(time.sleep, 1.5)
    assert time.monotonic() - started < 1.4  # it did not wait for the work to end


async def test_an_answer_waiting_on_a_busy_event_loop_is_not_a_timeout() -> None:
    """The worker answers at once, but the loop is busy past the deadline before it comes
    round to the answer (a flood of requests): the deadline's timer fires in that same turn
    of the loop, and used to beat the answer. The source was not slow; the process was."""
    running, answer = threading.Event(), threading.Event()

    def work() -> int:
        running.set()
        answer.wait(5)
        return 42

    async def busy_loop() -> None:
        await asyncio.to_thread(running.wait, 5)
        await asyncio.sleep(0.05)  # the worker's start is on the loop's books
        answer.set()
        time.sleep(0.4)  # the loop is blocked: the worker answers, the deadline passes

    hog = asyncio.ensure_future(busy_loop())
    async with source_deadline(0.2):
        assert await run_source_work(work) == 42
    await hog


async def test_time_spent_before_the_wait_still_counts() -> None:
    """The pause keeps what was left of the deadline: 0.15 s before plus 0.25 s of work
    overruns a 0.3 s deadline."""
    with pytest.raises(TimeoutError):
        async with source_deadline(0.3):
            await asyncio.sleep(0.15)
            await WorkerPool("rest", 1).run(time.sleep, 0.25)


async def test_the_request_deadline_still_ends_a_call_stuck_in_the_queue(gate: Gate) -> None:
    workers = WorkerPool("stuck", 1)
    busy = asyncio.ensure_future(workers.run(gate.work))
    await gate.wait_started(1)
    ran: list[str] = []
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):  # the request's deadline: it never pauses
            async with source_deadline(60.0):
                await workers.run(ran.append, "late")
    gate.opened.set()
    await busy
    await asyncio.sleep(0)  # the queued call was withdrawn, never run
    assert ran == []


async def test_work_started_by_a_task_that_outlives_its_source_call_still_runs() -> None:
    workers = WorkerPool("after", 1)
    async with source_deadline(5.0):
        later = asyncio.ensure_future(asyncio.sleep(0.05))  # copies the call's context
        task = asyncio.ensure_future(later)
        outliving = asyncio.ensure_future(_after(task, workers))
    assert await asyncio.wait_for(outliving, WAIT_S) == "ran after the call"


async def _after(first: asyncio.Future[None], workers: WorkerPool) -> str:
    await first
    return await workers.run(lambda: "ran after the call")
