"""Keyword rules: typo tolerance with guards, question frames, weights, and `none` rules."""

from __future__ import annotations

from pathlib import Path

from routing.chain.events import route_log
from routing.stages.keyword import (
    ADDRESSEE_AFFAIRS,
    OWN_AFFAIRS,
    QUESTION_TOPIC,
    WORLD_QUESTION,
    KeywordStage,
)
from routing.stages.keyword_rules import KeywordRules, parse_rule
from routing.stages.resolver import Resolver
from routing.types import ResolveContext

RULES = KeywordRules(
    {
        "forecast": ["weather", "rain", "lightning", "temperature outside"],
        "ha": ["lights", "lighting", "turn * off", "living room", "kitchen"],
        "kiwix": ["what does * mean ^2.5", "tell me about ^0.5", "how old is ^1.5"],
        "web": ["traffic", "news"],
    },
    none_rules=["alarm", "spotify", "set * timer"],
)


def route(query: str) -> str | None:
    found = RULES.match(query)
    return found.route if found else None


def test_exact_inflected_and_typo_words_match() -> None:
    assert route("will it rain today") == "forecast"
    assert route("is it raining") == "forecast"  # inflection
    assert route("whats the wether like") == "forecast"  # typo, same first letter
    assert route("dim the ligts") == "ha"


def test_first_letter_and_length_guards_keep_lookalikes_apart() -> None:
    assert route("book a train to paris") is None  # "train" is not "rain"
    assert route("cheap flights to rome") is None  # "flights" is not "lights"
    assert route("it's coffee time") is None  # short words never match fuzzily


def test_exact_match_outweighs_a_typo_match() -> None:
    # "lighting" is an exact ha rule and only a fuzzy match of forecast's "lightning".
    assert route("decrease the lighting") == "ha"


def test_wildcards_match_a_question_frame() -> None:
    assert route("what does ubiquitous mean") == "kiwix"
    assert route("what does the word hypocrisy mean") == "kiwix"
    assert route("turn all the kitchen lights off") == "ha"
    assert route("what does mean") is None  # `*` stands for at least one word


def test_weights_let_a_topic_beat_a_frame() -> None:
    assert route("tell me about the traffic") == "web"
    assert route("tell me about napoleon") == "kiwix"


def test_a_tie_decides_nothing() -> None:
    assert route("news about the rain") is None  # one word each


def test_words_count_once_per_route() -> None:
    rules = KeywordRules({"ha": ["lamp", "lamps"], "web": ["lamp shop"]})
    found = rules.match("lamps")
    assert found is not None and found.scores == {"ha": 1.0}


def test_none_rules_mark_requests_no_source_serves() -> None:
    found = RULES.match("set an alarm in the kitchen")
    assert found is not None and found.unserved and found.route == "none"
    assert route("set a kitchen timer") == "none"
    assert route("play the news on spotify") == "none"  # none phrases weigh one more


def test_an_exact_word_matches_only_itself() -> None:
    rules = KeywordRules({"ha": ["=play * movie ^2.5"], "web": ["cinema"]})
    found = rules.match("play the new movie")
    assert found is not None and found.route == "ha" and found.matched == ("=play * movie",)
    assert rules.match("is the movie playing") is None  # no inflection
    assert rules.match("which cinema plays the new movie").route == "web"  # type: ignore[union-attr]
    assert rules.match("plya the movie") is None  # no typo either
    assert parse_rule("=play * movie ^2.5")[0] == ("=play", "*", "movie")


def test_parse_rule_reads_weights() -> None:
    assert parse_rule("tell me about ^0.5") == (("tell", "me", "about"), 0.5, "tell me about")
    assert parse_rule("what does * mean") == (
        ("what", "does", "*", "mean"),
        None,
        "what does * mean",
    )


async def test_stage_records_its_decision() -> None:
    stage = KeywordStage(RULES)
    with route_log() as log:
        decision = await stage.decide("is it raining", ResolveContext())
    assert decision is not None and decision.route == "forecast"
    [event] = log.snapshot()
    assert event["step"] == "intent_keyword"
    assert event["decision"] == "forecast" and event["discourse_escalated"] is False
    assert event["matched"] == ["rain"]


async def test_a_question_about_the_world_is_left_to_the_semantic_stage() -> None:
    """A rule word in a question about the world may be its topic ("lightning"): with a
    semantic stage after it, the keyword stage declines, saying why, and hands on its
    ranking; a request worded the same way as a command is still decided."""
    question = "what causes lightning during a storm"
    alone = KeywordStage(RULES)
    deferring = KeywordStage(RULES, defer_world_questions=lambda: True)
    not_ready = KeywordStage(RULES, defer_world_questions=lambda: False)
    with route_log():
        decided = await alone.decide(question, ResolveContext())
    assert decided is not None and decided.route == "forecast"
    context = ResolveContext()
    with route_log() as log:
        assert await deferring.decide(question, context) is None
        kept = await deferring.decide("is it raining", ResolveContext())
    [declined, decided_event] = log.snapshot()
    assert declined["outcome"] == "declined" and declined["declined"] == WORLD_QUESTION
    assert declined["candidates"][0]["route"] == "forecast" and declined["matched"] == ["lightning"]
    assert context.ranked is not None and context.ranked.winner == "forecast"
    assert kept is not None and kept.route == "forecast"
    assert decided_event["decision"] == "forecast"
    # a semantic stage that is not ready cannot weigh it: the rules decide
    with route_log():
        unready = await not_ready.decide(question, ResolveContext())
    assert unready is not None and unready.route == "forecast"
    # a `none` win is not a world question's deferral (see the topic-word test below)
    ranking = deferring._rank("what is the newest spotify alarm")
    assert ranking is not None and ranking.ranked.winner == "none"
    assert ranking.deferred != WORLD_QUESTION


async def test_a_questions_topic_words_alone_do_not_make_it_unserved() -> None:
    """ "when did the song without me come out": a `none` win that rests on single words
    in a question for a fact (whoever the title's "me" is) is left to the semantic stage,
    saying why. The same words in a request still end the part unserved, and a request's
    frame in a question ("when do you set the timer" matches "set * timer") is the
    rules' to decide (here it is under the threshold, a matter of the fit)."""
    deferring = KeywordStage(RULES, defer_world_questions=lambda: True)
    context = ResolveContext()
    with route_log() as log:
        assert await deferring.decide("when did the spotify alarm come out", context) is None
    [event] = log.snapshot()
    assert event["outcome"] == "declined" and event["declined"] == QUESTION_TOPIC
    assert event["candidates"][0]["route"] == "none" and not context.unserved
    assert context.ranked is not None and context.ranked.winner == "none"
    context = ResolveContext()
    with route_log() as log:
        assert await deferring.decide("put on the spotify alarm", context) is None
    [event] = log.snapshot()
    assert event["outcome"] == "unserved" and context.unserved
    frame = deferring._rank("when do you set the timer")
    assert frame is not None and frame.ranked.winner == "none" and frame.deferred is None
    # with no semantic stage ready to weigh it, the rules' verdict stands
    not_ready = KeywordStage(RULES, defer_world_questions=lambda: False)
    context = ResolveContext()
    with route_log() as log:
        await not_ready.decide("when did the spotify alarm come out", context)
    assert context.unserved


async def test_the_askers_own_affairs_are_left_to_the_semantic_stage_for_world_routes() -> None:
    """ "is the traffic fine on my account": a rule word of a route about the world names a
    topic of the asker's business; the stage leaves it to the semantic stage, saying why.
    The same words about the world, and the asker's own affairs for a route that is not
    about the world (the home), are still decided by the rules; and so is everything while
    the semantic stage is not ready."""
    world = frozenset({"kiwix", "web"})
    deferring = KeywordStage(RULES, defer_world_questions=lambda: True, world_routes=world)
    not_ready = KeywordStage(RULES, defer_world_questions=lambda: False, world_routes=world)
    context = ResolveContext()
    with route_log() as log:
        assert await deferring.decide("is the traffic fine on my account", context) is None
        about_the_world = await deferring.decide("traffic on the bridge", ResolveContext())
        home = await deferring.decide("turn my kitchen lights off", ResolveContext())
    [declined, *decided] = log.snapshot()
    assert declined["outcome"] == "declined" and declined["declined"] == OWN_AFFAIRS
    assert declined["candidates"][0]["route"] == "web"
    assert context.ranked is not None and context.ranked.winner == "web"
    assert about_the_world is not None and about_the_world.route == "web"
    assert home is not None and home.route == "ha"
    assert [e["decision"] for e in decided] == ["web", "ha"]
    with route_log():
        unready = await not_ready.decide("is the traffic fine on my account", ResolveContext())
    assert unready is not None and unready.route == "web"


async def test_the_addressees_own_affairs_are_left_to_the_semantic_stage_too() -> None:
    """ "is there traffic outside your shop": a question put to a business (or to the
    assistant) about its own affairs, where a route's rule word is a topic of the
    addressee's business; the same words about the world are still the rules'."""
    world = frozenset({"kiwix", "web"})
    deferring = KeywordStage(RULES, defer_world_questions=lambda: True, world_routes=world)
    with route_log() as log:
        assert (
            await deferring.decide("is there traffic outside your shop", ResolveContext()) is None
        )
        about_the_world = await deferring.decide("traffic outside the shop", ResolveContext())
    [declined, decided] = log.snapshot()
    assert declined["outcome"] == "declined" and declined["declined"] == ADDRESSEE_AFFAIRS
    assert about_the_world is not None and about_the_world.route == "web"
    assert decided["decision"] == "web"


async def test_unserved_is_decided_as_no_source_at_all() -> None:
    resolver = Resolver([KeywordStage(RULES)], "kiwix")
    with route_log() as log:
        decision = await resolver.resolve("wake me up with an alarm at 7", ResolveContext())
    assert decision.stage == "intent_default" and decision.confident is False
    assert decision.unserved and decision.route is None
    steps = [(e["step"], e.get("decision"), e.get("reason")) for e in log.snapshot()]
    assert steps == [("intent_keyword", None, None), ("intent_default", None, "unserved")]
    assert log.snapshot()[1]["nearest"] == "alarm"


def _shipped_rules() -> KeywordRules:
    """The rules the shipped config.yaml routes with: the package's, no overrides."""
    from pathlib import Path

    from routing.language.spelling import known_words
    from routing.stages.build import resolved_routes
    from routing.stages.route_data import NONE
    from search.config import load_config

    config = load_config(Path(__file__).resolve().parents[3] / "config.yaml")
    routes = resolved_routes(config)
    return KeywordRules(
        {name: list(r.keywords) for name, r in routes.items() if name != NONE},
        config.routing.keyword_threshold,
        list(routes[NONE].keywords),
        known_words(config.routing.semantic.model_path),
    )


def test_shipped_definition_frames_outweigh_the_word_defined() -> None:
    rules = _shipped_rules()

    def shipped(query: str) -> str | None:
        found = rules.match(query)
        return found.route if found else None

    # the thing defined may be any word, another route's keyword too
    assert shipped("what is a podcast") == "kiwix"
    assert shipped("define the word meeting") == "kiwix"
    assert shipped("what is a thermostat") == "kiwix"
    assert shipped("who invented the light bulb") == "kiwix"
    # ... but "what is a good ..." asks for a recommendation
    assert shipped("what's a good restaurant around here") == "web"
    # a room makes a temperature question the home's, not the weather's
    assert shipped("is it cold in the basement") == "ha"
    assert shipped("is it cold outside") == "forecast"
    # a film playing at a cinema is not a film to play on the TV
    assert shipped("what movies are playing at the movies tonight") == "web"
    assert shipped("play the movie inception on the tv") == "ha"
    # a media player's "play the Queen album" is the home's; a music request is unserved
    assert shipped("play the Queen album") == "ha"
    assert shipped("please play an album from 1987") == "none"
    assert shipped("play the best album from the seventies") == "none"
    # a name that looks like a frame word ("anthony", "antonym") is not that frame
    assert shipped("add jency anthony to my playlist") == "none"
    # ... nor is a country a currency ("france", "francs")
    assert shipped("tell me about france") == "kiwix"
    assert shipped("what is twenty dollars in francs") == "web"
    assert shipped("who is the prince of wales") != "web"  # not "price of"
    assert shipped("what is the largest forest in the world") != "forecast"  # two slips
    # the verb "call" is a phone call; "what do you call" asks for a word
    assert shipped("call mom") == "none"
    assert shipped("what do you call a baby kangaroo") == "kiwix"


def test_a_typo_is_one_slip() -> None:
    rules = KeywordRules({"forecast": ["forecast", "weather"]})
    assert rules.match("whats the forcast") is not None  # one letter missing
    assert rules.match("the wheather today") is not None  # one letter more
    assert rules.match("the largest forest") is None  # two letters apart


def test_a_word_spelled_right_is_no_typo_of_another() -> None:
    dictionary = frozenset({"tanks", "light", "lighting"})
    guarded = KeywordRules(
        {"ha": ["lights"], "forecast": ["lightning"]}, none_rules=["thanks"], dictionary=dictionary
    )
    unguarded = KeywordRules({"ha": ["lights"], "forecast": ["lightning"]}, none_rules=["thanks"])
    question = "when were tanks first used in battle"
    assert unguarded.scores(question) is not None  # "tanks" read as a typo of "thanks"
    assert guarded.scores(question) is None
    lighting = guarded.scores("dim the lighting")
    assert lighting is None or "forecast" not in lighting.scores  # not "lightning"
    # a real word still matches a rule that is its inflection, and a typo still matches
    assert guarded.match("turn on the light") is not None
    assert guarded.match("turn on the ligts") is not None


def test_the_shipped_rules_know_the_models_words() -> None:
    from routing.language.spelling import known_words

    words = known_words()
    assert {"tanks", "thanks", "forest", "weather"} <= words
    assert "wether" not in words  # a typo the rules should still forgive
    rules = _shipped_rules()
    tanks = rules.scores("when was the first major use of tanks in a battle")
    assert tanks is None or "none" not in tanks.scores
    found = rules.match("whats the wether like")
    assert found is not None and found.route == "forecast"


def test_without_a_vocabulary_file_there_is_no_guard(tmp_path: Path) -> None:
    from routing.language.spelling import known_words

    assert known_words(str(tmp_path)) == frozenset()
    (tmp_path / "vocab.txt").write_text("[PAD]\n##s\ntanks\nParis\n", "utf-8")
    known_words.cache_clear()
    assert known_words(str(tmp_path)) == frozenset({"tanks"})  # whole lower-case words only
