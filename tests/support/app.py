"""Run the real app for tests: in-process over ASGI, or under uvicorn on loopback."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette

from search.api.app import create_app
from search.config import Config, parse_config
from search.service import Service
from tests.support.ports import free_port

# The fields the contract promises for each step (besides step/seq/t_ms/part).
CONTRACT_FIELDS: dict[str, set[str]] = {
    "decomposed": {"query", "parts"},
    "conditional_detected": {"query", "condition", "consequence", "remainder"},
    "intent_keyword": {"query", "decision", "discourse_escalated"},
    "intent_cached": {"query", "decision"},
    "intent_semantic": {"query", "matched_query", "similarity", "decision"},
    "intent_llm": {"query", "decision", "discourse_escalated"},
    "intent_default": {"query", "decision", "reason"},
    "result_cache_hit": {"source", "query"},
    "source_invoked": {"source", "query", "elapsed_ms", "outcome", "result_count"},
    "fallback": {"from_source", "to_source", "query", "reason"},
    "fusion": {"query", "sources"},
    "error": {"query", "error_type", "message"},
    "control_withheld": {"query", "source", "reason"},
}
WITHHELD_REASONS = {
    "not_allowed",
    "not_authorized",
    "dry_run",
    "replay",
    "conditional",
    "deferred",
    "low_confidence",
    "read_only",
    "rewritten",
}


def assert_contract_event(event: dict[str, Any]) -> None:
    """Every event has the common fields and its step's fields, with the right types."""
    assert isinstance(event["step"], str)
    assert isinstance(event["seq"], int)
    assert isinstance(event["t_ms"], float)
    assert isinstance(event["part"], str)
    missing = CONTRACT_FIELDS.get(event["step"], set()) - set(event)
    assert not missing, f"{event['step']} lacks {missing}: {event}"
    if event["step"] == "source_invoked":
        assert event["outcome"] in {"ok", "empty", "error", "timeout"}
        assert isinstance(event["elapsed_ms"], float)
    if event["step"] == "control_withheld":
        assert event["reason"] in WITHHELD_REASONS
    if event["step"] == "conditional_detected":
        assert isinstance(event.get("negated"), bool)
    if event["step"].startswith("intent_"):
        assert_confidence(event)


def assert_confidence(event: dict[str, Any]) -> None:
    """An intent_* event's calibrated confidence and its candidates, the winner first: the
    route it decided (or `none` for an unserved part), at the event's confidence."""
    confidence, candidates = event.get("confidence"), event.get("candidates")
    assert isinstance(confidence, float | int) and 0 <= confidence <= 1, event
    assert isinstance(candidates, list), event
    routes = [c["route"] for c in candidates]
    assert len(routes) == len(set(routes)), event
    decided = event.get("decision") or ("none" if event.get("outcome") == "unserved" else None)
    if candidates and decided is not None:
        assert candidates[0]["route"] == decided, event
        assert abs(candidates[0]["confidence"] - confidence) < 1e-3, event
    for candidate in candidates:
        assert isinstance(candidate["route"], str), candidate
        assert 0 <= candidate["confidence"] <= 1, candidate
        assert (
            abs(candidates[0]["confidence"] - candidate["confidence"] - candidate["margin"]) < 1e-3
        ), candidate


def scripted_config(
    sources: dict[str, dict[str, Any]],
    keywords: dict[str, list[str]] | None = None,
    **routing: Any,
) -> Config:
    """A config over scripted sources, with only these keyword rules (none of the shipped
    routes') and no semantic stage."""
    routing_section: dict[str, Any] = {
        "default_source": next(iter(sources)),
        "shipped_routes": False,
        "keywords": keywords or {},
        "semantic": {"enabled": False},
        **routing,
    }
    entries = {name: {"type": "scripted", **entry} for name, entry in sources.items()}
    return parse_config(
        {"routing": routing_section, "sources": entries, "trace": {"enabled": False}}
    )


@asynccontextmanager
async def asgi_client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client speaking to the app in-process, with its lifespan run."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            yield client


@contextmanager
def uvicorn_server(app: Starlette, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `app` with uvicorn on a port of `host` (loopback, or an address of a test
    network the suite made) in a thread; yields the base URL."""
    port = free_port()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    # The lifespan loads the model and embeds the exemplars: seconds alone, much longer on a
    # two-core machine busy with other work. Failing is for a server that will never start.
    deadline = time.monotonic() + 180
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def build_app(config: Config, **service_kwargs: Any) -> Starlette:
    return create_app(config, Service(config, **service_kwargs))


def run(coro: Any) -> Any:
    return asyncio.run(coro)
