"""An unexpected exception: logged once with its traceback, shown nowhere with its secrets.

A scripted source raises a RuntimeError whose message quotes a configured secret (the LLM
API key, the service's own bearer token) and a URL with credentials, as a careless driver
or upstream would. Over real HTTP (uvicorn on loopback) with a real SQLite trace store,
the response, its explanation, the stored trace and the server log must carry the message
with `***` in place of each secret, and the log must hold the traceback exactly once.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from search.api.app import create_app
from search.config import parse_config
from search.service import Service
from tests.support.app import uvicorn_server

API_KEY = "sk-live-Kq7pZr02mWx"
TOKEN = "bearer-Zt93-Hh1Lr"
DB_PASSWORD = "hunter2-Q8v"
MESSAGE = (
    f"upstream postgres://admin:{DB_PASSWORD}@db.home.lan:5432/app refused; "
    f"retried with key {API_KEY} and {TOKEN}"
)
SECRETS = (API_KEY, TOKEN, DB_PASSWORD)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def config(tmp: Path) -> Any:
    return parse_config(
        {
            "server": {"api_token": TOKEN},
            "routing": {
                "default_source": "kiwix",
                "keywords": {"broken": ["gizmo"]},
                "semantic": {"enabled": False},
                "llm": {"api_key": API_KEY},
            },  # configured, never used: still a secret
            "trace": {"path": str(tmp / "traces.db")},
            "sources": {
                "kiwix": {"type": "scripted"},
                "broken": {"type": "scripted", "fail": "crash", "crash_message": MESSAGE},
            },
        }
    )


def assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked: {text[:400]}"


def unexpected_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if "RuntimeError" in r.getMessage() and "Traceback" in r.getMessage()
    ]


def test_a_crashing_part_is_logged_once_and_scrubbed_everywhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    app = create_app(config(tmp_path))
    with uvicorn_server(app) as base, httpx.Client(base_url=base, headers=AUTH, timeout=30) as http:
        response = http.post(
            "/search", json={"query": "gizmo status; tell me about tides", "explain": True}
        )
        assert response.status_code == 200, response.text  # the other part still answers
        body = response.json()
        trace = http.get(f"/traces/{body['trace_id']}")
        assert trace.status_code == 200
    assert_clean(response.text)
    assert_clean(trace.text)
    broken = body["results"][0]
    assert broken["status"] == "error"
    assert "postgres://***@db.home.lan:5432/app" in broken["error"]["message"]
    assert "key *** and ***" in broken["error"]["message"]
    messages = [e.get("message", "") for e in body["explanation"]]
    assert any("postgres://***@db.home.lan" in m for m in messages), messages
    assert body["results"][1]["status"] == "ok"

    logged = unexpected_logs(caplog)
    assert len(logged) == 1, [r.getMessage()[:200] for r in logged]
    (record,) = logged
    assert record.name.startswith("search") and record.levelno == logging.ERROR
    assert "raise RuntimeError(" in record.getMessage()  # the traceback, down to the raise
    assert_clean("\n".join(r.getMessage() for r in caplog.records))
    assert_clean(Path(tmp_path / "traces.db").read_bytes().decode("utf-8", "replace"))


async def test_an_exception_escaping_the_request_is_a_scrubbed_502_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    service = Service(config(tmp_path))

    async def broken_run(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(MESSAGE)  # a bug past every part: nothing catches it but the service

    service.router.run = broken_run  # type: ignore[method-assign]
    await service.start()
    try:
        outcome = await service.search("tell me about tides", explain=True)
        stored = await _stored(service, outcome.trace_id)
    finally:
        await service.aclose()
    assert outcome.status_code == 502
    assert outcome.body["error"]["type"] == "RuntimeError"
    assert outcome.body["error"]["message"].startswith("upstream postgres://***@db.home.lan")
    assert_clean(str(outcome.body))
    assert_clean(str(stored))
    assert len(unexpected_logs(caplog)) == 1
    assert_clean("\n".join(r.getMessage() for r in caplog.records))


async def _stored(service: Service, trace_id: str) -> dict[str, Any]:
    store: Any = service.traces
    await store.flush()
    trace = store.get_trace(trace_id)
    assert trace is not None
    return trace
