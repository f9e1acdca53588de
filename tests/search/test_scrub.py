"""The scrubber: secrets never shown, in any spelling, and backend text kept short.

A source URL with credentials (`http://user:password@searxng`) makes the HTTP client
send `Authorization: Basic base64(user:password)`; a backend that echoes that header in
its error must not get the encoded password into the response, the chain, the trace
store, `search trace show` or `search doctor`. Tested against a loopback server speaking
SearXNG's wire format (tests/support/wire_servers.py) that echoes the header, through
the real app over HTTP with a real SQLite trace store. The length bound is tested with
a source whose message is megabytes long.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from search.api.app import create_app
from search.cli import main
from search.config import parse_config
from search.scrub import CUT_MARK, MASK, MAX_LOG_CHARS, MAX_TEXT_CHARS, Scrubber
from search.service import Service
from tests.support.app import uvicorn_server
from tests.support.wire_servers import SearxngServer

USER, PASSWORD = "suser", "SEARXPASS33"
ESCAPED_USER, ESCAPED_PASSWORD = "s%40user", "p%40ss%21word9"  # s@user, p@ss!word9


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class EchoingSearxng(SearxngServer):
    """Fails every search with HTTP 500 and SearXNG's JSON error body, quoting the
    Authorization header it was sent (as a careless proxy or plugin does)."""

    def _search(self, request: Request, shape: str) -> Response:
        sent = request.headers.get("authorization", "")
        return JSONResponse({"error": f"denied token {sent}"}, status_code=500)


def web_config(url: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "routing": {
            "default_source": "web",
            "shipped_routes": False,
            "semantic": {"enabled": False},
        },
        "trace": {"path": str(tmp_path / "traces.db")},
        "sources": {"web": {"type": "searxng", "url": url, "timeout_s": 5}},
    }


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def with_credentials(base: str, user: str, password: str) -> str:
    scheme, rest = base.split("://", 1)
    return f"{scheme}://{user}:{password}@{rest}"


@pytest.mark.parametrize(
    ("user", "password", "sent"),
    [(USER, PASSWORD, f"{USER}:{PASSWORD}"), (ESCAPED_USER, ESCAPED_PASSWORD, "s@user:p@ss!word9")],
    ids=["plain", "percent-escaped"],
)
def test_an_echoed_basic_auth_header_is_masked_everywhere(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    user: str,
    password: str,
    sent: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    encoded = b64(sent)
    leaks = (encoded, encoded.rstrip("="), password, sent.split(":", 1)[1])
    with EchoingSearxng() as backend:
        data = web_config(with_credentials(backend.url, user, password), tmp_path)
        app = create_app(parse_config(data))
        with uvicorn_server(app) as base, httpx.Client(base_url=base, timeout=30) as http:
            response = http.post("/search", json={"query": "weather", "explain": True})
            trace_id = response.json()["trace_id"]
            trace = http.get(f"/traces/{trace_id}")
        config_path = tmp_path / "config.yaml"
        config_path.write_text(yaml.safe_dump(data))
        doctor_code, doctor = cli(capsys, "doctor", "--config", str(config_path), "--json")
    assert backend.requests[0].headers["authorization"] == f"Basic {encoded}"  # really sent
    _, shown = cli(capsys, "trace", "show", trace_id, "--config", str(config_path))
    _, shown_json = cli(capsys, "trace", "show", trace_id, "--config", str(config_path), "--json")

    assert response.status_code == 502, response.text
    assert trace.status_code == 200, trace.text
    messages = [e.get("message", "") for e in response.json()["explanation"]]
    assert any(f"denied token Basic {MASK}" in m for m in messages), messages
    assert doctor_code == 1 and "denied token Basic ***" in doctor
    stored = (tmp_path / "traces.db").read_bytes().decode("utf-8", "replace")
    # httpx's own request line is left out: see the test below.
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name != "httpx")
    for where, text in {
        "response": response.text,
        "/traces": trace.text,
        "trace show": shown + shown_json,
        "doctor": doctor,
        "trace store": stored,
        "log": logged,
    }.items():
        for leak in leaks:
            assert leak not in text, f"{leak!r} leaked into {where}"


def test_configured_credentials_are_masked_in_each_basic_auth_spelling() -> None:
    scrub = Scrubber.from_config(
        parse_config(web_config(f"http://{ESCAPED_USER}:{ESCAPED_PASSWORD}@h:1", Path("/tmp")))
    )
    decoded = b"s@user:p@ss!word9"
    for spelling in (
        base64.b64encode(decoded).decode(),  # what httpx sends: the decoded form
        base64.b64encode(decoded).decode().rstrip("="),
        base64.urlsafe_b64encode(decoded).decode(),
        b64(f"{ESCAPED_USER}:{ESCAPED_PASSWORD}"),  # the form as written in the URL
    ):
        assert scrub.text(f"token {spelling}.") == f"token {MASK}.", spelling
    assert scrub.text("p@ss!word9 and p%40ss%21word9") == f"{MASK} and {MASK}"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"Authorization: Basic {b64('alice:wonderland7')}", f"Authorization: Basic {MASK}"),
        (f"auth=basic {b64('a:b')}, retry", f"auth=basic {MASK}, retry"),
        ("Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln", f"Bearer {MASK}"),
        ("header BEARER sk-live-Kq7pZr02mWx sent", f"header BEARER {MASK} sent"),
        # ordinary words after the scheme names stay
        ("basic auth failed", "basic auth failed"),
        ("Basic information about the Bearer authentication.", None),
        ("needs a bearer token", None),
    ],
)
def test_any_basic_or_bearer_credential_is_masked_but_not_ordinary_words(
    text: str, masked: str | None
) -> None:
    assert Scrubber([]).text(text) == (text if masked is None else masked)


def test_a_message_is_cut_and_masked_before_it_is_cut() -> None:
    secret = "Zq9-secret-value"
    scrub = Scrubber([secret])
    long = "x" * (MAX_TEXT_CHARS - 5) + secret + "y" * 5_000_000
    shown = scrub.text(long)
    assert shown == "x" * (MAX_TEXT_CHARS - 5) + MASK + "yy" + CUT_MARK
    assert scrub.text("short " + secret) == f"short {MASK}"  # short text is not marked
    many = scrub.text(secret * 100_000)  # masked, it is short; cut, it is marked so
    assert many == (MASK * 200)[:MAX_TEXT_CHARS] + CUT_MARK
    assert scrub.error({"type": "e", "message": long}) == {"type": "e", "message": shown}
    logged = scrub.exception(RuntimeError(long))
    assert len(logged) == MAX_LOG_CHARS + len(CUT_MARK) and secret not in logged
    assert logged.startswith("RuntimeError: x")


def test_url_credentials_in_long_dotted_text_are_masked_in_linear_time() -> None:
    """`a.a.a.…` once made the URL pattern try every position (quadratic): a second for
    10,000 characters, hours for a megabyte."""
    text = "a." * 500_000 + "http://admin:pw@host"
    shown = Scrubber([]).text(text)
    assert len(shown) == MAX_TEXT_CHARS + len(CUT_MARK)
    assert Scrubber([]).text("see ftp://admin:pw@host/x") == f"see ftp://{MASK}@host/x"


async def test_a_megabytes_long_source_message_is_cut_in_the_chain_and_the_trace(
    tmp_path: Path,
) -> None:
    message = "engine " + "E" * 5_000_000
    config = parse_config(
        {
            "routing": {"default_source": "broken", "semantic": {"enabled": False}},
            "trace": {"path": str(tmp_path / "traces.db")},
            "sources": {"broken": {"type": "scripted", "fail": "crash", "crash_message": message}},
        }
    )
    service = Service(config)
    await service.start()
    try:
        outcome = await service.search("anything at all", explain=True)
        store: Any = service.traces
        await store.flush()
        stored = store.get_trace(outcome.trace_id)
    finally:
        await service.aclose()
    assert outcome.status_code == 502
    [part] = stored["results"]
    shown = part["error"]["message"]
    assert shown.startswith("RuntimeError: engine EEEE") and shown.endswith("EEEE" + CUT_MARK)
    assert len(shown) == MAX_TEXT_CHARS + len(CUT_MARK)
    chain_messages = [e["message"] for e in outcome.chain if "message" in e]
    assert chain_messages and all(len(m) <= MAX_TEXT_CHARS + len(CUT_MARK) for m in chain_messages)
    assert len(json.dumps(stored)) < 50_000
    assert (tmp_path / "traces.db").stat().st_size < 1_000_000


def test_httpx_request_log_line_shows_no_url_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="httpx")
    with SearxngServer() as backend:
        url = with_credentials(backend.url, USER, PASSWORD)
        app = create_app(parse_config(web_config(url, tmp_path)))
        with uvicorn_server(app) as base, httpx.Client(base_url=base, timeout=30) as http:
            assert http.post("/search", json={"query": "weather"}).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert any("/search?q=weather" in line for line in lines), lines
    assert not any(PASSWORD in line for line in lines), lines


def test_a_logged_exception_shows_terminal_controls_as_escapes() -> None:
    """A source's message is anyone's text: in the log, an escape sequence that would
    recolour or retitle the operator's terminal is written out, not sent; the traceback
    keeps its own line breaks."""
    try:
        raise RuntimeError("boom \x1b[31mRED\x1b]0;owned\x07 \u202eevil")
    except RuntimeError as exc:
        logged = Scrubber([]).exception(exc)
    assert "\x1b" not in logged and "\x07" not in logged and "\u202e" not in logged
    assert "boom \\x1b[31mRED\\x1b]0;owned\\x07 \\u202eevil" in logged
    assert logged.startswith("Traceback (most recent call last):\n")


def test_a_secret_a_source_cut_off_is_masked_where_it_was_cut() -> None:
    """A source cuts its backend's text (`http.shown`, marked "…"): a secret straddling
    the cut is no longer whole to be found, and most of it would go out."""
    from sources import http

    token = "eyJhbGciOiJIUzI1NiJ9.LONGLIVEDTOKENabcdefghijk"
    scrubber = Scrubber([token, "hunter2"])
    backend = "x" * (http.SHOWN_CHARS - 30) + f" token {token} rejected"
    message = f"ha: get_forecasts failed: {http.shown(backend)} (code 3)"
    assert token[:20] in message  # the cut left most of it
    shown = scrubber.text(message)
    assert token[:8] not in shown and shown.endswith(f"{MASK}… (code 3)")
    assert scrubber.text("password hunte") == f"password {MASK}"  # at the text's end
    assert scrubber.text("hunting season") == "hunting season"  # a word is left alone
