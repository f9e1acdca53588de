"""The routing pipeline (`routing.pipeline.Router`): parts, conditions, and what each part
ends as, over the real dispatcher and scripted sources (see tests/support/scripted.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from routing.chain.events import route_log
from routing.pipeline import PartResult, Router, TooManyParts
from routing.types import Decision, ResolveContext
from search.service import Service
from tests.support.app import scripted_config


async def run(
    router: Router, query: str, **options: Any
) -> tuple[list[PartResult], list[dict[str, Any]]]:
    with route_log() as log:
        results = await router.run(query, **options)
        return results, log.freeze().events()


def service(
    sources: dict[str, dict[str, Any]], keywords: dict[str, list[str]], **routing: Any
) -> Service:
    return Service(scripted_config(sources, keywords=keywords, **routing))


class CountingResolver:
    """Routes by the first word; counts every resolve, and fails on the word 'boom'."""

    sessions = None  # no conversation memory: no follow-up rewriting

    def __init__(self, routes: dict[str, str | None]) -> None:
        self.routes = routes
        self.calls: list[str] = []

    def keyword_claims(self) -> None:
        return None

    def stage(self, name: str) -> None:
        return None  # no semantic stage: the time words alone are read

    async def resolve(self, text: str, context: ResolveContext) -> Decision:
        self.calls.append(text)
        if text.startswith("boom"):
            raise RuntimeError("the resolver broke")
        first = text.split()[0]
        return Decision(self.routes.get(first, "kiwix"), "intent_keyword")


def router_over(resolver: CountingResolver, svc: Service, max_parts: int | None = None) -> Router:
    return Router(resolver, svc.dispatcher, max_parts)  # type: ignore[arg-type]


async def test_over_max_parts_is_refused_before_any_part_is_resolved() -> None:
    svc = service({"kiwix": {}}, {})
    resolver = CountingResolver({})
    router = router_over(resolver, svc, max_parts=2)
    assert router.check_parts("one thing; another thing") == 2
    with pytest.raises(TooManyParts) as refused:
        await run(router, "one; two; three")
    assert (refused.value.parts, refused.value.limit) == (3, 2)
    assert resolver.calls == []
    assert svc.sources["kiwix"].calls == 0  # type: ignore[attr-defined]


def counting_checks(router: Router) -> list[str]:
    """The queries `router.check_parts` is asked about, from here on."""
    checked: list[str] = []
    original = router.check_parts

    def counted(query: str) -> int:
        checked.append(query)
        return original(query)

    router.check_parts = counted  # type: ignore[method-assign]
    return checked


async def test_the_part_count_is_checked_once_per_request() -> None:
    """A surface checks first (to refuse before anything is loaded or traced); `run` does
    not check the same query again in that request, and checks any other."""
    router = router_over(CountingResolver({}), service({"kiwix": {}}, {}), max_parts=2)
    checked = counting_checks(router)
    router.check_parts("one thing; another thing")  # the surface's check
    await run(router, "one thing; another thing")
    assert checked == ["one thing; another thing"]
    await run(router, "a third thing")  # no surface checked it: `run` does
    assert checked == ["one thing; another thing", "a third thing"]


async def test_a_check_in_another_request_does_not_count() -> None:
    router = router_over(CountingResolver({}), service({"kiwix": {}}, {}), max_parts=2)
    checked = counting_checks(router)
    # another request (its own task, so its own context) checked the same words
    await asyncio.create_task(_check(router, "one; two"))
    with pytest.raises(TooManyParts):
        await run(router, "one; two; three")
    await run(router, "one; two")
    assert checked == ["one; two", "one; two; three", "one; two"]


async def _check(router: Router, query: str) -> None:
    router.check_parts(query)


async def test_a_leading_condition_counts_as_one_part() -> None:
    router = router_over(CountingResolver({}), service({"kiwix": {}}, {}), max_parts=2)
    assert router.check_parts("if it rains tomorrow, is the window open; who wrote hamlet") == 2


async def test_results_come_in_part_order_however_the_parts_finish() -> None:
    svc = service({"kiwix": {}, "slow": {"delay_s": 0.2}}, {})
    router = router_over(CountingResolver({"slowly": "slow"}), svc)
    results, events = await run(router, "slowly first; quickly second; quickly third")
    assert [r.query for r in results] == ["slowly first", "quickly second", "quickly third"]
    assert [r.source for r in results] == ["slow", "kiwix", "kiwix"]
    invoked = [e["part"] for e in events if e["step"] == "source_invoked"]
    assert invoked[-1] == "0"  # the slow first part really finished last


async def test_a_part_whose_routing_breaks_is_an_error_and_the_others_answer() -> None:
    router = router_over(CountingResolver({}), service({"kiwix": {}}, {}))
    results, events = await run(router, "boom goes this; who wrote hamlet")
    assert [r.status for r in results] == ["error", "ok"]
    assert results[0].error == {"type": "RuntimeError", "message": "the resolver broke"}
    errors = [e for e in events if e["step"] == "error"]
    assert [(e["part"], e["error_type"]) for e in errors] == [("0", "RuntimeError")]


async def test_a_part_no_source_serves_calls_nothing() -> None:
    svc = service({"kiwix": {}}, {})
    router = router_over(CountingResolver({"set": None}), svc)
    (result,), events = await run(router, "set an alarm for six")
    assert (result.status, result.source, result.stage) == ("unserved", None, "intent_keyword")
    assert not [e for e in events if e["step"] == "source_invoked"]
    assert svc.sources["kiwix"].calls == 0  # type: ignore[attr-defined]


async def test_a_dry_run_plans_each_part_with_its_stage() -> None:
    svc = service({"kiwix": {}, "ha": {}}, {"ha": ["lights"]})
    results, events = await run(svc.router, "lights status; who wrote hamlet", dry_run=True)
    assert [(r.status, r.route) for r in results] == [("planned", "ha"), ("planned", "kiwix")]
    assert results[0].to_dict()["stage"] == "intent_keyword"
    planned = [(e["part"], e["route"]) for e in events if e["step"] == "planned"]
    assert sorted(planned) == [("0", "ha"), ("1", "kiwix")]
    assert svc.sources["ha"].calls == svc.sources["kiwix"].calls == 0  # type: ignore[attr-defined]


async def test_a_condition_rides_with_its_consequence_and_the_remainder_follows() -> None:
    svc = service({"kiwix": {}, "forecast": {}, "ha": {}}, {"forecast": ["rain"], "ha": ["window"]})
    results, events = await run(
        svc.router, "if it rains tomorrow, is the window open. who wrote hamlet"
    )
    parts = {e["part"] for e in events if e["step"] == "source_invoked"}
    consequence = results[0]
    assert consequence.source == "ha" and consequence.condition is not None
    assert consequence.condition.source == "forecast"
    assert "0.0" in parts and "0.1" in parts  # the condition, then the consequence
    [detected] = [e for e in events if e["step"] == "conditional_detected"]
    assert (detected["condition"], detected["remainder"]) == (
        "it rains tomorrow",
        "who wrote hamlet",
    )
    assert consequence.to_dict()["condition"]["source"] == "forecast"
    assert [(r.query, r.source) for r in results[1:]] == [("who wrote hamlet", "kiwix")]
    assert "1" in parts  # the remainder: a part of its own, after the conditional


async def test_a_parts_confidence_is_the_one_its_deciding_event_states() -> None:
    """The result and the chain say the same number (events state four places)."""
    svc = service({"kiwix": {}, "web": {}}, {"web": ["news", "latest"]})
    outcome = await svc.search("latest news and also the history of rome", explain=True)
    for result in outcome.body["results"]:
        part = next(
            e
            for e in reversed(outcome.body["explanation"])
            if e["step"].startswith("intent_") and e["query"] == result["query"]
        )
        assert result["confidence"] == part["confidence"]
        assert result["confidence"] == round(result["confidence"], 4)
