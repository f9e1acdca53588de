"""Another web site cannot drive the home through the user's browser.

Real parts throughout: Debian's Chromium (driven by Playwright), the router under
uvicorn with `allow_control: true` against the suite's real Home Assistant, and an
attacker's site served from another loopback port (a different origin). Its pages try
what any page on the web can: an auto-submitting HTML form with `enctype=text/plain`
whose body is a valid `/search` request, `fetch` in `no-cors` mode (text/plain, and a
Blob typed application/json), `sendBeacon`, and a CORS `fetch` with application/json.
A DNS-rebinding page (its own name resolved to 127.0.0.1 by Chromium's resolver rules)
tries to read `/traces`. Home Assistant's own states, read back over its REST API, must
not change; an ASGI recorder in front of the router shows what arrived and what it
answered. A same-origin JSON request then does flip the light: the positive control that
the attacks would have worked had they got through.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from search.api.app import create_app
from search.config import parse_config
from tests.support import homeassistant as ha_harness
from tests.support.app import uvicorn_server
from tests.support.homeassistant import HomeAssistant, call_service, device_states
from tests.support.require import missing_service

home_assistant = ha_harness.home_assistant

CHROMIUM = Path("/usr/bin/chromium")
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP evil.example 127.0.0.1",
    # Chromium's Private Network Access check would stop the rebound page's fetch itself;
    # other browsers have none, so the router must refuse on its own: switched off here.
    (
        "--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
        "PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks"
    ),
]
LIGHT = "turn on the bed light"
LOCK = "unlock the front door"


class Recorder:
    """Plain ASGI in front of the app: each request's method, path, headers and status."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        entry = {
            "method": scope["method"],
            "path": scope["path"],
            "status": None,
            "origin": headers.get("origin"),
            "host": headers.get("host"),
            "content_type": headers.get("content-type"),
        }
        self.seen.append(entry)

        async def recording_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                entry["status"] = message["status"]
            await send(message)

        await self.app(scope, receive, recording_send)


def answered_posts(recorder: Recorder) -> list[dict[str, Any]]:
    """The text/plain POSTs to /search (form, no-cors fetch, beacon) the router answered."""
    return [
        e
        for e in recorder.seen
        if e["path"] == "/search"
        and e["method"] == "POST"
        and (e["content_type"] or "").startswith("text/plain")
        and e["status"] is not None
    ]


def form_page(router: str) -> str:
    """The classic text/plain form: `name=value` becomes `{"query":..., "session_id":"=x"}`,
    a body the router would accept as JSON."""
    name = json.dumps({"query": LIGHT, "session_id": ""})[:-2]
    return f"""<!doctype html><title>win a prize</title>
<form id=f method=POST action="{router}/search" enctype="text/plain">
<input type=hidden name='{name}' value='x"}}'></form>
<script>addEventListener('load', () => setTimeout(() => document.getElementById('f').submit()))
</script>"""


def fetch_page(router: str) -> str:
    body = json.dumps({"query": LOCK})
    return f"""<!doctype html><title>cute cats</title><script>
const url = {json.dumps(router + "/search")}, body = {json.dumps(body)};
async function attempt(name, run) {{
  try {{ window.outcome[name] = await run(); }} catch (e) {{ window.outcome[name] = 'threw'; }}
}}
window.outcome = {{}};
(async () => {{
  await attempt('no_cors_text', async () => (await fetch(url, {{method: 'POST', mode: 'no-cors',
      headers: {{'Content-Type': 'text/plain'}}, body}})).type);
  await attempt('no_cors_blob', async () => (await fetch(url, {{method: 'POST', mode: 'no-cors',
      body: new Blob([body], {{type: 'application/json'}})}})).type);
  await attempt('beacon', async () => navigator.sendBeacon(url, body));
  await attempt('cors_json', async () => (await fetch(url, {{method: 'POST',
      headers: {{'Content-Type': 'application/json'}}, body}})).status);
  window.finished = true;
}})();
</script>"""


REBIND_PAGE = """<!doctype html><title>rebound</title><script>
(async () => {
  try {
    const r = await fetch('/traces');
    window.read = {status: r.status, text: await r.text()};
  } catch (e) { window.read = {status: 0, text: String(e)}; }
})();
</script>"""


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    missing_service(
        "Chromium",
        "Debian's chromium is not installed (apt-get install -y chromium chromium-driver)",
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=BROWSER_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def router(
    home_assistant: HomeAssistant, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Recorder, str]]:
    tmp = tmp_path_factory.mktemp("cross-site")
    config = parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "semantic": {"enabled": False},
                "keywords": {"ha": ["turn on", "unlock", "bed light", "front door"]},
            },
            "cache": {"result_ttl_s": 0},
            "trace": {"path": str(tmp / "traces.db")},
            "sources": {
                "kiwix": {"type": "scripted"},
                "ha": {
                    "type": "homeassistant",
                    "url": home_assistant.url,
                    "token": home_assistant.token,
                    "allow_control": True,
                    "timeout_s": 10,
                },
            },
        }
    )
    recorder = Recorder(create_app(config))
    with uvicorn_server(recorder) as base:  # type: ignore[arg-type]
        yield recorder, base


@pytest.fixture(scope="module")
def attacker(router: tuple[Recorder, str]) -> Iterator[str]:
    _, base = router
    site = Starlette(
        routes=[
            Route("/form", lambda request: HTMLResponse(form_page(base))),
            Route("/fetch", lambda request: HTMLResponse(fetch_page(base))),
        ]
    )
    with uvicorn_server(site) as attacker_base:
        yield attacker_base


@pytest.mark.slow
def test_a_cross_site_form_and_fetch_change_nothing_in_the_home(
    browser: Any, router: tuple[Recorder, str], attacker: str, home_assistant: HomeAssistant
) -> None:
    recorder, base = router
    call_service(home_assistant, "light", "turn_off", "light.bed_light")
    call_service(home_assistant, "lock", "lock", "lock.front_door")
    before = device_states(home_assistant)
    assert before["light.bed_light"][0] == "off" and before["lock.front_door"][0] == "locked"
    recorder.seen.clear()
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        with page.expect_response(f"{base}/search") as answered:
            page.goto(f"{attacker}/form")
        form_status = answered.value.status
        page.wait_for_url(f"{base}/search")  # the form's navigation is over
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{attacker}/fetch")
        page.wait_for_function("window.finished === true")
        outcome = page.evaluate("window.outcome")
        # sendBeacon does not wait for its answer: wait until the router has answered it.
        deadline = time.monotonic() + 15
        while len(answered_posts(recorder)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        context.close()
    assert device_states(home_assistant) == before

    arrived = [e for e in recorder.seen if e["path"] == "/search"]
    assert len(answered_posts(recorder)) == 3, arrived
    assert form_status == 403
    assert arrived, "the attacks never reached the router: the test would prove nothing"
    for entry in arrived:
        assert entry["origin"] == attacker, entry
        assert entry["status"] == 403, entry
    kinds = {(e["method"], (e["content_type"] or "").split(";")[0]) for e in arrived}
    assert ("POST", "text/plain") in kinds  # the form, the no-cors fetch, the beacon
    # The CORS attempt stops at its preflight (refused too): its POST never arrives.
    assert ("OPTIONS", "") in kinds
    assert outcome["cors_json"] == "threw"
    assert outcome["no_cors_text"] == "opaque"

    # Positive control: the same command, asked by a same-origin JSON request, acts.
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            response = http.post("/search", json={"query": LIGHT})
        assert response.status_code == 200, response.text
        assert device_states(home_assistant)["light.bed_light"][0] == "on"
    finally:
        call_service(home_assistant, "light", "turn_off", "light.bed_light")


@pytest.mark.slow
def test_a_rebound_page_cannot_read_the_query_history(
    browser: Any, router: tuple[Recorder, str]
) -> None:
    recorder, base = router
    with httpx.Client(base_url=base, timeout=30) as http:
        assert http.post("/search", json={"query": "secret garden party"}).status_code == 200
    port = base.rsplit(":", 1)[1]
    rebound = f"http://evil.example:{port}"
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        # The attacker's page, as their server sent it before the name was rebound to
        # 127.0.0.1; its fetch then really goes to the router, under the attacker's name.
        page.route(
            f"{rebound}/",
            lambda route: route.fulfill(status=200, content_type="text/html", body=REBIND_PAGE),
        )
        recorder.seen.clear()
        page.goto(f"{rebound}/")
        page.wait_for_function("window.read !== undefined")
        read = page.evaluate("window.read")
    finally:
        context.close()
    assert read["status"] == 403, read
    assert (
        "secret garden" not in read["text"] and json.loads(read["text"])["error"]["field"] == "Host"
    )
    (entry,) = [e for e in recorder.seen if e["path"] == "/traces"]
    assert entry["host"] == f"evil.example:{port}" and entry["status"] == 403
