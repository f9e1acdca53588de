"""The compiled `record` (routing/chain/_fastrecord.c) does what the Python reference does.

Every other test of the channel runs whichever `record` the package has (the compiled one
where it was built); these hold the two side by side, and check what only C can get
wrong: references kept or lost, and a clock that is not `time.perf_counter`'s.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from routing.chain import events
from routing.chain.events import NullRouteLog, Recorder, part_scope, record_in_python, route_log

try:
    from routing.chain import _fastrecord
except ImportError:  # built without a compiler: only the Python reference exists
    _fastrecord = None  # type: ignore[assignment]

IMPLEMENTATIONS: list[Any] = [pytest.param(record_in_python, id="python")]
if _fastrecord is not None:
    IMPLEMENTATIONS.append(pytest.param(_fastrecord.record, id="compiled"))


def test_the_package_records_with_the_compiled_function() -> None:
    if _fastrecord is None:
        if os.environ.get("CI") == "true":
            pytest.fail("routing.chain._fastrecord was not built (make install compiles it)")
        pytest.skip("not under CI, built without a C compiler: the Python reference records")
    assert events.FAST_RECORD and events.record is _fastrecord.record


def _chain(record: Recorder, max_events: int = 100) -> events.RouteLog:
    with route_log(max_events) as log:
        record("decomposed", query="q", parts=["a", "b"])
        with part_scope("1"):
            record("intent_keyword", query="b", decision="ha", confidence=0.9)
        record("no_fields")
    return log


@pytest.mark.parametrize("record", IMPLEMENTATIONS)
def test_entries_have_the_same_layout(record: Recorder) -> None:
    reference = _chain(record_in_python).entries
    entries = _chain(record).entries
    assert [entry[1:] for entry in entries] == [entry[1:] for entry in reference]
    assert [type(entry) for entry in entries] == [tuple] * 3
    assert entries[1][3] == {"query": "b", "decision": "ha", "confidence": 0.9}
    assert entries[2][3] == {}


@pytest.mark.parametrize("record", IMPLEMENTATIONS)
def test_its_times_are_perf_counter_times(record: Recorder) -> None:
    with route_log() as log:
        before = time.perf_counter()
        record("step")
        after = time.perf_counter()
    assert before <= log.entries[0][0] <= after
    assert 0.0 <= log.snapshot()[0]["t_ms"] <= (after - log.started) * 1000.0 + 0.001


@pytest.mark.parametrize("record", IMPLEMENTATIONS)
def test_past_the_bound_only_what_must_be_kept_is_kept(record: Recorder) -> None:
    with route_log(max_events=2) as log:
        for n in range(5):
            record("step", n=n)
        record("error", query="q", error_type="X", message="m")
    assert [e["step"] for e in log.snapshot()] == ["step", "step", "error"]
    assert log.snapshot()[-1]["seq"] == 5 and log.dropped_events == 3


@pytest.mark.parametrize("record", IMPLEMENTATIONS)
def test_outside_a_request_and_into_the_null_log_nothing_is_kept(record: Recorder) -> None:
    record("error", query="q", error_type="X", message="m")
    with route_log(factory=NullRouteLog) as log:
        record("step", n=1)
    assert log.snapshot() == [] and log.dropped_events == 0


@pytest.mark.parametrize("record", IMPLEMENTATIONS)
def test_a_call_without_its_step_is_refused_like_the_reference(record: Recorder) -> None:
    call: Callable[..., None] = record
    with route_log() as log:
        with pytest.raises(TypeError):
            call()
        with pytest.raises(TypeError):
            call("step", "extra positional")
    assert log.entries == []


@pytest.mark.parametrize("record", IMPLEMENTATIONS)
def test_references_are_released_with_the_log(record: Recorder) -> None:
    value = object()
    step = "a step name of its own"
    baseline = sys.getrefcount(value), sys.getrefcount(step)
    for _ in range(3):
        with route_log(max_events=50) as log:
            for _ in range(100):  # half past the bound: counted, not kept
                record(step, value=value)
        assert len(log.entries) == 50
        del log
        gc.collect()
    assert (sys.getrefcount(value), sys.getrefcount(step)) == baseline
