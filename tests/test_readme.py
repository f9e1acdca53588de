"""The README's and docs/'s examples are what the service says: contract-shaped events, and a request a
newcomer can paste (the service refuses a body that is not declared JSON)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.app import CONTRACT_FIELDS, assert_confidence, assert_contract_event

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The README and the reference pages it links to: every example in them is checked.
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")))
TEXT = "\n".join(page.read_text("utf-8") for page in PAGES)


def _json_blocks() -> list[str]:
    return re.findall(r"```json\n(.*?)```", TEXT, flags=re.DOTALL)


def _events() -> list[dict[str, Any]]:
    """Every event shown: the main example's chain, and the one-line chains (shown without
    `seq` and `t_ms`)."""
    found: list[dict[str, Any]] = []
    for block in _json_blocks():
        if block.lstrip().startswith("{\n"):
            body = json.loads(block)
            found += body.get("explanation") or []
        else:
            found += [json.loads(line) for line in block.splitlines() if line.startswith("{")]
    return [e for e in found if isinstance(e, dict) and "step" in e]


def test_the_main_example_chain_is_contract_shaped() -> None:
    [example] = [
        json.loads(b)
        for b in _json_blocks()
        if b.lstrip().startswith("{\n") and '"explanation"' in b
    ]
    assert example["explanation"], "the example shows its chain"
    for event in example["explanation"]:
        assert_contract_event(event)


def test_every_shown_intent_event_has_its_fields_and_confidence() -> None:
    intents = [e for e in _events() if e["step"].startswith("intent_")]
    assert {e["step"] for e in intents} >= {"intent_keyword", "intent_semantic", "intent_default"}
    for event in intents:
        missing = CONTRACT_FIELDS.get(event["step"], set()) - set(event) - {"seq", "t_ms"}
        assert not missing, f"{event['step']} lacks {missing}"
        assert_confidence(event)


def test_the_example_request_declares_its_body_json() -> None:
    for command in re.findall(r"curl [^\n]*(?:\\\n[^\n]*)*", TEXT):
        if " -d " in command or "--data" in command:
            assert "Content-Type: application/json" in command, command
