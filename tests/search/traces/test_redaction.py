"""`trace.redact: true` end to end: no word of a query survives in the stored row or in the
exported OpenTelemetry spans, whatever step carried it.

Requests go through the real `Service` over scripted sources (tests/support/scripted.py),
with a source kind of this module that also understands commands the way Home Assistant
does (slots, device targets, words that name no device) and one whose error message
quotes the query. Spans are taken from the SDK's in-memory exporter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from search.config import Config as RouterConfig
from search.config import parse_config
from search.observability.telemetry import build_otel_observer
from search.pseudonym import Pseudonymizer, key_path, read_key
from search.service import Service
from search.traces.rows import redact
from search.traces.store import SQLiteTraceStore, parse_filters
from sources.base import Command, Item, Source, SourceError
from sources.registry import SourceConfig, register_kind
from tests.support import scripted


class Config(scripted.Config):
    type: Literal["hearing"]  # type: ignore[assignment]
    echo: bool = False  # fail with a message that quotes the query


class Hearing(scripted.ScriptedSource):
    """A scripted source that matches commands to devices as Home Assistant does, or
    (with `echo`) fails with the query in its error message as some upstreams do."""

    kind = "hearing"

    def __init__(self, name: str, config: Config) -> None:
        super().__init__(name, config)
        self.echo = config.echo

    async def search(self, query: str) -> list[Item]:
        if self.echo:
            last = query.split()[-1].capitalize()
            raise SourceError(f"upstream: nothing for {query.upper()!r} (last word {last})")
        return await super().search(query)

    async def recognize(self, command: Command) -> Command:
        name = command.target.removeprefix("the ")
        recognized = {
            "recognizer": self.kind,
            "intent": "HassTurnOn",
            "matched": True,
            "slots": {"name": name, "domain": "light"},
            "targets": ["light." + name.replace(" ", "_")],
        }
        return Command(command.action, command.target, command.query, recognized)

    async def unplaced(self, command: Command) -> tuple[str, ...]:
        return tuple(w for w in command.target.split() if w == "nowhere")


def build(name: str, config: SourceConfig) -> Source:
    assert isinstance(config, Config)
    return Hearing(name, config)


register_kind("hearing", __name__)

# Each request, and the words of it that must not leave the process or reach the disk.
SESSION = [
    "switch on the zanzibar lamp",
    "how old is it?",  # rewritten: carried "the zanzibar lamp", replaced "it"
]
ACTED = [
    "switch on the wombat lamp",  # recognized (slots, targets), then acted on
    "switch on the nowhere lamp",  # a word naming no device: withheld (unplaced)
    "if it snows in timbuktu, switch on the marmot lamp",  # conditional: withheld
    "switch on the ocelot lamp in ten minutes",  # deferred: withheld (when)
]
DRY_RUN = "switch on the quokka lamp"
OTHERS = [
    "weather in kathmandu",  # forecast refuses: fallback to web
    "weather in kathmandu",  # again: web from the result cache
    "gossip about the pangolin tiara; tell me about the capybara",  # an error quoting it
    "remind me about the dugong",  # unserved (a keyword none rule), nearest "remind"
]
SECRET_WORDS = [
    "zanzibar",
    "wombat",
    "nowhere",
    "timbuktu",
    "marmot",
    "ocelot",
    "minutes",
    "quokka",
    "kathmandu",
    "pangolin",
    "tiara",
    "capybara",
    "dugong",
    "remind",
]


def config(db: Path) -> RouterConfig:
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "shipped_routes": False,
                "keywords": {
                    "ha": ["lamp"],
                    "forecast": ["weather", "snows"],
                    "gossip": ["gossip"],
                },
                "none_keywords": ["remind"],
                "semantic": {"enabled": False},
            },
            "sources": {
                "kiwix": {"type": "scripted"},
                "web": {"type": "scripted"},
                "forecast": {"type": "scripted", "fail": "unavailable", "fallback": ["web"]},
                "ha": {"type": "hearing", "control_prefix": "switch on", "allow_control": True},
                "gossip": {"type": "hearing", "echo": True},
            },
            "trace": {"path": str(db), "redact": True},
        }
    )


def strings(value: Any) -> list[str]:
    """Every string in `value` (keys included), at any depth."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [str(k), *strings(v)]]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings(v)]
    return [str(value)]


def span_texts(span: ReadableSpan) -> list[str]:
    texts = [span.name, str(span.status.description or "")]
    texts += strings(dict(span.attributes or {}))
    for event in span.events:
        texts += [event.name, *strings(dict(event.attributes or {}))]
    return texts


def leaked(texts: list[str]) -> set[str]:
    joined = "\n".join(texts).lower()
    return {word for word in SECRET_WORDS if word in joined}


async def run_everything(db: Path) -> tuple[list[Any], list[ReadableSpan]]:
    cfg = config(db)
    exporter = InMemorySpanExporter()
    observer = build_otel_observer(cfg, exporter, batch=False)
    store = SQLiteTraceStore(cfg.trace, linger_s=0)
    service = Service(cfg, traces=store, observers=[observer])
    await service.start()
    outcomes = []
    try:
        for query in SESSION:
            outcomes.append(
                await service.search(query, session_id="s1", authorized=True, explain=True)
            )
        for query in ACTED:
            outcomes.append(await service.search(query, authorized=True, explain=True))
        outcomes.append(await service.search(DRY_RUN, dry_run=True, explain=True))
        for query in OTHERS:
            outcomes.append(await service.search(query, explain=True))
    finally:
        await service.aclose()
    observer.flush()
    return outcomes, list(exporter.get_finished_spans())


async def test_no_word_of_any_query_survives_in_the_store_or_the_spans(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    outcomes, spans = await run_everything(db)
    chains = [e for outcome in outcomes for e in outcome.chain]

    # The requests really produced every step that carries the user's words.
    steps = {e["step"] for e in chains}
    assert {
        "rewritten",
        "conditional_detected",
        "decomposed",
        "command_recognized",
        "control_withheld",
        "source_invoked",
        "fallback",
        "result_cache_hit",
        "error",
        "intent_keyword",
        "intent_default",
        "planned",
    } <= steps
    reasons = {e["reason"] for e in chains if e["step"] == "control_withheld"}
    assert {"dry_run", "conditional", "deferred"} <= reasons
    assert any(e.get("unplaced") == ["nowhere"] for e in chains)
    assert any(e.get("operation") == "act" for e in chains)
    assert any("PANGOLIN" in str(e.get("message")) for e in chains)
    assert leaked(strings(chains)) == set(SECRET_WORDS)  # all there before redaction

    # Nothing of them on disk, in any file of the store.
    data = b"".join(p.read_bytes() for p in sorted(db.parent.glob(db.name + "*"))).lower()
    assert {w for w in SECRET_WORDS if w.encode() in data} == set()
    reader = SQLiteTraceStore(config(db).trace)
    stored = [reader.get_trace(outcome.trace_id) for outcome in outcomes]
    assert all(t is not None and t["redacted"] for t in stored)
    assert leaked(strings(stored)) == set()

    # Nor in what the collector would receive.
    assert spans and leaked([t for span in spans for t in span_texts(span)]) == set()

    # What is not the user's stays readable: structure, sources, reasons, the action.
    key = read_key(key_path(db))
    assert key is not None
    digest = Pseudonymizer(key)
    events = [e for t in stored if t is not None for e in t["chain"]]
    assert [e["step"] for e in events] == [e["step"] for e in chains]
    withheld = [e for e in events if e["step"] == "control_withheld"]
    assert {e["reason"] for e in withheld} == reasons
    assert {e["command"]["action"] for e in withheld} == {"switch on"}
    assert digest("the quokka lamp") in [e["command"]["target"] for e in withheld]
    rewritten = next(e for e in events if e["step"] == "rewritten")
    assert (rewritten["from"], rewritten["rule"]) == (digest("how old is it"), "pronoun")
    recognized = [e for e in events if e["step"] == "command_recognized"]
    slots = {"name": digest("wombat lamp"), "domain": digest("light")}
    assert slots in [e["slots"] for e in recognized]
    assert {e["intent"] for e in recognized} == {"HassTurnOn"}
    fallback = next(e for e in events if e["step"] == "fallback")
    assert (fallback["from_source"], fallback["to_source"]) == ("forecast", "web")
    failed = next(e for e in events if e["step"] == "source_invoked" and e["source"] == "gossip")
    assert failed["message"].startswith("upstream: nothing for 'hmac-sha256:")
    assert (failed["outcome"], failed["reason"]) == ("error", "error")

    # The exact text still finds its trace; a label keeps the pseudonym of its part.
    assert reader.list_traces(parse_filters({"q": "remind me about the dugong"}))["total"] == 1
    unserved = outcomes[-1].trace_id
    label = reader.add_label(unserved, "0", "web", ["kiwix", "web", "forecast", "ha", "gossip"])
    assert label.query == digest("remind me about the dugong")
    reader.close_sync()


def test_a_field_nobody_listed_is_a_pseudonym_and_messages_lose_every_query_word() -> None:
    digest = Pseudonymizer(b"k" * 32)
    event = {
        "step": "some_new_step",
        "seq": 4,
        "part": "1.0",
        "query": "Dim The Hallway Sconce",
        "spoken": {"words": ["hallway", "sconce"], "count": 2, "loud": True},
        "source": "ha",
        "reason": "timeout",
        "message": "ha said: no device called 'Hallway' (sconce?) within 5s; the rest was fine",
    }
    out = redact(event, digest)
    assert out["spoken"] == {
        "words": [digest("hallway"), digest("sconce")],
        "count": 2,
        "loud": True,
    }
    assert (out["step"], out["seq"], out["part"], out["source"], out["reason"]) == (
        "some_new_step",
        4,
        "1.0",
        "ha",
        "timeout",
    )
    message = out["message"]
    assert "hallway" not in message.lower() and "sconce" not in message.lower()
    assert message.startswith("ha said: no device called 'hmac-sha256:")
    # Its own words stay, but "the" is a word of the query too (words of two letters are not).
    assert message.endswith(f"within 5s; {digest('the')} rest was fine")
    assert json.dumps(redact(out, digest)) == json.dumps(out)  # redacting twice changes nothing
