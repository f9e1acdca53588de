"""The world stage (routing.stages.world): a question sure to be the snapshot's or the live
route's, but not which, is placed by whether its answer changes with time.

The reading it is handed is the router's (routing.dispatch.live); here a fixed reading
stands in for it, so each test says exactly what the stage was told.
"""

from __future__ import annotations

from typing import Any

import pytest

from routing.chain.events import route_log
from routing.stages.confidence import Ranked
from routing.stages.world import TimeReading, WorldStage
from routing.types import ResolveContext

QUESTION = "when is the next eclipse"


def reading(sensitive: bool, likely: float, probability: float | None = 0.9) -> Any:
    asked: list[str] = []

    async def read(text: str, embedding: Any) -> TimeReading:
        asked.append(text)
        return TimeReading(sensitive, likely, "kiwix", "web", None, "model", probability)

    read.asked = asked  # type: ignore[attr-defined]
    return read


def declined(*routes: tuple[str, float]) -> ResolveContext:
    return ResolveContext(ranked=Ranked(routes))


async def test_a_time_sensitive_question_goes_live_with_the_pair_times_the_reading() -> None:
    stage = WorldStage(0.55, reading(True, 0.9))
    context = declined(("kiwix", 0.45), ("web", 0.40), ("none", 0.15))
    with route_log() as log:
        decision = await stage.decide(QUESTION, context)
    assert decision is not None
    assert (decision.route, decision.stage) == ("web", "intent_world")
    assert decision.confidence == pytest.approx(0.85 * 0.9, abs=1e-4)
    # what it beat: the pair split by the reading, the rest as the declining stage ranked
    assert decision.ranked is not None
    assert [r for r, _ in decision.ranked.routes] == ["web", "none", "kiwix"]
    assert sum(p for _, p in decision.ranked.routes) == pytest.approx(1.0, abs=1e-3)
    (event,) = log.snapshot()
    assert event["step"] == "intent_world"
    assert (event["decision"], event["world"], event["time_sensitive"]) == ("web", 0.85, True)
    assert event["confidence"] == decision.confidence
    assert event["candidates"][0]["route"] == "web"


async def test_a_fixed_answer_goes_to_the_snapshot() -> None:
    stage = WorldStage(0.55, reading(False, 0.95, probability=0.05))
    decision = await stage.decide(QUESTION, declined(("web", 0.5), ("kiwix", 0.45), ("ha", 0.05)))
    assert decision is not None and decision.route == "kiwix"
    assert decision.confidence == pytest.approx(0.95 * 0.95, abs=1e-4)


@pytest.mark.parametrize(
    ("routes", "likely"),
    [
        ((("kiwix", 0.3), ("none", 0.5), ("web", 0.2)), 0.99),  # the pair is not sure enough
        ((("kiwix", 0.4), ("web", 0.3), ("none", 0.3)), 0.6),  # sure of the pair, not of time
    ],
)
async def test_it_declines_below_min_confidence_and_records_nothing(
    routes: tuple[tuple[str, float], ...], likely: float
) -> None:
    stage = WorldStage(0.55, reading(True, likely))
    with route_log() as log:
        assert await stage.decide(QUESTION, declined(*routes)) is None
    assert log.snapshot() == []


async def test_it_does_not_read_what_earlier_stages_settled_or_could_not_read() -> None:
    read = reading(True, 0.99)
    stage = WorldStage(0.55, read)
    pair = (("kiwix", 0.5), ("web", 0.5))
    assert await stage.decide(QUESTION, ResolveContext()) is None  # no stage ranked it
    assert await stage.decide(QUESTION, ResolveContext(ranked=Ranked(pair), unserved=True)) is None
    gibberish = ResolveContext(ranked=Ranked(pair), unknown_words=3)
    assert await stage.decide("zxq vbnm", gibberish) is None
    assert read.asked == []
    assert await WorldStage(0.55).decide(QUESTION, declined(*pair)) is None  # no reading wired


async def test_no_reading_means_no_decision() -> None:
    async def nothing(text: str, embedding: Any) -> None:
        return None

    stage = WorldStage(0.55, nothing)
    assert await stage.decide(QUESTION, declined(("kiwix", 0.5), ("web", 0.5))) is None
