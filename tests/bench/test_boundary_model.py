"""bench/boundary_model.py: the model learns the separator where two rows meet as the
boundary and every other one as none, and it can only add cuts to the grammar's."""

from __future__ import annotations

import re

from bench.boundary_model import (
    SEPARATOR,
    BoundaryModel,
    Pair,
    draw_pairs,
    examples,
    grammar_then_model,
)


def test_the_separator_where_the_rows_meet_is_the_only_boundary() -> None:
    joined_by_and = Pair("turn on the light.", "who wrote romeo and juliet", " and ")
    assert joined_by_and.text == "turn on the light and who wrote romeo and juliet"
    joined_by_comma = Pair("what do salt and pepper cost?", "is it raining", ", ")
    _, labels = examples([joined_by_and, joined_by_comma], ["bread and butter"], None)
    # the joining "and", the title's; the snack's "and", the joining comma; the single's
    assert labels == [1, 0, 0, 1, 0]
    for pair in (joined_by_and, joined_by_comma):
        found = [m.start() for m in SEPARATOR.finditer(pair.text)]
        assert pair.boundary in found


def test_pairs_join_rows_of_different_routes_when_there_are_two() -> None:
    rows = [("lights on", "ha"), ("rain today", "forecast"), ("lock the door", "ha")]
    texts = dict(rows)
    for pair in draw_pairs(rows, 50, "test"):
        assert texts[pair.first] != texts[pair.second]
        assert pair.connector in (" and ", ", ")
    one_route = [("lights on", "ha"), ("lock the door", "ha")]
    assert len(draw_pairs(one_route, 5, "test")) == 5  # and it does not loop forever


class _Sure:
    """A stand-in model that is equally sure of every separator."""

    def __init__(self, probability: float) -> None:
        self.value = probability

    def probability(self, text: str, separator: re.Match[str]) -> float:
        return self.value


def test_the_model_only_adds_cuts_to_the_grammar_and_at_and_only_when_asked() -> None:
    def grammar(text: str) -> list[str]:
        return [p.strip() for p in text.split(";")]

    text = "salt, pepper and oil; lights on"
    never = grammar_then_model(grammar, _Sure(0.0), 0.5)  # type: ignore[arg-type]
    assert never(text) == ["salt, pepper and oil", "lights on"]
    always = grammar_then_model(grammar, _Sure(1.0), 0.5)  # type: ignore[arg-type]
    assert always(text) == ["salt", "pepper", "oil", "lights on"]
    at_and = grammar_then_model(grammar, _Sure(1.0), 0.5, only_and=True)  # type: ignore[arg-type]
    assert at_and(text) == ["salt, pepper", "oil", "lights on"]


def test_a_fitted_model_tells_a_join_from_a_title() -> None:
    requests = ["turn on the lights", "what is the weather", "lock the front door"]
    questions = ["who wrote pride and prejudice", "who wrote war and peace", "what is salt"]
    pairs = [Pair(a, b, " and ") for a in requests for b in questions] * 3
    model = BoundaryModel(pairs, questions, None)
    joined = "turn on the lights and who wrote pride and prejudice"
    joining, title = list(SEPARATOR.finditer(joined))
    assert model.probability(joined, joining) > 0.5 > model.probability(joined, title)
