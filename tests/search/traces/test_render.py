"""The CLI's text form of a response's results."""

from typing import Any

from search.traces.render import results_text


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
