"""The control gate, through the real Service and dispatcher, over scripted sources.

A scripted source with `control_prefix` reads queries starting with it as commands and
lists every command `act` carried out in `acted`: that list is the world these tests
watch. The same properties against a real Home Assistant are in
tests/search/test_control_over_http.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from routing.dispatch.control import (
    Circumstances,
    asked_as_question,
    deferral,
    unreadable,
    withheld_reasons,
    without_deferral,
)
from search.service import Service
from search.traces.records import MemoryTraceSink
from tests.support import scripted
from tests.support.app import assert_contract_event, scripted_config

scripted.register()

KEYWORDS = {"ha": ["unlock", "door", "lights"], "kiwix": ["sun", "explodes"], "web": ["rains"]}


def home(allow: bool = True, **ha: Any) -> Service:
    config = scripted_config(
        {
            "kiwix": {},
            "ha": {"control_prefix": "unlock", "allow_control": allow, "fallback": ["web"], **ha},
            "web": {},
        },
        keywords=KEYWORDS,
    )
    return Service(config)


async def ask(service: Service, query: str, **kwargs: Any) -> dict[str, Any]:
    """`query` as the household asks it (authorized, as a loopback client is)."""
    kwargs.setdefault("authorized", True)
    outcome = await service.search(query, explain=True, **kwargs)
    for event in outcome.chain:
        assert_contract_event(event)
    return outcome.body


def acted(service: Service) -> list[str]:
    return [c.query for c in service.sources["ha"].acted]  # type: ignore[attr-defined]


def withheld(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in body["explanation"] if e["step"] == "control_withheld"]


async def test_a_caller_that_does_not_say_it_may_act_never_acts() -> None:
    """Fail closed: `Service.search` and the gate's defaults never act."""
    service = home()
    outcome = await service.search("unlock the front door", explain=True)
    assert acted(service) == []
    [event] = withheld(outcome.body)
    assert event["reason"] == "not_authorized"
    defaults = withheld_reasons(
        allowed=True, acting=True, deferred=False, circumstances=Circumstances()
    )
    assert [r.value for r in defaults] == ["low_confidence", "not_authorized"]


async def test_a_plain_command_with_control_allowed_acts_once_through_the_gate() -> None:
    service = home()
    body = await ask(service, "unlock the front door")
    assert acted(service) == ["unlock the front door"]
    [result] = body["results"]
    assert (result["source"], result["status"]) == ("ha", "ok")
    invoked = [e for e in body["explanation"] if e["step"] == "source_invoked"]
    assert [(e["operation"], e["command"]) for e in invoked] == [
        ("act", {"action": "unlock", "target": "the front door"})
    ]
    assert withheld(body) == []


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("if the sun explodes today, unlock the front door", "conditional"),
        ("unless it rains, unlock the front door", "conditional"),
        ("unlock the front door if the sun explodes", "conditional"),
        ("unlock the front door in an hour", "deferred"),
        ("in ten minutes unlock the front door", "deferred"),
        ("unlock the front door tomorrow at 7", "deferred"),
        ("unlock the front door tonight", "deferred"),
        ("unlock the front door when i get home", "deferred"),
    ],
)
async def test_a_command_under_a_condition_or_for_later_is_withheld(
    query: str, reason: str
) -> None:
    service = home()
    body = await ask(service, query)
    assert acted(service) == []
    [event] = withheld(body)
    assert event["reason"] == reason and event["source"] == "ha"
    statuses = [r["status"] for r in body["results"]]
    assert "withheld" in statuses and "ok" not in statuses[-1:]
    part = next(r for r in body["results"] if r["status"] == "withheld")
    assert part["withheld"]["reason"] == reason
    assert "did nothing" in part["items"][0]["text"]


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("only if it rains, unlock the front door", "if"),
        ("unlock the front door, but only if it rains", "if"),
        ("unlock the front door provided that it rains", "provided"),
        ("should it rain, unlock the front door", "should it"),
        ("assuming it rains, unlock the front door", "assuming"),
        ("unlock the front door if i am late", "if"),  # a premise, left whole by the parser
        ("unlock the front door just in case", "in case"),
    ],
)
async def test_condition_words_the_parser_cannot_take_apart_still_withhold(
    query: str, words: str
) -> None:
    """Wherever the condition stands and whatever the parser made of the sentence, a
    command in a request that makes something depend on something does not run."""
    service = home()
    body = await ask(service, query)
    assert acted(service) == []
    events = withheld(body)
    assert events and all("conditional" in e["reasons"] for e in events)
    assert any(e.get("condition") == words for e in events)


async def test_unless_is_recorded_as_a_negated_condition() -> None:
    body = await ask(home(), "unless it rains, unlock the front door")
    [found] = [e for e in body["explanation"] if e["step"] == "conditional_detected"]
    assert (found["condition"], found["negated"]) == ("it rains", True)
    assert body["results"][0]["condition"]["negated"] is True  # the result says it too
    plain = await ask(home(), "if it rains, unlock the front door")
    [found] = [e for e in plain["explanation"] if e["step"] == "conditional_detected"]
    assert found["negated"] is False
    assert "negated" not in plain["results"][0]["condition"]


async def test_not_allowed_dry_run_read_only_and_default_decisions_never_act() -> None:
    refused = home(allow=False)
    body = await ask(refused, "unlock the front door")
    assert withheld(body)[0]["reason"] == "not_allowed" and acted(refused) == []
    assert body["results"][0]["status"] == "withheld"

    service = home()
    plan = await ask(service, "unlock the front door", dry_run=True)
    assert plan["results"][0]["status"] == "planned"
    assert withheld(plan)[0]["reason"] == "dry_run"
    tool = await ask(service, "unlock the front door", read_only=True)
    assert withheld(tool)[0]["reason"] == "read_only"
    assert acted(service) == []

    # Nothing in the rules names it: the default (ha here) answers, unsure, and must not act.
    unsure = Service(
        scripted_config({"ha": {"control_prefix": "unlockx", "allow_control": True}}, keywords={})
    )
    body = await ask(unsure, "unlockx the shed")
    assert [e["step"] for e in body["explanation"]][0] == "intent_default"
    assert withheld(body)[0]["reason"] == "low_confidence"
    assert unsure.sources["ha"].acted == []  # type: ignore[attr-defined]


async def test_every_reason_that_holds_is_recorded_the_first_names_the_event() -> None:
    body = await ask(
        home(allow=False), "if the sun explodes, unlock the door in an hour", dry_run=True
    )
    [event] = withheld(body)
    assert event["reasons"] == ["not_allowed", "dry_run", "conditional", "deferred"]
    assert event["reason"] == "not_allowed" and event["when"] == "in an hour"


async def test_a_service_that_does_not_act_withholds_with_reason_replay() -> None:
    service = Service(home().config, acting=False)
    body = await ask(service, "unlock the front door")
    assert withheld(body)[0]["reasons"] == ["replay"]
    assert acted(service) == []


async def test_a_failed_command_is_never_sent_down_the_fallback_chain() -> None:
    service = home(fail="error")
    outcome = await service.search("unlock the front door", explain=True, authorized=True)
    steps = [e["step"] for e in outcome.chain]
    assert "fallback" not in steps and steps.count("source_invoked") == 1
    assert outcome.status_code == 502 and [r.status for r in outcome.results] == ["error"]
    assert service.sources["web"].calls == 0  # type: ignore[attr-defined]


async def test_a_command_is_never_cached_and_drops_its_sources_cached_answers() -> None:
    service = home(cache_ttl_s=300)
    first = await ask(service, "door status")
    again = await ask(service, "door status")
    assert not first["cached"] and again["cached"]
    for _ in range(2):
        body = await ask(service, "unlock the front door")
        assert not body["cached"]
    assert len(acted(service)) == 2
    after = await ask(service, "door status")
    assert not after["cached"], "a command must drop what was read before it"


async def test_a_fusion_route_only_reads() -> None:
    config = scripted_config(
        {"ha": {"control_prefix": "unlock", "allow_control": True}, "web": {}},
        keywords={"everything": ["unlock"]},
        fusion={"everything": ["ha", "web"]},
    )
    service = Service(config)
    body = await ask(service, "unlock the front door")
    assert service.sources["ha"].acted == []  # type: ignore[attr-defined]
    assert [e["step"] for e in body["explanation"]].count("source_invoked") == 2


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("turn off the oven in 10 minutes", "in 10 minutes"),
        ("lock the door in half an hour", "in half an hour"),
        ("switch on the heating at 6:30 am", "at 6:30 am"),
        ("open the blinds at sunrise", "at sunrise"),
        ("turn the lights off tonight", "tonight"),
        ("start the vacuum on monday", "on monday"),
        ("turn on the porch light every evening", "every evening"),
        ("turn the heating on as soon as i leave", "as soon as i"),
        ("turn on the bed light at seven", "at seven"),
        ("unlock the door at half past six", "at half past six"),
        ("unlock the door at 1900", "at 1900"),
        ("turn on the lamp in the morning", "in the morning"),
        ("turn on the lamp on weekdays", "on weekdays"),
        ("unlock the door in 10min", "in 10min"),
        ("unlock the door in twelve minutes", "in twelve minutes"),
        ("unlock the door after 20 minutes", "after 20 minutes"),
        ("turn on the fan for 10 minutes", "for 10 minutes"),
        ("unlock the door in a bit", "in a bit"),
        ("unlock the door soon", "soon"),
        ("turn on the lamp until 9", "until 9"),
        ("wait ten minutes then unlock the door", "wait ten minutes"),
        ("the minute i leave, lock the door", "the minute i"),
        ("by the time we are back, unlock the door", "by the time"),
        ("on my return, unlock the door", "on my return"),
        ("each time it rains, close the garage door", "each time"),
        ("come christmas, turn on the tree lights", "come christmas"),
        ("unlock the door at sundown", "at sundown"),
        ("turn the heating on at bedtime", "at bedtime"),
        ("turn on the fan for a while", "for a while"),
        ("turn on the bed light for the night", "for the night"),
        ("leave the porch light on all night", "all night"),
        ("unlock the door in 2h", "in 2h"),
        ("unlock the door in a fortnight", "in a fortnight"),
        ("unlock the door at 19h30", "at 19h30"),
        ("unlock the door at 7p", "at 7p"),
        ("unlock the door on 12/25", "on 12/25"),
        ("turn on the sprinkler in june", "in june"),
        ("turn off the heating temporarily", "temporarily"),
        ("unlock the door in ten", "in ten"),
        ("turn on the lights at the weekend", "at the weekend"),
        ("turn on the tree lights over christmas", "over christmas"),
        ("open the windows in the summer", "in the summer"),
        ("unlock the door within the hour", "within the hour"),
        ("some day, unlock the door", "some day"),
        ("the next day, unlock the door", "the next day"),
        ("december 25th, unlock the door", "december 25th"),
        ("on the 3rd of may, unlock the door", "3rd of may"),
        ("a week from today, unlock the door", "a week from today"),
        ("between 6 and 7, unlock the door", "between 6 and"),
        ("unlock the door at half six", "half six"),
        ("unlock the door ｔｏｍｏｒｒｏｗ", "tomorrow"),  # full-width letters
        ("unlock the door tomor\u200brow", "tomorrow"),  # a zero-width space inside
        ("turn on the night light", None),
        ("turn on the lights in two rooms", None),
        ("turn on the fall garden lights", None),
        ("open the time capsule box", None),
        ("turn on the lights in may's room", None),
        ("turn on the half bath light", None),
        ("turn on the light in the day room", None),
        ("switch on the tv for the kids", None),
        ("turn on the lights in the living room", None),
        ("turn on the light at home", None),
        ("turn on lamp two", None),
        ("turn on the kitchen light", None),
        ("set the thermostat to 21", None),
        ("turn all the lights off at once", None),
    ],
)
def test_time_qualifiers_are_found_and_room_names_are_not(text: str, found: str | None) -> None:
    assert deferral(text) == found


def test_a_leading_time_qualifier_is_cut_from_the_command_words() -> None:
    assert without_deferral("in ten minutes, turn off the oven") == "turn off the oven"


def test_nothing_in_doubt_means_no_reason() -> None:
    sure = Circumstances(confident=True, authorized=True)
    assert withheld_reasons(allowed=True, acting=True, deferred=False, circumstances=sure) == []


async def test_a_command_whose_words_came_from_an_earlier_turn_is_withheld() -> None:
    """'turn them off' after 'turn on the kitchen lights' is rewritten to a full command;
    the router guessed its words, so it does nothing and says why."""
    config = scripted_config(
        {"kiwix": {}, "ha": {"control_prefix": "turn", "allow_control": True}},
        keywords={"ha": ["turn on", "turn off", "lights"]},
    )
    service = Service(config)
    first = await ask(service, "turn on the kitchen lights", session_id="s1")
    assert first["results"][0]["status"] == "ok"
    body = await ask(service, "turn them off", session_id="s1")
    [result] = body["results"]
    assert result["rewritten"] == "turn the kitchen lights off"
    assert result["status"] == "withheld"
    assert [e["reason"] for e in withheld(body)] == ["rewritten"]
    assert acted(service) == ["turn on the kitchen lights"]


@pytest.mark.parametrize(
    ("query", "reason", "field", "words"),
    [
        ("unlock the front door and the lights in 10 minutes", "deferred", "when", "in 10 minutes"),
        ("tomorrow, the lights and unlock the front door", "deferred", "when", "tomorrow"),
        (
            "do not, under any circumstances, unlock the front door",
            "low_confidence",
            "doubt",
            "do not",
        ),
        ("unlock the front door, actually don't", "low_confidence", "doubt", "actually"),
        ("unlock the front door. never mind", "low_confidence", "doubt", "never mind"),
        ("unlock the front door given that nobody is in", "conditional", "condition", "given that"),
        ("the minute i leave, unlock the front door", "deferred", "when", "the minute i"),
        ("by the time i am back, unlock the front door", "deferred", "when", "by the time"),
        ("unlock the front door? just kidding", "low_confidence", "doubt", "just kidding"),
        ("unlock the front door, jk", "low_confidence", "doubt", "jk"),
        ("unlock the front door. no, don`t", "low_confidence", "doubt", "don't"),
        # a question about what was done: its "and" joins a second verb of the question
        ("did i lock the lights and unlock the front door", "low_confidence", "doubt", "did i"),
        (
            "unlock the front door. on second thoughts, leave it",
            "low_confidence",
            "doubt",
            "on second thoughts",
        ),
        ("unlock the front door. hold off", "low_confidence", "doubt", "hold off"),
        ("unlock the front door, in theory", "low_confidence", "doubt", "in theory"),
        ("unlock the front door, shall I?", "low_confidence", "doubt", "?"),
        ("unlock the front door; is that safe?", "low_confidence", "doubt", "?"),
        ("is the sun up? then unlock the front door", "conditional", "condition", "? then"),
        ("some day, unlock the front door", "deferred", "when", "some day"),
        (
            "unlock the front door and the lights at the weekend",
            "deferred",
            "when",
            "at the weekend",
        ),
        # what the text shows is what the gate reads: full-width letters, invisible joiners
        ("unlock the front door. ｊｋ", "low_confidence", "doubt", "jk"),
        ("do\u200cn't, unlock the front door", "low_confidence", "doubt", "don't"),
        # a word the router cannot read: look-alike letters, or another script beside it
        ("unlock the front door. just kidd\u0456ng", "low_confidence", "doubt", "kidd\u0456ng"),
    ],
)
async def test_words_elsewhere_in_the_request_withhold_the_command(
    query: str, reason: str, field: str, words: str
) -> None:
    """Splitting can leave a clean command beside the words that make it doubtful: the
    gate reads the whole request for time, condition and negation words."""
    service = home()
    body = await ask(service, query)
    assert acted(service) == []
    events = withheld(body)
    assert events and all(reason in e["reasons"] for e in events)
    assert all(e[field] == words for e in events)


async def test_a_command_asked_as_a_question_is_withheld() -> None:
    """Splitting trims a part's "?", so the source hears an order; the gate finds the
    mark after the part in the request and does nothing, naming it."""
    service = home()
    body = await ask(service, "unlock the front door?")
    assert acted(service) == []
    [event] = withheld(body)
    assert (event["reason"], event["doubt"]) == ("low_confidence", "?")
    for mark in ("？", "‽", " ⁇", "!?"):  # other marks of a question, kept in the part
        service = home()
        body = await ask(service, "unlock the front door" + mark)
        assert acted(service) == [], mark
        assert [(e["reason"], e["doubt"]) for e in withheld(body)] == [("low_confidence", "?")]
    service = home()  # the mark belongs to the other part: the command is an order
    body = await ask(service, "is the sun up? unlock the front door")
    assert acted(service) == ["unlock the front door"] and withheld(body) == []


@pytest.mark.parametrize(
    ("part", "request_text", "asked"),
    [
        ("unlock the door", "unlock the door?", True),
        ("unlock the door", "unlock the door ?", True),
        ("unlock the door", 'please "unlock the door"?', True),
        ("unlock the door", "lights on? unlock the door", False),
        ("unlock the door", "unlock the door. is it raining?", False),
        ("unlock the door", "unlock the door", False),
        ("unlock the door", "unlock the door and unlock the door?", True),  # either one
        ("turn the kitchen lights off", "turn them off?", False),  # rewritten: not in it
        ("unlock the door", "unlock the door!?", True),
        ("unlock the door", "unlock the door.?", True),
        ("unlock the door?", "unlock the door?", True),  # a full-width "？", as read
        ("unlock the door", "unlock the door, shall i?", True),
        ("unlock the door", "unlock the door - would that work?", True),
        ("unlock the door", "unlock the door, will you?", False),  # a polite order
        ("unlock the door", "unlock the door, is it raining?", False),  # another question
        # a polite request is an order put as a question; a question after it still counts
        ("could you unlock the door", "could you unlock the door?", False),
        ("please can you unlock the door", "please can you unlock the door?", False),
        ("could you unlock the door", "could you unlock the door, is that safe?", True),
    ],
)
def test_a_part_is_asked_as_a_question_only_by_its_own_mark(
    part: str, request_text: str, asked: bool
) -> None:
    assert asked_as_question(part, request_text) is asked


@pytest.mark.parametrize(
    ("request_text", "part", "found"),
    [
        ("明天, unlock the door", "unlock the door", "明天"),  # another script, beside it
        ("unlock the door 明天", "unlock the door 明天", None),  # its own: the source places it
        ("unlock the door. just kidd\u0456ng", "unlock the door", "kidd\u0456ng"),
        ("turn on the café light", "turn on the café light", None),  # Latin letters all
        ("turn on the smørrebrød lamp, please", "turn on the smørrebrød lamp", None),
        ("turn on the light 💡", "turn on the light 💡", None),  # no letters
    ],
)
def test_words_the_router_cannot_read_are_doubt(
    request_text: str, part: str, found: str | None
) -> None:
    assert unreadable(request_text, part) == found


async def test_a_request_without_doubtful_words_still_acts_beside_a_question() -> None:
    service = home()
    body = await ask(service, "what if the sun explodes and also unlock the front door")
    assert withheld(body)  # "if": a condition word in the request
    service = home()
    body = await ask(service, "when does the sun explode? unlock the front door")
    assert acted(service) == [] and withheld(body)[0]["reason"] == "deferred"  # "when does"
    service = home()
    body = await ask(service, "lights status and also unlock the front door")
    assert acted(service) == ["unlock the front door"] and withheld(body) == []


async def test_a_command_whose_request_is_cancelled_is_still_recorded() -> None:
    """The client goes away while the source has the command (an MCP `cancelled`, a
    closed connection): the call may have taken effect, so the trace holds it, the
    source's cached answers are dropped, and the cancellation still ends the request."""
    sink = MemoryTraceSink()
    config = scripted_config(
        {
            "kiwix": {},
            "ha": {
                "control_prefix": "unlock",
                "allow_control": True,
                "delay_s": 30.0,
                "timeout_s": 60.0,
            },
            "web": {},
        },
        keywords=KEYWORDS,
    )
    service = Service(config, traces=sink)
    service.dispatcher.result_cache.set(("ha", "door status"), [])  # read before the command
    request = asyncio.create_task(service.search("unlock the front door", authorized=True))
    async with asyncio.timeout(30):  # the source has the command
        while not service.sources["ha"].acts_started:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    [trace] = sink.traces.values()
    assert trace.status_code == 499 and trace.error == {
        "type": "cancelled",
        "message": "the request was cancelled",
    }
    events = trace.chain
    [act] = [e for e in events if e["step"] == "source_invoked"]
    assert (act["operation"], act["outcome"], act["reason"]) == ("act", "timeout", "cancelled")
    assert act["command"] == {"action": "unlock", "target": "the front door"}
    assert events[-1]["step"] == "error"
    assert len(service.dispatcher.result_cache) == 0


async def test_an_act_that_answers_no_items_is_recorded_as_an_error() -> None:
    """A buggy source's `act` answering None: the call is recorded (it may have acted),
    as an error, and the part fails with it, not with a crash after the call."""
    service = home(fail="not-items")
    body = await ask(service, "unlock the front door")
    [event] = [
        e
        for e in body["explanation"]
        if e["step"] == "source_invoked" and e.get("operation") == "act"
    ]
    assert event["outcome"] == "error" and "not a list of items" in event["message"]
    assert acted(service) == ["unlock the front door"]
