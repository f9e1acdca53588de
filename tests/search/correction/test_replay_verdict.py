"""`search replay`: the verdict follows each part's outcome, and a session is rebuilt from
the turns its live session kept.

As in test_replay.py: traces recorded through the real Service into a real SQLite file,
replayed with the real CLI entry point in-process (scripted sources).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from search.config import load_config
from search.correction.replay import compare
from search.service import Service
from tests.search.correction.test_replay import (
    cli,
    ev,
    record,
    stored,
    without_timings,
    write_config,
)

PRESIDENT = "who is the current president of france"
LIGHT = "turn on the kitchen light"


def steps(chain: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return [e for e in chain if e["step"] == step]


def with_routing(path: Path, **routing: Any) -> Path:
    """The config at `path` with these `routing` keys set (write_config has no way in)."""
    data = yaml.safe_load(path.read_text())
    data["routing"].update(routing)
    path.write_text(yaml.safe_dump(data))
    return path


# --- a routing change after a divergence that is not one ----------------------------


@pytest.mark.parametrize("web", [{}, {"enabled": False}], ids=["web_answers", "web_disabled"])
def test_a_time_sensitive_redirect_that_is_gone_is_a_routing_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], web: dict[str, Any]
) -> None:
    """The redirect's own event is no routing step, but without it the part goes to kiwix
    instead of web: `replay` and `replay --all` must say routing changed and exit 1."""
    db = tmp_path / "traces.db"
    sources: dict[str, dict[str, Any]] = {"kiwix": {}, "web": web}
    keywords = {"kiwix": ["president"]}
    recorded = write_config(
        tmp_path / "a.yaml", db, keywords=keywords, sources=sources, capture_results=True
    )
    (original,) = record(recorded, [PRESIDENT])
    (redirect,) = steps(original.chain, "time_sensitive")
    assert (redirect["from_route"], redirect["to_route"]) == ("kiwix", "web")
    assert original.results[0].source == ("kiwix" if web else "web")

    off = with_routing(
        write_config(
            tmp_path / "off.yaml", db, keywords=keywords, sources=sources, capture_results=True
        ),
        time_sensitive={"enabled": False},
    )
    code, out = cli(capsys, "replay", original.trace_id, "--config", str(off))
    assert code == 1, out
    assert (
        f"part 0 {PRESIDENT!r}: first divergence: time_sensitive no longer happens, "
        "then route changed: web -> kiwix"
    ) in out
    assert "routing changed in 1 part(s)" in out
    marked = [line for line in out.splitlines() if "<-" in line]
    assert len(marked) == 1 and "time_sensitive" in marked[0]

    code, out = cli(capsys, "replay", original.trace_id, "--config", str(off), "--json")
    report = json.loads(out)
    assert code == 1 and report["routing_changed"] is True
    (part,) = report["parts"]
    assert part["divergence"]["kind"] == "route" and part["divergence"]["routing"] is True

    code, out = cli(capsys, "replay", "--all", "--config", str(off))
    assert code == 1, out
    assert "routing changed in 1 trace(s)" in out
    assert f"{original.trace_id} part 0 {PRESIDENT!r}: time_sensitive no longer happens" in out

    # Under the config it was recorded with, nothing changed.
    code, out = cli(capsys, "replay", original.trace_id, "--config", str(recorded))
    assert code == 0 and "identical chain" in out, out


def test_the_outcome_decides_whatever_diverged_first() -> None:
    """A rewrite that came or went, then another decision, is a decision change; the same
    rewrite with the same outcome, or a source's answer alone, is not."""
    rewritten = ev(0, "rewritten", query="and paris?", to="weather in paris", rule="place")
    old = [
        rewritten,
        ev(1, "intent_keyword", query="weather in paris", decision="web"),
        ev(2, "source_invoked", source="web", query="weather in paris", outcome="ok"),
    ]
    decided_elsewhere = [
        ev(0, "intent_default", query="and paris?", decision="kiwix", reason="no_match"),
        ev(1, "source_invoked", source="kiwix", query="and paris?", outcome="ok"),
    ]
    (part,) = compare(old, decided_elsewhere)
    assert part.first is not None and part.first.description == "rewritten no longer happens"
    assert part.divergence is not None and part.divergence.routing
    assert part.divergence.description == (
        "rewritten no longer happens, then decision changed: web -> kiwix"
    )

    same_route = [
        ev(0, "intent_keyword", query="and paris?", decision="web"),
        ev(1, "source_invoked", source="web", query="and paris?", outcome="ok"),
    ]
    (part,) = compare(old, same_route)
    assert part.divergence is not None and not part.divergence.routing

    failed = [*old[:2], ev(2, "source_invoked", source="web", query="x", outcome="error")]
    (part,) = compare(old, failed)
    assert part.divergence is not None and part.divergence.kind == "outcome"
    assert not part.divergence.routing  # an outcome, listed apart from the decisions


# --- an action lost to a disabled source --------------------------------------------


HOME = {
    "kiwix": {},
    "ha": {"control_prefix": "turn on", "allow_control": True},
    "web": {},
}


def record_acting(config_path: Path, query: str) -> Any:
    """`query` as the household asks it (authorized), so a command really acts."""

    async def run() -> Any:
        service = Service(load_config(config_path))
        await service.start()
        try:
            outcome = await service.search(query, authorized=True)
            assert [c.query for c in service.sources["ha"].acted] == [query]  # type: ignore[attr-defined]
            return outcome
        finally:
            await service.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("ha", "why"),
    [
        ({"enabled": False}, "ha skipped: disabled"),
        ({"allow_control": False}, "withheld: not_allowed"),
    ],
    ids=["disabled", "control_not_allowed"],
)
def test_an_action_that_no_longer_runs_is_an_action_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ha: dict[str, Any], why: str
) -> None:
    db = tmp_path / "traces.db"
    keywords = {"ha": ["light"]}
    acting = write_config(tmp_path / "a.yaml", db, keywords=keywords, sources=HOME)
    original = record_acting(acting, LIGHT)
    (act,) = steps(original.chain, "source_invoked")
    assert act["operation"] == "act"

    # Replayed as it was: the replay withholds the command, but it would act: no change.
    code, out = cli(capsys, "replay", original.trace_id, "--config", str(acting))
    assert code == 0, out

    changed = write_config(
        tmp_path / "b.yaml", db, keywords=keywords, sources={**HOME, "ha": {**HOME["ha"], **ha}}
    )
    code, out = cli(capsys, "replay", original.trace_id, "--config", str(changed))
    assert code == 1, out
    assert (
        f"first divergence: ha would not turn on the kitchen light ({why}) "
        "(it did turn on the kitchen light)"
    ) in out
    assert "routing changed in 1 part(s)" in out

    code, out = cli(capsys, "replay", original.trace_id, "--config", str(changed), "--json")
    report = json.loads(out)
    (part,) = [p for p in report["parts"] if p["part"] == "0"]
    assert part["divergence"]["kind"] == "action" and part["divergence"]["routing"]

    code, out = cli(capsys, "replay", "--all", "--config", str(changed))
    assert code == 1 and f"{original.trace_id} part 0 {LIGHT!r}: ha would not" in out, out


# --- the session a replay rebuilds ---------------------------------------------------


WEATHER = {"web": ["weather"]}
OSLO = "what will the weather be in oslo tomorrow"
PARIS = "and in paris?"


def converse(config_path: Path, turns: list[tuple[str, str, bool]]) -> list[Any]:
    """(session, query, dry run) in order, through one Service."""

    async def run() -> list[Any]:
        service = Service(load_config(config_path))
        await service.start()
        try:
            return [await service.search(q, session_id=s, dry_run=d) for s, q, d in turns]
        finally:
            await service.aclose()

    return asyncio.run(run())


def test_a_dry_run_turn_is_not_part_of_the_session_a_replay_rebuilds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry run leaves the session untouched, so the follow-up after it was not rewritten;
    its replay must not rewrite it either. (After a real turn it is rewritten.)"""
    db = tmp_path / "traces.db"
    config = write_config(tmp_path / "a.yaml", db, keywords=WEATHER, capture_results=True)
    _, previewed, _, followed = converse(
        config,
        [("m", OSLO, True), ("m", PARIS, False), ("n", OSLO, False), ("n", PARIS, False)],
    )
    assert not steps(previewed.chain, "rewritten")
    assert steps(followed.chain, "rewritten")  # the rule applies after a kept turn

    code, out = cli(capsys, "replay", previewed.trace_id, "--config", str(config), "--json")
    report = json.loads(out)
    assert code == 0, out
    assert report["session_turns"] == 0
    assert all(p["divergence"] is None for p in report["parts"])
    assert without_timings(stored(db, report["new_trace_id"])["chain"]) == without_timings(
        previewed.chain
    )

    code, out = cli(capsys, "replay", followed.trace_id, "--config", str(config), "--json")
    report = json.loads(out)
    assert code == 0 and report["session_turns"] == 1, out
    assert without_timings(report["new_chain"]) == without_timings(followed.chain)


def test_a_turn_refused_over_max_parts_is_not_part_of_the_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before routing (422), it never reached the session; routing it again would
    be refused too, and must not end the replay."""
    db = tmp_path / "traces.db"
    config = with_routing(write_config(tmp_path / "a.yaml", db, keywords=WEATHER), max_parts=2)
    refused, follow_up = converse(
        config,
        [("m", f"{OSLO}; latest news; history of rome", False), ("m", PARIS, False)],
    )
    assert refused.status_code == 422
    code, out = cli(capsys, "replay", follow_up.trace_id, "--config", str(config), "--json")
    assert code == 0, out
    assert json.loads(out)["session_turns"] == 0
