"""The CLI's text form of a response's results."""

from typing import Any

from search.traces.render import chain_table, results_text


def _part(query: str, **fields: Any) -> dict[str, Any]:
    return {"query": query, "source": "ha", "status": "ok", "items": [], **fields}


def test_a_condition_reads_if_or_unless_as_the_request_said() -> None:
    condition = _part("it rains")
    plain = results_text([_part("close the window", condition=condition)])
    negated = results_text([_part("close the window", condition={**condition, "negated": True})])
    assert plain.splitlines()[0].startswith("[0] if 'it rains'")
    assert negated.splitlines()[0].startswith("[0] unless 'it rains'")


def test_an_unserved_part_says_no_source() -> None:
    text = results_text([{**_part("set an alarm"), "source": None, "status": "unserved"}])
    assert text == "[0] 'set an alarm' -> no source (unserved)"


def test_the_world_stage_row_says_the_pair_and_the_time_reading() -> None:
    event = {
        "step": "intent_world",
        "seq": 1,
        "t_ms": 2.5,
        "part": "0",
        "query": "when is the next eclipse",
        "decision": "web",
        "world": 0.85,
        "time_sensitive": True,
    }
    row = chain_table([event]).splitlines()[-1]
    assert "intent_world" in row and "web" in row
    assert "world 0.85, answer changes with time" in row
    fixed = chain_table([{**event, "decision": "kiwix", "time_sensitive": False}])
    assert "world 0.85, answer does not change" in fixed
