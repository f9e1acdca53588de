"""The label stage: a household's label decides exactly its own words, and nothing else."""

from __future__ import annotations

from pathlib import Path

from routing.stages.labels import HouseholdRouting
from search.service import Service
from search.traces.records import NullTraceSink
from tests.search.traces.test_store import home_config


async def routed(tmp_path: Path, household: HouseholdRouting | None, query: str) -> tuple:
    service = Service(home_config(tmp_path / "t.db"), traces=NullTraceSink(), household=household)
    await service.start(sources=False)
    try:
        outcome = await service.search(query, dry_run=True, explain=True)
    finally:
        await service.aclose()
    (result,) = outcome.results
    return result.route, result.status, result.stage, outcome.chain


async def test_a_labelled_query_goes_where_the_label_says_whatever_the_rules(
    tmp_path: Path,
) -> None:
    labels = HouseholdRouting.of({"Lights status?": "kiwix"}, None, "household:abc")
    assert (await routed(tmp_path, None, "lights status"))[0] == "ha"  # the keyword rule
    route, status, stage, chain = await routed(tmp_path, labels, "LIGHTS  status")
    assert (route, status, stage) == ("kiwix", "planned", "intent_label")
    (event,) = [e for e in chain if e["step"].startswith("intent_")]
    assert event["step"] == "intent_label"
    assert (event["decision"], event["label"], event["confidence"]) == ("kiwix", "kiwix", 1.0)
    assert event["candidates"] == [{"route": "kiwix", "confidence": 1.0, "margin": 0.0}]
    assert event["fit"] == "household:abc"


async def test_a_label_is_no_exemplar_other_words_route_as_before(tmp_path: Path) -> None:
    labels = HouseholdRouting.of({"lights status": "kiwix"}, None, "household:abc")
    route, _, stage, chain = await routed(tmp_path, labels, "lights status in the kitchen")
    assert (route, stage) == ("ha", "intent_keyword")
    keyword = next(e for e in chain if e["step"] == "intent_keyword")
    assert keyword["fit"] == "household:abc"  # the artefact it routed with, named


async def test_a_none_label_ends_the_part_unserved(tmp_path: Path) -> None:
    labels = HouseholdRouting.of({"latest news": "none"}, None, "household:abc")
    route, status, _, chain = await routed(tmp_path, labels, "latest news")
    assert (route, status) == (None, "unserved")
    steps = [(e["step"], e.get("outcome")) for e in chain if e["step"].startswith("intent_")]
    assert steps == [("intent_label", "unserved"), ("intent_default", "unserved")]
    # the part ends at the default, which states the label's confidence, not "none at all"
    default = next(e for e in chain if e["step"] == "intent_default")
    assert default["confidence"] == 1.0
    assert default["candidates"][0]["route"] == "none"


async def test_a_label_of_a_route_no_longer_configured_is_not_applied(tmp_path: Path) -> None:
    labels = HouseholdRouting.of({"lights status": "recipes"}, None, "household:abc")
    route, _, stage, _ = await routed(tmp_path, labels, "lights status")
    assert (route, stage) == ("ha", "intent_keyword")


async def test_without_a_household_the_chain_names_the_shipped_fit(tmp_path: Path) -> None:
    _, _, _, chain = await routed(tmp_path, None, "lights status")
    assert next(e for e in chain if e["step"] == "intent_keyword")["fit"] == "shipped"


async def test_a_time_word_never_moves_a_labelled_part(tmp_path: Path) -> None:
    """'latest' sends an encyclopedia question to a live source; the household's label
    of the same words to kiwix holds."""
    labels = HouseholdRouting.of({"latest news": "kiwix"}, None, "household:abc")
    route, _, stage, chain = await routed(tmp_path, labels, "latest news")
    assert (route, stage) == ("kiwix", "intent_label")
    assert not [e for e in chain if e["step"] == "time_sensitive"]
