"""The route-event channel: events arrive from any depth and never cross requests."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

from routing.chain.events import (
    Entry,
    NullRouteLog,
    bind_context,
    current_log,
    current_part,
    part_scope,
    record,
    route_log,
    run_in_thread,
)


def test_record_outside_a_request_is_a_no_op() -> None:
    assert current_log() is None
    record("decomposed", query="x", parts=["x"])  # must not raise
    with part_scope("1"):
        assert current_part() == "1"
        record("error", query="x", error_type="X", message="m")  # even one always kept
    assert current_log() is None
    with route_log() as log:
        pass
    assert log.snapshot() == [] and log.dropped_events == 0


async def test_events_from_gathered_parts_arrive_with_their_part() -> None:
    async def part(path: str) -> None:
        with part_scope(path):
            record("intent_keyword", query=path)
            await asyncio.sleep(0.001)
            record("source_invoked", query=path)

    with route_log() as log:
        record("decomposed", query="q", parts=["a", "b", "c"])
        await asyncio.gather(part("0"), part("1"), part("2"))
    events = log.snapshot()
    assert [e["seq"] for e in events] == list(range(7))
    assert events[0]["part"] == ""
    for path in ("0", "1", "2"):
        mine = [e for e in events if e["part"] == path]
        assert [e["step"] for e in mine] == ["intent_keyword", "source_invoked"]
        assert all(e["query"] == path for e in mine)
    times = [e["t_ms"] for e in events]
    assert times == sorted(times)


async def test_events_from_a_worker_thread_arrive() -> None:
    def blocking(tag: str) -> str:
        record("worker", tag=tag, thread=threading.get_ident())
        return tag

    with route_log() as log, part_scope("1.0"):
        assert await run_in_thread(blocking, "t") == "t"
    (event,) = log.snapshot()
    assert event["step"] == "worker"
    assert event["part"] == "1.0"
    assert event["thread"] != threading.get_ident()


async def test_run_in_executor_loses_events_unless_the_context_is_bound() -> None:
    """The trap `run_in_thread` exists for: a bare executor does not carry the context."""

    def blocking() -> None:
        record("worker")

    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1) as pool, route_log() as log:
        await loop.run_in_executor(pool, blocking)
        assert log.snapshot() == []
        await loop.run_in_executor(pool, bind_context(blocking))
    assert [e["step"] for e in log.snapshot()] == ["worker"]


async def test_nested_calls_record_into_the_same_log() -> None:
    async def deep(n: int) -> None:
        if n:
            await deep(n - 1)
        else:
            record("deep")

    with route_log() as log:
        await deep(20)
    assert [e["step"] for e in log.snapshot()] == ["deep"]


async def test_concurrent_requests_never_share_events() -> None:
    async def request(tag: int) -> list[dict]:
        with route_log() as log:
            for step in range(5):
                record("step", tag=tag, n=step)
                await asyncio.sleep(0)
            return log.snapshot()

    chains = await asyncio.gather(*(request(i) for i in range(50)))
    for tag, chain in enumerate(chains):
        assert len(chain) == 5
        assert {e["tag"] for e in chain} == {tag}


async def test_the_log_is_bounded_and_counts_what_it_dropped() -> None:
    with route_log(max_events=10) as log:
        for n in range(25):
            record("result_cache_hit" if n == 20 else "step", n=n)
        record("error", query="q", error_type="X", message="m")
    assert len(log.snapshot()) == 11  # 10 kept + the error, which is always kept
    assert log.dropped_events == 15
    assert log.snapshot()[-1]["step"] == "error"
    assert log.snapshot()[-1]["seq"] == 25  # its true ordinal, counting the dropped ones
    # The statistics still see the dropped cache hit.
    assert log.happened("result_cache_hit")
    assert not log.happened("fallback")
    assert log.steps() == {"step", "result_cache_hit", "error"}


def test_a_frozen_chain_keeps_what_was_recorded_by_then() -> None:
    with route_log() as log:
        record("first", n=1)
        frozen = log.freeze()
        record("late", n=2)  # a worker thread finishing after the answer was built
    assert [e["step"] for e in frozen.events()] == ["first"]
    first = Entry(*frozen.entries[0])
    assert first.step == "first" and first.seq is None
    assert [e["step"] for e in log.snapshot()] == ["first", "late"]


def test_the_null_recorder_keeps_nothing() -> None:
    with route_log(factory=NullRouteLog) as log:
        record("step")
    assert log.snapshot() == []


def test_the_log_is_unset_after_the_request() -> None:
    ctx = contextvars.copy_context()
    with route_log():
        assert current_log() is not None
    assert current_log() is None
    assert ctx.run(current_log) is None


async def test_threads_and_tasks_recording_at_once_lose_and_duplicate_nothing() -> None:
    def burst(tag: str) -> None:
        for n in range(500):
            record("worker", tag=tag, n=n)

    async def task_burst(tag: str) -> None:
        for n in range(500):
            record("task", tag=tag, n=n)
            if n % 50 == 0:
                await asyncio.sleep(0)

    with route_log(max_events=10_000) as log:
        await asyncio.gather(
            *(run_in_thread(burst, f"t{i}") for i in range(4)),
            *(task_burst(f"a{i}") for i in range(2)),
        )
    chain = log.snapshot()
    assert len(chain) == 3000 and log.dropped_events == 0
    assert [e["seq"] for e in chain] == list(range(3000))
    for tag in ("t0", "t1", "t2", "t3", "a0", "a1"):
        assert [e["n"] for e in chain if e["tag"] == tag] == list(range(500))
