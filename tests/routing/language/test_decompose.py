"""Decomposition: which separators split a compound query, and which leave it whole."""

from __future__ import annotations

import pytest

from routing.language.conditional import extract_conditional
from routing.language.decompose import decompose, decompose_claimed, is_complete_request


@pytest.mark.parametrize(
    ("query", "parts"),
    [
        # hard separators always split
        (
            "turn on the lights and then what's the weather",
            ["turn on the lights", "what's the weather"],
        ),
        (
            "what is the weather today and also lights status",
            ["what is the weather today", "lights status"],
        ),
        ("dim the lights; any news from kenya", ["dim the lights", "any news from kenya"]),
        # a paired modifier that is a verb with its object ("open the window") opens one
        ("lock the front door and open the window", ["lock the front door", "open the window"]),
        ("what did he say and what did she say", ["what did he say", "what did she say"]),
        ("Who wrote Hamlet? Is it raining?", ["Who wrote Hamlet", "Is it raining"]),
        # soft separators split between two requests
        (
            "turn off the lights and what's the weather",
            ["turn off the lights", "what's the weather"],
        ),
        (
            "add milk to the list and rate this book five stars",
            ["add milk to the list", "rate this book five stars"],
        ),
        # a request's topic can open a clause
        (
            "book a table for four at the pub, weather in two hours in oslo",
            ["book a table for four at the pub", "weather in two hours in oslo"],
        ),
        # after a comma, a clause of three words or more that doesn't continue
        (
            "start up the coffee machine, ask a restaurant in my area",
            ["start up the coffee machine", "ask a restaurant in my area"],
        ),
        # "when will ..." on the left is a question, not a condition
        (
            "when will it be hot here and play some jazz",
            ["when will it be hot here", "play some jazz"],
        ),
        # a noun phrase headed by a request's topic opens a clause after "and"
        (
            "turn off the lights and the weather in homestead",
            ["turn off the lights", "the weather in homestead"],
        ),
        ("google the word and recent tech headlines", ["google the word", "recent tech headlines"]),
        (
            "set an alarm and today's forecast for rome",
            ["set an alarm", "today's forecast for rome"],
        ),
        # more imperatives open a request
        (
            "what is the capital of peru and shut the blinds",
            ["what is the capital of peru", "shut the blinds"],
        ),
        (
            "is it windy today and prepare my morning coffee",
            ["is it windy today", "prepare my morning coffee"],
        ),
        # a premise with its question is a complete sentence
        (
            "if i have five dollars how much is that in euros and will it rain tomorrow",
            ["if i have five dollars how much is that in euros", "will it rain tomorrow"],
        ),
        # a condition with its consequence, after "and", is a request of its own
        (
            "turn on the fan and if it rains close the windows",
            ["turn on the fan", "if it rains close the windows"],
        ),
        (
            "dim the lights and if i have ten dollars how much is that in yen",
            ["dim the lights", "if i have ten dollars how much is that in yen"],
        ),
        # a device heads a request ("and lights down to seven")
        (
            "recommend a pub on mg road and lights down to seven",
            ["recommend a pub on mg road", "lights down to seven"],
        ),
    ],
)
def test_compound_queries_split(query: str, parts: list[str]) -> None:
    assert decompose(query) == parts


@pytest.mark.parametrize(
    "query",
    [
        "salt and pepper",
        "who wrote Romeo and Juliet",
        "what is the weather in paris, france",
        "hey google, what is the weather",  # a greeting is not a request of its own
        "turn on the lights in the kitchen, bedroom and hallway",
        "will it be freezing today in delaware and lehigh national heritage corridor",
        "find flights to rome, in march",
        "when did beyonce and jay z get married",
        "tell me the news and weather",  # a bare noun is not a request
        "tell me the news and the weather",  # nor a topic with only an article
        "who wrote romeo and juliet movie times",
        "what is the weather in paris, the capital of france",
        "if it rains and the windows are open close them",  # a condition without its question
        "open the app and go to my settings",
        "what's the fastest and cheapest way to get to rome",  # coordinated superlatives
        "who is the best and worst president",
        "what connects the upper and lower parts of the lake",  # paired modifiers
        "which months are warm and dry in spain",
        # a comma after a verb of saying opens a quotation
        "which president said, ask not what your country can do for you",
        "turn on the lights if it's dark and if it's after six",  # a bare second condition
        "what's the relationship between inflation and interest rates",
        # a verb and a pronoun continue the request before: alone, they name nothing
        "activate the vacuum cleaner and use it",
        "put on some music, turn it up",
        "open the blinds and close them again",
    ],
)
def test_single_requests_stay_whole(query: str) -> None:
    assert decompose(query) == [query]


def test_complete_request_needs_an_opening_and_substance() -> None:
    assert is_complete_request("what is the time")
    assert is_complete_request("weather in oslo")
    assert not is_complete_request("weather")
    assert not is_complete_request("pepper and salt")
    assert is_complete_request("the latest tech headlines")
    assert not is_complete_request("ten day forecast")  # a count before a topic: no opening


@pytest.mark.parametrize(
    "query",
    [
        "if i have five dollars how much is that in euros",
        "if we leave at six, will we hit traffic",
        "how much is that in yen if i have ten pounds",
    ],
)
def test_a_condition_about_the_asker_is_a_premise_not_a_condition(query: str) -> None:
    assert extract_conditional(query) is None


def test_a_condition_about_the_world_is_still_extracted() -> None:
    found = extract_conditional("turn on the heating if it is cold")
    assert found is not None and found.condition == "it is cold"


def _keyword_claims() -> object:
    from routing.stages.keyword import KeywordStage
    from routing.stages.keyword_rules import KeywordRules

    rules = KeywordRules(
        {"forecast": ["weather"], "ha": ["lights", "lamp"], "web": ["news", "nearby ^0.75"]},
        none_rules=["out of * stars"],
    )
    return KeywordStage(rules).claim


def test_clauses_claimed_by_different_routes_split() -> None:
    claims = _keyword_claims()
    query = "what will the weather be in lago vista and the last hawk gets 3 out of 6 stars"
    assert decompose(query) == [query]  # the grammar alone sees one request
    assert decompose(query, claims) == [  # type: ignore[arg-type]
        "what will the weather be in lago vista",
        "the last hawk gets 3 out of 6 stars",
    ]
    assert decompose("tell me the news and the weather", claims) == [  # type: ignore[arg-type]
        "tell me the news",
        "the weather",
    ]
    assert decompose_claimed(query, claims) == [  # type: ignore[arg-type]
        ("what will the weather be in lago vista", None),
        ("the last hawk gets 3 out of 6 stars", ("forecast", "none")),
    ]


def test_clauses_claimed_alike_or_by_a_hint_stay_whole() -> None:
    claims = _keyword_claims()
    for query in (
        "dim the lights and the lamp",  # one route
        "if the weather is bad, the lights",  # a condition and its consequence
        "how is the weather at the lake and nearby right now",  # "nearby" is a hint
        "salt and pepper",
    ):  # nobody's
        assert decompose(query, claims) == [query]  # type: ignore[arg-type]


# Sentences written for these tests: statements about the asker or the situation, and
# requests that stand on their own.
CONTEXT = [
    "I'm planning a trip",
    "I'm free this weekend",
    "We have guests coming over tonight",
    "My car is almost out of gas",
    "It's my sister's birthday on Sunday",
    "I like jazz",
    "I want to go to the beach",
    "I need to get up early",
    "Our flight lands at six",
    "It's freezing in the living room",
]
REQUESTS = [
    "What's the weather in Boston on Friday?",
    "Find me a concert nearby.",
    "Who wrote Hamlet?",
    "Turn off the kitchen lights.",
    "Is it raining in Oslo?",
    "Where is the nearest gas station?",
    "Play something relaxing.",
]


@pytest.mark.parametrize("context", CONTEXT)
@pytest.mark.parametrize("request_", REQUESTS)
def test_a_sentence_of_context_stays_with_its_request(context: str, request_: str) -> None:
    before = f"{context}. {request_}"
    after = f"{request_} {context}."
    assert decompose(before) == [before.rstrip(".?")]
    assert decompose(after) == [after.rstrip(".")]


@pytest.mark.parametrize(
    ("query", "parts"),
    [
        ("Who wrote Hamlet? Is it raining?", ["Who wrote Hamlet", "Is it raining"]),
        # a joining word that opens a sentence splits as the sentence end would
        ("Who wrote Hamlet? And is it raining?", ["Who wrote Hamlet", "is it raining"]),
        ("Who sang it first? Also, will it snow?", ["Who sang it first", "will it snow"]),
        (
            "Who built the tower? And when was it built?",
            ["Who built the tower? And when was it built"],
        ),
        ("I'm cold. And turn on the heater.", ["I'm cold. And turn on the heater"]),
        (
            "Turn off the lights. Why is the sky blue?",
            ["Turn off the lights", "Why is the sky blue"],
        ),
        ("Turn off the lights. What time is it?", ["Turn off the lights", "What time is it"]),
        # a request phrased as a statement is a request
        (
            "I want to book a table for two. What's the weather tomorrow?",
            ["I want to book a table for two", "What's the weather tomorrow"],
        ),
        ("We're looking for a pub. Is it raining?", ["We're looking for a pub", "Is it raining"]),
        ("I'd like the news. Dim the lights.", ["I'd like the news", "Dim the lights"]),
        # context after a request stays with it; the next request splits off
        (
            "Find me a concert. I'm free this weekend. What's the weather in Oslo?",
            ["Find me a concert. I'm free this weekend", "What's the weather in Oslo"],
        ),
        # a greeting is not a request of its own
        ("Hi. What is the weather?", ["Hi. What is the weather"]),
        ("Good morning! Turn on the lights.", ["Good morning! Turn on the lights"]),
        ("Sorry, one more thing. Will it snow?", ["Sorry, one more thing. Will it snow"]),
        ("one more thing, turn off the tv", ["one more thing, turn off the tv"]),
        # a wish with nothing after it asks nothing yet
        ("Hmm, I wonder. How deep is the sea?", ["Hmm, I wonder. How deep is the sea"]),
        ("I need help. Is the pharmacy open?", ["I need help", "Is the pharmacy open"]),
        # the asker after a time is context too
        (
            "This weekend I'm free. Find me a concert nearby.",
            ["This weekend I'm free. Find me a concert nearby"],
        ),
        # a telegraphic sentence is a request
        ("Nighttime mode. What's the weather?", ["Nighttime mode", "What's the weather"]),
        # a long sentence's pronoun has its noun inside it
        (
            "Dim the lights. How old was Albert Einstein when he published relativity?",
            ["Dim the lights", "How old was Albert Einstein when he published relativity"],
        ),
        # a full stop after a number or two letters ends a sentence; after an abbreviation not
        ("Book a table at 8 pm. Will it rain?", ["Book a table at 8 pm", "Will it rain"]),
        (
            "Give this book a score of 5. Find films nearby.",
            ["Give this book a score of 5", "Find films nearby"],
        ),
        ("Ask Mr. Smith about the weather.", ["Ask Mr. Smith about the weather"]),
    ],
)
def test_a_sentence_end_splits_two_requests(query: str, parts: list[str]) -> None:
    assert decompose(query) == parts


@pytest.mark.parametrize(
    "query",
    [
        "Tell me about the Eiffel Tower. How tall is it?",  # "it" is the tower
        "What's the weather in Oslo? What about Bergen?",  # a follow-up of the question
        "I'm going to Boston. What's the weather there?",
    ],
)
def test_a_sentence_leaning_on_the_one_before_is_not_a_request_of_its_own(query: str) -> None:
    assert decompose(query) == [query.rstrip("?")]


@pytest.mark.parametrize(
    "query",
    [
        # an introduction to the clause after it
        "On average, how much of a person's body weight is muscle?",
        "In 1988, which carnival club was banned from throwing coconuts?",
        "According to legend, where was the lost city of gold?",
        # the question asked in place, after the subject and an apposition
        "Mayday, a code word used as a distress signal, derives from which language?",
        "The old observatory, which is part of the maritime museum, was built in what year?",
        "The name of the ruby comes from the Latin word ruber, which means what?",
        "Baby Doe Tabor, who outlived her husband by many years, died where?",
        # a predicate after an aside
        "Which actor, suffering from stage fright, was nicknamed the great profile?",
        "Which island is situated in the bay, between the two cities?",
        # a statement of fact before its question
        "The car went into production in 1984. What does its name mean?",
        "Anthropology has two classical divisions. What is the other one?",
    ],
)
def test_one_question_with_asides_stays_whole(query: str) -> None:
    assert len(decompose(query)) == 1, decompose(query)


@pytest.mark.parametrize(
    ("query", "parts"),
    [
        # a question word that opens its own clause still splits
        (
            "turn on the lights, is it raining and what's the weather",
            ["turn on the lights", "is it raining", "what's the weather"],
        ),
        # a command before a question is no statement of fact
        ("Turn off the lights. What's the weather?", ["Turn off the lights", "What's the weather"]),
        ("Who wrote Hamlet? Is it raining?", ["Who wrote Hamlet", "Is it raining"]),
    ],
)
def test_asides_do_not_hide_a_second_request(query: str, parts: list[str]) -> None:
    assert decompose(query) == parts
