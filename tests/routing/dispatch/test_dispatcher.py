"""Result cache, timed source calls, fallback chains and fusion, as recorded events."""

from __future__ import annotations

import asyncio

import pytest

from routing.dispatch.dispatcher import expand_chain
from routing.dispatch.fusion import reciprocal_rank_fusion
from routing.ttl_cache import TTLCache
from search.config import ConfigError
from search.service import Service
from sources.base import Item
from tests.support.app import assert_contract_event, scripted_config


def steps(chain: list[dict]) -> list[str]:
    return [e["step"] for e in chain]


async def ask(service: Service, query: str, **kwargs):
    outcome = await service.search(query, explain=True, **{"authorized": True, **kwargs})
    for event in outcome.chain:
        assert_contract_event(event)
    return outcome


@pytest.mark.parametrize(
    ("fault", "outcome", "reason"),
    [
        ("error", "error", "error"),
        ("unavailable", "error", "connection_refused"),
        ("crash", "error", "error"),
        ("not-items", "error", "error"),  # a buggy source answering None: recorded, stood in for
        ("hang", "timeout", "timeout"),
        ("empty", "empty", "empty"),
    ],
)
async def test_fallback_fires_on_each_failure(fault: str, outcome: str, reason: str) -> None:
    config = scripted_config(
        {
            "backup": {},
            "primary": {"fail": fault, "timeout_s": 0.2, "fallback": ["backup"]},
        },
        keywords={"primary": ["lights"]},
    )
    service = Service(config)
    await service.start()
    result = await ask(service, "lights status")
    assert result.status_code == 200
    invoked = [e for e in result.chain if e["step"] == "source_invoked"]
    assert [(e["source"], e["outcome"]) for e in invoked] == [
        ("primary", outcome),
        ("backup", "ok"),
    ]
    if fault == "hang":
        assert 150 <= invoked[0]["elapsed_ms"] < 2000
    (fallback,) = [e for e in result.chain if e["step"] == "fallback"]
    assert fallback["from_source"] == "primary"
    assert fallback["to_source"] == "backup"
    assert fallback["reason"] == reason
    assert steps(result.chain) == ["intent_keyword", "source_invoked", "fallback", "source_invoked"]
    assert result.body["fallback_occurred"] is True
    assert result.body["results"][0]["source"] == "backup"


async def test_a_fallback_stands_in_for_its_source_only_not_for_its_fallbacks() -> None:
    """`a -> b` and `b -> c`: a part routed to `a` tries `a`, then `b`, and stops. `c` is
    b's stand-in on b's questions (web's kiwix), not an answer to a's (a weather question)."""
    config = scripted_config(
        {
            "a": {"fail": "error", "fallback": ["b"]},
            "b": {"fail": "empty", "fallback": ["c"]},
            "c": {},
        }
    )
    service = Service(config)
    result = await ask(service, "anything")
    moves = [(e["from_source"], e["to_source"]) for e in result.chain if e["step"] == "fallback"]
    assert moves == [("a", "b")]
    assert [e["source"] for e in result.chain if e["step"] == "source_invoked"] == ["a", "b"]
    assert result.body["results"][0]["status"] == "empty"
    assert result.body["results"][0]["items"] == []


async def test_a_route_that_lists_the_whole_chain_gets_it() -> None:
    config = scripted_config(
        {
            "a": {"fail": "error", "fallback": ["b", "c"]},
            "b": {"fail": "empty", "fallback": ["c"]},
            "c": {},
        }
    )
    result = await ask(Service(config), "anything")
    moves = [
        (e["from_source"], e["to_source"], e["reason"])
        for e in result.chain
        if e["step"] == "fallback"
    ]
    assert moves == [("a", "b", "error"), ("b", "c", "empty")]
    assert result.body["results"][0]["source"] == "c"


async def test_an_exhausted_chain_fails_the_part_with_an_error_event_last() -> None:
    config = scripted_config(
        {"a": {"fail": "error", "fallback": ["b"]}, "b": {"fail": "unavailable"}}
    )
    service = Service(config)
    result = await ask(service, "anything")
    assert result.status_code == 502
    assert result.body["error"]["type"] == "all_parts_failed"
    assert steps(result.chain)[-1] == "error"
    assert result.chain[-1]["part"] == ""
    part_errors = [e for e in result.chain if e["step"] == "error" and e["part"] == "0"]
    assert part_errors and part_errors[0]["error_type"] == "connection_refused"
    assert "source_invoked" in steps(result.chain)


async def test_only_empty_answers_give_status_empty() -> None:
    service = Service(scripted_config({"a": {"fail": "empty"}}))
    result = await ask(service, "anything")
    assert result.status_code == 200
    assert result.body["results"][0]["status"] == "empty"
    assert result.body["results"][0]["items"] == []


async def test_a_disabled_source_is_skipped_and_its_chain_used() -> None:
    config = scripted_config(
        {"kiwix": {}, "ha": {"enabled": False, "fallback": ["kiwix"]}},
        keywords={"ha": ["lights"]},
    )
    service = Service(config)
    result = await ask(service, "lights status")
    assert steps(result.chain) == ["intent_keyword", "source_skipped", "fallback", "source_invoked"]
    assert result.chain[1]["reason"] == "disabled"
    assert result.body["results"][0]["source"] == "kiwix"


async def test_result_cache_hit_is_recorded_and_reported() -> None:
    service = Service(scripted_config({"a": {}}))
    first = await ask(service, "Lights  status")
    assert first.body["cached"] is False
    second = await ask(service, "lights status")
    assert steps(second.chain) == ["intent_default", "result_cache_hit"]
    assert second.body["cached"] is True
    assert second.body["results"] == [
        {**r, "query": "lights status"} for r in first.body["results"]
    ]
    assert service.sources["a"].calls == 1


def test_the_ttl_cache_expires_and_evicts_least_recently_used() -> None:
    clock = [0.0]
    cache: TTLCache[str, int] = TTLCache(2, 10.0, now=lambda: clock[0])
    cache.set("a", 1)
    cache.set("b", 2)
    assert cache.get("a") == 1
    cache.set("c", 3)  # evicts b, the least recently used
    assert cache.get("b") is None and cache.get("a") == 1
    clock[0] = 10.5
    assert cache.get("a") is None and len(cache) == 1


def test_asking_whether_the_ttl_cache_holds_a_key_leaves_its_order() -> None:
    clock = [0.0]
    cache: TTLCache[str, int] = TTLCache(2, 10.0, now=lambda: clock[0])
    cache.set("a", 1)
    cache.set("b", 2)
    assert cache.holds("a") and not cache.holds("z")
    cache.set("c", 3)  # a is still the least recently used: holds() did not touch it
    assert not cache.holds("a") and cache.holds("b")
    clock[0] = 10.5
    assert not cache.holds("b") and not cache.holds("c")


async def test_fusion_fans_out_and_merges_by_reciprocal_rank() -> None:
    config = scripted_config(
        {"kiwix": {"items": 2}, "web": {"items": 3}, "down": {"fail": "error"}},
        keywords={"both": ["tell"]},
        fusion={"both": ["kiwix", "web", "down"]},
    )
    service = Service(config)
    result = await ask(service, "tell me about tides")
    fusion = [e for e in result.chain if e["step"] == "fusion"]
    assert fusion[0]["sources"] == ["kiwix", "web", "down"]
    invoked = {e["source"]: e["outcome"] for e in result.chain if e["step"] == "source_invoked"}
    assert invoked == {"kiwix": "ok", "web": "ok", "down": "error"}
    part = result.body["results"][0]
    assert part["source"] == "both" and part["status"] == "ok"
    titles = [item["title"] for item in part["items"]]
    # Rank 1 of each list first, then rank 2s, then web's rank 3.
    assert titles[0].startswith(("kiwix #0", "web #0")) and titles[1].startswith(
        ("kiwix #0", "web #0")
    )
    assert titles[-1].startswith("web #2") and len(titles) == 5


def test_rrf_rewards_items_found_by_several_lists() -> None:
    shared = Item("Tides", "t", "http://x/tides")
    fused = reciprocal_rank_fusion(
        [[Item("A", "a", "http://a"), shared], [Item("B", "b", "http://b"), shared]]
    )
    assert fused[0] == shared


def test_expand_chain_is_the_source_then_its_own_list_each_once() -> None:
    graph = {"ha": ["web", "kiwix", "web"], "web": ["kiwix", "forecast"], "kiwix": []}
    assert expand_chain("ha", graph) == ["ha", "web", "kiwix"]
    assert expand_chain("web", graph) == ["web", "kiwix", "forecast"]
    assert expand_chain("kiwix", graph) == ["kiwix"]


async def test_two_sources_may_stand_in_for_each_other() -> None:
    """Two mirrors of one encyclopedia, each the other's fallback: allowed, and a part
    routed to either tries both once."""
    config = scripted_config(
        {"a": {"fail": "unavailable", "fallback": ["b"]}, "b": {"fallback": ["a"]}}
    )
    result = await ask(Service(config), "anything")
    assert [e["source"] for e in result.chain if e["step"] == "source_invoked"] == ["a", "b"]
    assert result.body["results"][0]["source"] == "b"


def test_a_source_naming_itself_as_its_fallback_is_rejected_at_start_up() -> None:
    with pytest.raises(ConfigError, match=r"sources\.a\.fallback: 'a' names itself"):
        scripted_config({"a": {"fallback": ["a"]}})


async def test_events_recorded_in_a_source_worker_thread_reach_the_chain() -> None:
    service = Service(scripted_config({"a": {"record_in_thread": True}}))
    result = await ask(service, "one; two")
    workers = [e for e in result.chain if e["step"] == "worker_thread"]
    assert sorted((e["part"], e["query"]) for e in workers) == [("0", "one"), ("1", "two")]


async def test_the_circuit_opens_after_n_failures_then_a_probe_closes_it() -> None:
    config = scripted_config(
        {
            "kiwix": {},
            "ha": {
                "fail": "unavailable",
                "fallback": ["kiwix"],
                "circuit_failures": 2,
                "circuit_cooldown_s": 0.2,
            },
        },
        keywords={"ha": ["lights"]},
    )
    service = Service(config)
    ha = service.sources["ha"]
    for n in range(2):
        result = await ask(service, f"lights {n}")
        assert [e["step"] for e in result.chain][1] == "source_invoked"
    skipped = await ask(service, "lights 2")
    event = skipped.chain[1]
    assert event["step"] == "source_skipped" and event["reason"] == "circuit_open"
    assert 0 < event["time_left_s"] <= 0.2
    assert skipped.chain[2]["step"] == "fallback" and skipped.chain[2]["reason"] == "circuit_open"
    assert ha.calls == 2
    await asyncio.sleep(0.25)
    ha.config = ha.config.model_copy(update={"fail": None})  # the source recovered
    probe = await ask(service, "lights 3")
    assert [e["step"] for e in probe.chain] == ["intent_keyword", "source_invoked"]
    assert probe.body["results"][0]["source"] == "ha"
    closed = await ask(service, "lights 4")
    assert closed.chain[1]["step"] == "source_invoked" and ha.calls == 4


def test_a_failed_probe_reopens_the_circuit() -> None:
    from routing.dispatch.breaker import CircuitBreaker

    clock = [0.0]
    breaker = CircuitBreaker(2, 10.0, now=lambda: clock[0])
    breaker.failed()
    assert breaker.admit().allowed
    breaker.failed()
    assert not breaker.admit().allowed and breaker.state == "open"
    clock[0] = 10.0
    first, second = breaker.admit(), breaker.admit()
    assert first.allowed and first.probe and not second.allowed  # one probe at a time
    breaker.failed()
    assert breaker.state == "open" and breaker.admit().time_left_s == 10.0


def test_asking_whether_a_probe_would_go_through_lets_none_through() -> None:
    from routing.dispatch.breaker import CircuitBreaker

    clock = [0.0]
    breaker = CircuitBreaker(1, 10.0, now=lambda: clock[0])
    breaker.failed()
    assert not breaker.would_admit().allowed  # open
    clock[0] = 10.0
    assert breaker.would_admit().probe and breaker.would_admit().probe  # asked twice
    assert breaker.admit().probe  # the probe is still there for a real call
    assert not breaker.would_admit().allowed  # and while it runs, a plan sees none


async def test_state_changing_calls_are_never_served_from_the_cache() -> None:
    config = scripted_config(
        {"ha": {"control_prefix": "turn", "allow_control": True}}, keywords={"ha": ["turn off"]}
    )
    service = Service(config)
    for _ in range(2):
        result = await ask(service, "turn off the kitchen light")
        assert "result_cache_hit" not in steps(result.chain)
    assert len(service.sources["ha"].acted) == 2
    status = [await ask(service, "kitchen light status") for _ in range(2)]
    assert "result_cache_hit" in steps(status[1].chain)
    assert service.sources["ha"].calls == 1


async def test_a_source_can_opt_out_of_the_result_cache() -> None:
    service = Service(scripted_config({"ha": {"cache_ttl_s": 0}}))
    for _ in range(2):
        result = await ask(service, "kitchen light status")
        assert "result_cache_hit" not in steps(result.chain)
    assert service.sources["ha"].calls == 2


def planned(result) -> dict:
    (event,) = [e for e in result.chain if e["step"] == "planned"]
    return event


async def test_a_dry_run_says_which_sources_are_out_and_who_would_answer() -> None:
    from search.traces.narrative import sentence

    config = scripted_config(
        {"kiwix": {}, "ha": {"enabled": False, "fallback": ["kiwix"]}, "web": {"enabled": False}},
        keywords={"ha": ["lights"], "web": ["news"]},
    )
    service = Service(config)
    covered = await ask(service, "lights status", dry_run=True)
    event = planned(covered)
    assert (event["sources"], event["unavailable"]) == (["ha", "kiwix"], {"ha": "disabled"})
    assert covered.body["results"][0]["status"] == "planned"
    assert covered.body["results"][0]["plan"] == {
        "sources": ["ha", "kiwix"],
        "unavailable": {"ha": "disabled"},
    }
    assert sentence(event).endswith("; ha is disabled: kiwix would answer")
    assert service.sources["kiwix"].calls == 0  # a plan calls nothing

    stranded = await ask(service, "latest news", dry_run=True)
    assert planned(stranded)["unavailable"] == {"web": "disabled"}
    assert sentence(planned(stranded)).endswith(
        "web is disabled, and nothing stands in: it would fail"
    )
    # ... and the real run does what the plan said: it fails, and kiwix answers the other
    assert (await ask(service, "latest news")).status_code == 502
    assert (await ask(service, "lights status")).body["results"][0]["source"] == "kiwix"

    up = await ask(service, "what is a lighthouse", dry_run=True)
    assert planned(up)["unavailable"] == {} and "would" not in sentence(planned(up))


async def test_a_dry_run_sees_an_open_circuit_without_spending_its_probe() -> None:
    config = scripted_config(
        {
            "kiwix": {},
            "ha": {
                "fail": "unavailable",
                "fallback": ["kiwix"],
                "circuit_failures": 1,
                "circuit_cooldown_s": 0.2,
            },
        },
        keywords={"ha": ["lights"]},
    )
    service = Service(config)
    ha = service.sources["ha"]
    await ask(service, "lights 0")  # one failure opens it
    assert planned(await ask(service, "lights 1", dry_run=True))["unavailable"] == {
        "ha": "circuit_open"
    }
    await asyncio.sleep(0.25)  # half-open: the next real call probes
    assert planned(await ask(service, "lights 2", dry_run=True))["unavailable"] == {}
    ha.config = ha.config.model_copy(update={"fail": None})
    probe = await ask(service, "lights 3")
    assert probe.body["results"][0]["source"] == "ha" and ha.calls == 2


async def test_a_dry_run_counts_a_cached_answer_as_reachable_through_an_open_circuit() -> None:
    config = scripted_config(
        {"kiwix": {}, "ha": {"fallback": ["kiwix"], "circuit_failures": 1}},
        keywords={"ha": ["lights"]},
    )
    service = Service(config)
    ha = service.sources["ha"]
    await ask(service, "lights a")  # answered, and cached
    ha.config = ha.config.model_copy(update={"fail": "unavailable"})
    await ask(service, "lights b")  # fails: the circuit opens
    assert planned(await ask(service, "lights b", dry_run=True))["unavailable"] == {
        "ha": "circuit_open"
    }
    assert planned(await ask(service, "lights a", dry_run=True))["unavailable"] == {}
    real = await ask(service, "lights a")  # as planned: ha's cached answer
    assert real.body["results"][0]["source"] == "ha" and real.body["cached"] is True


async def test_a_planned_command_names_its_one_source_not_the_fallbacks() -> None:
    config = scripted_config(
        {
            "kiwix": {},
            "ha": {"control_prefix": "unlock", "allow_control": True, "fallback": ["kiwix"]},
        },
        keywords={"ha": ["door"]},
    )
    service = Service(config)
    plan = await ask(service, "unlock the front door", dry_run=True)
    assert (planned(plan)["sources"], planned(plan)["unavailable"]) == (["ha"], {})
    assert [e["reason"] for e in plan.chain if e["step"] == "control_withheld"] == ["dry_run"]
    assert service.sources["ha"].acted == [] and service.sources["kiwix"].calls == 0


async def test_a_planned_fusion_names_its_members() -> None:
    from search.traces.narrative import sentence

    config = scripted_config(
        {"kiwix": {}, "web": {"enabled": False}},
        keywords={"everything": ["everything"]},
        fusion={"everything": ["kiwix", "web"]},
    )
    service = Service(config)
    event = planned(await ask(service, "everything about owls", dry_run=True))
    assert (event["sources"], event["unavailable"]) == (["kiwix", "web"], {"web": "disabled"})
    assert sentence(event).endswith("web is disabled: kiwix would answer")
