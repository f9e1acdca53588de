"""What the Assist agent says for each kind of part result (speech.py is pure: it imports
nothing from Home Assistant, so it is loaded here by its path and run in this venv).

The bodies are the router's `/search` response shape (search/api/schemas.py), written out
for the statuses a real run produces rarely ("unserved", "error", "empty") and checked
end to end against real HA in test_assist_agent.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SPEECH = ROOT / "homeassistant" / "custom_components" / "search_router" / "speech.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("search_router_speech", SPEECH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


speech = load()


def part(status: str, query: str = "q", **extra: Any) -> dict[str, Any]:
    return {"query": query, "status": status, "items": [], "route": None, **extra}


def test_an_article_is_spoken_as_its_first_sentence_only() -> None:
    text = "Romeo and Juliet is a tragedy. It tells the story of two lovers. " * 3
    body = {"results": [part("ok", items=[{"title": "Romeo and Juliet", "text": text}])]}
    assert speech.speech_of(body) == "Romeo and Juliet is a tragedy."


def test_a_snippet_opening_mid_text_is_spoken_without_its_ellipsis() -> None:
    assert (
        speech.first_sentence("…designed by Gustave Eiffel. More.") == "designed by Gustave Eiffel."
    )


def test_a_long_sentence_is_cut_at_a_word() -> None:
    said = speech.first_sentence("word " * 200)
    assert len(said) <= speech.MAX_SENTENCE_CHARS + 2 and said.endswith("word …")


def test_several_short_device_answers_are_one_sentence() -> None:
    items = [{"title": f"L{i}", "text": f"Light {i} is on"} for i in range(7)]
    said = speech.part_sentence(part("ok", items=items))
    assert (
        said
        == "Light 0 is on; Light 1 is on; Light 2 is on; Light 3 is on; Light 4 is on; and 2 more."
    )


def test_unserved_withheld_empty_and_error_parts_are_said_plainly() -> None:
    body = {
        "results": [
            part("unserved", "set an alarm"),
            part(
                "withheld",
                "unlock the front door",
                withheld={"reason": "not_authorized", "reasons": ["not_authorized"]},
            ),
            part("empty", "zzzz"),
            part("error", "weather", source=None, route="forecast"),
        ]
    }
    assert speech.speech_of(body) == (
        "I can't help with “set an alarm”: none of my sources serves that. "
        "I did not do “unlock the front door”: not authorized. "
        "I found nothing for “zzzz”. "
        "I couldn't answer “weather”: forecast failed."
    )


def test_the_debug_data_names_every_part_and_links_the_trace() -> None:
    body = {
        "trace_id": "abc",
        "cached": False,
        "fallback_occurred": False,
        "results": [part("ok", route="kiwix", stage="intent_keyword", confidence=0.9)],
        "explanation": [{"step": "source_invoked", "operation": "act", "outcome": "error"}],
    }
    data = speech.debug_data(body, "http://router:8080/")
    assert data["trace_url"] == "http://router:8080/ui#/trace/abc"
    assert data["acted"] is False  # an act that failed changed nothing
    assert data["recognized"] == []
    assert data["parts"] == [
        {
            "query": "q",
            "status": "ok",
            "route": "kiwix",
            "stage": "intent_keyword",
            "confidence": 0.9,
            "source": None,
        }
    ]
