"""`search replay`: captured answers reproduce the chain; a config change shows as divergence.

Traces are recorded through the real Service into a real SQLite file, then replayed with
the real CLI entry point (`search.cli.main`) in-process, since the scripted source kind is
registered for this process only.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from search.cli import main
from search.config import TraceConfig, load_config
from search.correction.replay import CaptureBook, ReplaySource, compare
from search.service import Service
from search.traces.store import SQLiteTraceStore, TraceFilter
from tests.support.ports import free_port
from tests.support.scripted import ScriptedSource

KEYWORDS = {"ha": ["lights"], "web": ["news"]}
SOURCES: dict[str, dict[str, Any]] = {
    "kiwix": {},
    "ha": {"fail": "unavailable", "fallback": ["web"]},
    "web": {"items": 3},
}


def write_config(
    path: Path,
    db: Path,
    *,
    keywords: dict[str, list[str]] | None = None,
    sources: dict[str, dict[str, Any]] | None = None,
    **trace: Any,
) -> Path:
    data = {
        "server": {"port": free_port()},  # nothing listens there: the CLI runs in-process
        "routing": {
            "default_source": "kiwix",
            "keywords": keywords or KEYWORDS,
            "shipped_routes": False,
            "semantic": {"enabled": False},
        },
        "sources": {n: {"type": "scripted", **e} for n, e in (sources or SOURCES).items()},
        "trace": {"path": str(db), **trace},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def record(config_path: Path, queries: list[str]) -> list[Any]:
    async def run() -> list[Any]:
        service = Service(load_config(config_path))
        await service.start()
        try:
            return [await service.search(q) for q in queries]
        finally:
            await service.aclose()

    return asyncio.run(run())


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def without_timings(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("t_ms", "elapsed_ms")} for e in chain]


def stored(db: Path, trace_id: str) -> dict[str, Any]:
    store = SQLiteTraceStore(TraceConfig(path=str(db)))
    try:
        trace = store.get_trace(trace_id)
        assert trace is not None
        return trace
    finally:
        store.close_sync()


def test_replaying_a_captured_fallback_reproduces_the_identical_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traces.db"
    recorded = write_config(tmp_path / "a.yaml", db, capture_results=True)
    (original,) = record(recorded, ["lights status and also latest news"])
    assert any(e["step"] == "fallback" for e in original.chain)
    # Under a config where ha now works and web gives 5 items, the captures still decide:
    # the replay is of what happened, not of what the sources would say today.
    healed = write_config(
        tmp_path / "healed.yaml",
        db,
        capture_results=True,
        sources={"kiwix": {}, "ha": {"fallback": ["web"]}, "web": {"items": 5}},
    )
    code, out = cli(capsys, "replay", original.trace_id, "--config", str(healed), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["routing_changed"] is False
    assert all(p["divergence"] is None for p in report["parts"])
    assert {(a["source"], a["from"]) for a in report["answers"]} == {
        ("ha", "capture"),
        ("web", "capture"),
    }
    assert without_timings(report["new_chain"]) == without_timings(original.chain)
    # The new run is its own trace, linked to the original.
    new = stored(db, report["new_trace_id"])
    assert new["replay_of"] == original.trace_id
    assert without_timings(new["chain"]) == without_timings(original.chain)


def test_a_replay_without_captures_calls_sources_live_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traces.db"
    config = write_config(tmp_path / "a.yaml", db)  # capture_results off
    (original,) = record(config, ["lights status"])
    code, out = cli(capsys, "replay", original.trace_id, "--config", str(config))
    assert code == 0, out
    assert "ha 'lights status': LIVE (no capture)" in out
    assert "web 'lights status': LIVE (no capture)" in out
    assert "identical chain" in out


def test_after_a_config_change_replay_marks_the_divergence_and_all_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traces.db"
    before = write_config(tmp_path / "before.yaml", db, capture_results=True)
    lights, news, rome = record(before, ["lights status", "latest news", "history of rome"])
    # The fix under test: lights questions now go to web directly.
    after = write_config(
        tmp_path / "after.yaml", db, capture_results=True, keywords={"web": ["news", "lights"]}
    )

    code, out = cli(capsys, "replay", lights.trace_id, "--config", str(after))
    assert code == 1, out
    marked = [line for line in out.splitlines() if "<-" in line]
    assert len(marked) == 1
    assert "intent_keyword ha" in marked[0] and "intent_keyword web" in marked[0]
    assert "decision changed: ha -> web" in marked[0]
    assert "part 0 'lights status': first divergence: decision changed: ha -> web" in out

    code, out = cli(capsys, "replay", "--all", "--config", str(after))
    assert code == 1, out
    assert "replayed 3 traces" in out
    assert "routing changed in 1 trace(s)" in out
    assert f"{lights.trace_id} part 0 'lights status': decision changed: ha -> web" in out
    assert news.trace_id not in out and rome.trace_id not in out

    # The unchanged config is a clean sweep (replays of replays are not swept again).
    code, out = cli(capsys, "replay", "--all", "--config", str(before))
    assert code == 0, out
    assert "replayed 3 traces (3 entirely from captures" in out
    assert "no routing decision changed" in out


def test_a_fallback_that_no_longer_fires_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traces.db"
    before = write_config(tmp_path / "before.yaml", db, capture_results=True)
    (lights,) = record(before, ["lights status"])
    no_fallback = write_config(
        tmp_path / "after.yaml",
        db,
        capture_results=True,
        sources={"kiwix": {}, "ha": {"fail": "unavailable"}, "web": {"items": 3}},
    )
    code, out = cli(capsys, "replay", lights.trace_id, "--config", str(no_fallback))
    assert code == 1, out
    assert "first divergence: fallback no longer fires (ha -> web)" in out


def test_all_with_failed_only_and_since_picks_the_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traces.db"
    sources = {**SOURCES, "broken": {"fail": "error"}}
    config = write_config(
        tmp_path / "a.yaml",
        db,
        capture_results=True,
        sources=sources,
        keywords={**KEYWORDS, "broken": ["gizmo"]},
    )
    record(config, ["gizmo one", "lights status", "gizmo two"])
    code, out = cli(capsys, "replay", "--all", "--failed-only", "--config", str(config))
    assert code == 0, out
    assert "replayed 2 traces" in out
    code, out = cli(capsys, "replay", "--all", "--since", "2099-01-01", "--config", str(config))
    assert code == 0 and "replayed 0 traces" in out


def test_redacted_and_unknown_traces_cannot_be_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traces.db"
    config = write_config(tmp_path / "a.yaml", db, redact=True)
    (original,) = record(config, ["lights status"])
    code, out = cli(capsys, "replay", original.trace_id, "--config", str(config))
    assert code == 2 and "stored redacted" in out
    code, out = cli(capsys, "replay", "0" * 32, "--config", str(config))
    assert code == 2 and "no such trace" in out
    code, out = cli(capsys, "replay", "--config", str(config))
    assert code == 2 and "either a trace ID or --all" in out
    code, out = cli(capsys, "replay", "--all", "--config", str(config))
    assert code == 0 and "skipped 1 (redacted)" in out


def test_replaying_a_cache_hit_reproduces_the_cache_hit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traces.db"
    config = write_config(tmp_path / "a.yaml", db, capture_results=True)
    _, second = record(config, ["history of rome", "history of rome"])
    assert [e["step"] for e in second.chain] == ["intent_default", "result_cache_hit"]
    code, out = cli(capsys, "replay", second.trace_id, "--config", str(config), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert without_timings(report["new_chain"]) == without_timings(second.chain)
    assert report["answers"] == []  # no source was called at all


# --- the comparison itself -----------------------------------------------------------


def ev(seq: int, step: str, part: str = "0", **fields: Any) -> dict[str, Any]:
    return {"step": step, "seq": seq, "t_ms": float(seq), "part": part, **fields}


def test_the_same_decision_by_another_stage_or_from_cache_is_not_a_divergence() -> None:
    old = [
        ev(0, "intent_cached", query="x", decision="web"),
        ev(1, "result_cache_hit", source="web", query="x"),
    ]
    new = [
        ev(0, "intent_keyword", query="x", decision="web", discourse_escalated=False),
        ev(
            1,
            "source_invoked",
            source="web",
            query="x",
            outcome="ok",
            result_count=2,
            elapsed_ms=3.0,
        ),
    ]
    (part,) = compare(old, new)
    assert part.divergence is None


def test_divergences_are_named_and_classified() -> None:
    old = [
        ev(0, "intent_keyword", query="x", decision="ha"),
        ev(1, "source_invoked", source="ha", query="x", outcome="ok", result_count=1),
    ]
    new = [
        ev(0, "intent_keyword", query="x", decision="ha"),
        ev(
            1,
            "source_invoked",
            source="ha",
            query="x",
            outcome="error",
            reason="connection_refused",
        ),
        ev(2, "fallback", from_source="ha", to_source="web", reason="connection_refused"),
        ev(3, "source_invoked", source="web", query="x", outcome="ok", result_count=1),
        ev(4, "intent_keyword", part="1", query="y", decision="web"),
    ]
    first, second = compare(old, new)
    # The first divergence is an outcome; the fallback it set off is the part's routing
    # change (web answered, not ha), and the verdict says both.
    assert first.first is not None and not first.first.routing
    assert first.first.description == "ha outcome changed: ok -> error/connection_refused"
    assert first.first.row == 1
    assert first.divergence is not None and first.divergence.routing
    assert first.divergence.description == (
        "ha outcome changed: ok -> error/connection_refused, then fallback now fires (ha -> web)"
    )
    assert first.divergence.row == 2  # the fallback's row is the one marked
    assert second.divergence is not None and second.divergence.kind == "part_new"
    assert second.divergence.routing


async def test_the_replay_source_answers_from_the_book_and_starts_the_real_one_only_if_needed() -> (
    None
):
    from search.correction.replay import BookHolder
    from tests.support.scripted import Config as ScriptedConfig

    inner = ScriptedSource("web", ScriptedConfig(type="scripted", items=1))
    holder = BookHolder(
        CaptureBook(
            [
                {"source": "web", "query": "a", "items": [{"title": "T", "text": "captured"}]},
                {
                    "source": "web",
                    "query": "b",
                    "error": {
                        "outcome": "error",
                        "reason": "server_error",
                        "message": "web answered 503",
                    },
                },
            ]
        )
    )
    source = ReplaySource(inner, holder)
    await source.start()
    items = await source.search("a")
    assert [i.text for i in items] == ["captured"] and inner.calls == 0
    with pytest.raises(Exception) as info:
        await source.search("b")
    assert getattr(info.value, "reason", None) == "server_error"
    assert str(info.value) == "web answered 503"
    live = await source.search("c")
    assert inner.calls == 1 and live[0].text == "text 0 about c"
    assert [(a.query, a.how) for a in holder.book.log] == [
        ("a", "capture"),
        ("b", "capture"),
        ("c", "live"),
    ]
    await source.aclose()


def test_replays_are_stored_and_listed_as_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traces.db"
    config = write_config(tmp_path / "a.yaml", db, capture_results=True)
    (original,) = record(config, ["lights status"])
    assert cli(capsys, "replay", original.trace_id, "--config", str(config))[0] == 0
    store = SQLiteTraceStore(TraceConfig(path=str(db)))
    page = store.list_traces(TraceFilter())
    store.close_sync()
    assert page["total"] == 2
    assert [t["replay_of"] for t in page["traces"]] == [original.trace_id, None]


def test_a_stage_that_passed_is_shown_but_is_no_divergence() -> None:
    old = [
        ev(
            0,
            "intent_semantic",
            query="x",
            decision=None,
            outcome="below_threshold",
            similarity=0.3,
        ),
        ev(1, "intent_llm", query="x", decision="web", discourse_escalated=False),
        ev(2, "source_invoked", source="web", query="x", outcome="ok", result_count=2),
    ]
    new = [
        ev(0, "intent_cached", query="x", decision="web"),
        ev(1, "source_invoked", source="web", query="x", outcome="ok", result_count=2),
    ]
    (part,) = compare(old, new)
    assert part.divergence is None
    assert len(part.rows) == 3 and part.rows[0] == (old[0], None)


def test_a_follow_up_is_replayed_in_its_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "what about tomorrow?" was asked as the session's previous question for tomorrow;
    replaying it alone would lose that (a false "decision changed"), so replay rebuilds the
    session from the earlier turns in the store, and a config change reaches the follow-up
    too."""
    db = tmp_path / "traces.db"
    keywords = {"ha": ["lights"], "web": ["news", "weather"]}
    config_path = write_config(tmp_path / "config.yaml", db, keywords=keywords)

    async def converse() -> list[Any]:
        service = Service(load_config(config_path))
        await service.start()
        try:
            return [
                await service.search("latest news", session_id="other-room"),
                await service.search("weather in paris", session_id="kitchen"),
                await service.search("what about tomorrow?", session_id="kitchen"),
            ]
        finally:
            await service.aclose()

    *_, follow_up = asyncio.run(converse())
    rewritten, decided = follow_up.chain[:2]
    assert (rewritten["step"], rewritten["to"]) == ("rewritten", "weather in paris tomorrow")
    assert (decided["step"], decided["decision"]) == ("intent_keyword", "web")
    assert stored(db, follow_up.trace_id)["session_id"] == "kitchen"

    code, out = cli(capsys, "replay", follow_up.trace_id, "--config", str(config_path), "--json")
    result = json.loads(out)
    assert code == 0 and result["session_turns"] == 1
    replayed = stored(db, result["new_trace_id"])
    assert without_timings(replayed["chain"]) == without_timings(
        stored(db, follow_up.trace_id)["chain"]
    )

    # Move "weather" to ha: the earlier turn now goes there, and so does the follow-up.
    moved = write_config(
        tmp_path / "moved.yaml", db, keywords={"ha": ["lights", "weather"], "web": ["news"]}
    )
    code, out = cli(capsys, "replay", follow_up.trace_id, "--config", str(moved))
    assert code == 1, out
    assert "rebuilt from 1 earlier turn" in out


def test_traces_are_listed_by_session(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    config_path = write_config(tmp_path / "config.yaml", db)

    async def run() -> None:
        service = Service(load_config(config_path))
        await service.start()
        try:
            await service.search("latest news", session_id="a")
            await service.search("lights status", session_id="b")
            await service.search("latest news")
        finally:
            await service.aclose()

    asyncio.run(run())
    store = SQLiteTraceStore(TraceConfig(path=str(db)))
    try:
        page = store.list_traces(TraceFilter(session="b"))
        assert [t["query"] for t in page["traces"]] == ["lights status"]
        assert page["traces"][0]["session_id"] == "b"
    finally:
        store.close_sync()


def test_a_request_that_newly_fails_is_an_outcome_not_a_routing_change() -> None:
    """After a fit moves a part to a source that is down, the request-wide error that
    follows is listed apart: `replay --all` lists only the decision as changed."""
    from search.correction.replay import compare

    def event(seq: int, step: str, part: str, **fields: object) -> dict[str, object]:
        return {"step": step, "seq": seq, "t_ms": float(seq), "part": part, **fields}

    old = [
        event(0, "intent_keyword", "0", query="q", decision="kiwix"),
        event(
            1,
            "source_invoked",
            "0",
            source="kiwix",
            query="q",
            outcome="ok",
            elapsed_ms=1.0,
            result_count=2,
        ),
    ]
    new = [
        event(0, "intent_keyword", "0", query="q", decision="ha"),
        event(1, "source_skipped", "0", source="ha", query="q", reason="disabled"),
        event(2, "error", "", query="q", error_type="all_parts_failed", message="m"),
    ]
    found = {c.part: c.divergence for c in compare(old, new)}
    request, part = found[""], found["0"]
    assert request is not None and not request.routing
    assert request.description == "error now happens"
    assert (
        part is not None and part.routing and part.description == ("decision changed: kiwix -> ha")
    )
