"""The trace viewer at /ui, in a real headless Chromium (Debian's), driven by Playwright.

The app runs under uvicorn on loopback with a real SQLite trace store; scripted sources
make the fallbacks and timings deterministic (ha sleeps 50 ms and fails, web answers
after 100 ms). The browser is Debian's `/usr/bin/chromium`: Playwright never downloads
one. Screenshots of the trace page are saved under `test-artifacts/` (not checked in).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from pydantic import SecretStr

from search.api.app import create_app
from search.config import parse_config
from tests.support.app import uvicorn_server
from tests.support.require import require_service

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.usefixtures("chromium_installed")


@pytest.fixture
def chromium_installed() -> None:
    require_service(
        "Chromium",
        CHROMIUM.exists(),
        "Debian's chromium is not installed (apt-get install -y chromium chromium-driver)",
    )


def ui_config(tmp: Path):
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "keywords": {"ha": ["lights"], "web": ["news"], "forecast": ["rains"]},
                "semantic": {"enabled": False},
            },
            "trace": {"path": str(tmp / "traces.db")},
            "sources": {
                "kiwix": {"type": "scripted"},
                "ha": {
                    "type": "scripted",
                    "fail": "unavailable",
                    "delay_s": 0.05,
                    "fallback": ["web"],
                    "circuit_failures": 0,
                },
                "web": {"type": "scripted", "delay_s": 0.1, "items": 3},
                "forecast": {"type": "scripted"},
            },
        }
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The served app, with four stored traces of known shape."""
    tmp = tmp_path_factory.mktemp("ui")
    with uvicorn_server(create_app(ui_config(tmp))) as base:
        ids: dict[str, str] = {}
        with httpx.Client(base_url=base, timeout=30) as http:
            for key, query in [
                ("fallback", "are the lights on"),
                ("cached", "are the lights on"),  # ha fails again; web from the cache
                ("plain", "tell me about tides"),
                ("parts", "what's the news; if it rains tomorrow, are the lights on?"),
            ]:
                response = http.post("/search", json={"query": query})
                assert response.status_code == 200
                ids[key] = response.json()["trace_id"]
        yield {"base": base, "ids": ids}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # a test dependency; the browser is Debian's

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=BROWSER_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture()
def page(browser: Any, site: dict[str, Any]) -> Iterator[Any]:
    """A fresh page that records every request and every script error."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.requests = []  # type: ignore[attr-defined]
    page.problems = []  # type: ignore[attr-defined]
    page.on("request", lambda r: page.requests.append(r.url))
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    # A 4xx the page shows on purpose (a bad filter) is logged as "Failed to load resource".
    page.on(
        "console",
        lambda m: (
            m.type == "error"
            and not m.text.startswith("Failed to load resource")
            and page.problems.append(m.text)
        ),
    )
    yield page
    # Nothing from outside: every request went to the app itself; no script failed.
    assert page.requests and all(u.startswith(site["base"] + "/") for u in page.requests)
    assert page.problems == []
    context.close()


def box(locator: Any) -> dict[str, float]:
    found = locator.bounding_box()
    assert found is not None
    return found


def test_the_list_shows_recent_traces_and_filters_them(page: Any, site: dict[str, Any]) -> None:
    ids = site["ids"]
    page.goto(site["base"] + "/ui")
    rows = page.locator("#trace-list tbody tr")
    rows.nth(3).wait_for()
    assert rows.count() == 4
    # Newest first.
    assert rows.first.get_attribute("data-trace-id") == ids["parts"]
    assert "4 of 4 traces" in page.inner_text("#list-status")
    # Each part's route and status, as stored: the fallback's route is ha (web answered).
    parts = {
        rows.nth(i).get_attribute("data-trace-id"): rows.nth(i).locator("td.parts").inner_text()
        for i in range(4)
    }
    assert parts[ids["plain"]] == "kiwix ok"
    assert parts[ids["fallback"]] == "ha ok"
    assert parts[ids["parts"]] == "web ok · ha ok"

    page.check("#filters input[name=fallback]")
    page.click("#filters button[type=submit]")
    expect(page.locator("#list-status")).to_contain_text("of 3")
    shown = {rows.nth(i).get_attribute("data-trace-id") for i in range(rows.count())}
    assert shown == {ids["fallback"], ids["cached"], ids["parts"]}
    assert "fallback=true" in page.url

    page.uncheck("#filters input[name=fallback]")
    page.fill("#filters input[name=step]", "result_cache_hit")
    page.click("#filters button[type=submit]")
    expect(page.locator("#list-status")).to_contain_text("of 2")
    shown = {rows.nth(i).get_attribute("data-trace-id") for i in range(rows.count())}
    assert shown == {ids["cached"], ids["parts"]}  # web answered both from the cache

    page.fill("#filters input[name=step]", "")
    page.fill("#filters input[name=q]", "tides")
    page.click("#filters button[type=submit]")
    expect(page.locator("#list-status")).to_contain_text("of 1")
    assert rows.first.get_attribute("data-trace-id") == ids["plain"]

    page.fill("#filters input[name=q]", "")
    page.fill("#filters input[name=since]", "last tuesday")
    page.click("#filters button[type=submit]")
    page.wait_for_selector("#list-status.error")
    assert "since" in page.inner_text("#list-status")

    page.fill("#filters input[name=since]", "")
    page.click("#filters button[type=submit]")
    expect(page.locator("#list-status")).to_contain_text("of 4")
    rows.filter(has_text="tell me about tides").click()
    page.wait_for_selector("#view-trace .waterfall")
    assert page.url.endswith(f"#/trace/{ids['plain']}")


def test_a_fallback_trace_draws_bars_arrows_and_markers(page: Any, site: dict[str, Any]) -> None:
    trace_id = site["ids"]["fallback"]
    stored = httpx.get(f"{site['base']}/traces/{trace_id}").json()
    page.goto(f"{site['base']}/ui#/trace/{trace_id}")
    page.wait_for_selector(".waterfall .lane[data-part='0']")

    ha = page.locator(".lane[data-part='0'] .bar[data-source=ha]")
    web = page.locator(".lane[data-part='0'] .bar[data-source=web]")
    assert ha.get_attribute("data-outcome") == "error"
    assert web.get_attribute("data-outcome") == "ok"
    ha_ms = float(ha.get_attribute("data-elapsed-ms"))
    web_ms = float(web.get_attribute("data-elapsed-ms"))
    assert ha_ms >= 50 and web_ms >= 100
    # Bars are sized by elapsed time and placed in time order.
    ha_box, web_box = box(ha), box(web)
    assert web_box["width"] / ha_box["width"] == pytest.approx(web_ms / ha_ms, rel=0.1)
    assert web_box["x"] >= ha_box["x"] + ha_box["width"] - 2
    assert web_box["y"] > ha_box["y"]  # one row per call

    arrow = page.locator(".fallback-arrow[data-from=ha][data-to=web]")
    assert arrow.count() == 1
    assert arrow.get_attribute("data-reason") == "connection_refused"  # SourceUnavailable
    shaft = box(arrow.locator("line.shaft"))
    # From where ha ended down to where web started.
    assert shaft["x"] + shaft["width"] / 2 == pytest.approx(ha_box["x"] + ha_box["width"], abs=3)
    assert shaft["y"] == pytest.approx(ha_box["y"] + ha_box["height"] / 2, abs=4)
    assert shaft["y"] + shaft["height"] == pytest.approx(web_box["y"], abs=4)

    decision = page.locator(".marker[data-kind=decision][data-step=intent_keyword]")
    assert decision.count() == 1 and decision.get_attribute("data-source") == "ha"

    # Hovering shows the event's fields.
    web.hover()
    tooltip = page.locator("#tooltip")
    tooltip.wait_for(state="visible")
    assert "elapsed_ms" in tooltip.inner_text() and "web" in tooltip.inner_text()
    arrow.locator("line.hit").hover(force=True)
    expect(page.locator("#tooltip")).to_contain_text("to_source")

    narrative = page.locator(".narrative li")
    assert narrative.count() == len(stored["narrative"])
    assert narrative.first.inner_text() == stored["narrative"][0]
    table = page.locator("table.events tbody tr")
    assert table.count() == len(stored["chain"])
    assert [table.nth(i).get_attribute("data-step") for i in range(table.count())] == [
        e["step"] for e in stored["chain"]
    ]

    page.mouse.move(0, 0)
    tooltip.wait_for(state="hidden")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-trace-fallback.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def test_cache_hits_and_nested_parts_get_their_own_marks(page: Any, site: dict[str, Any]) -> None:
    page.goto(f"{site['base']}/ui#/trace/{site['ids']['cached']}")
    page.wait_for_selector(".waterfall")
    lane = page.locator(".lane[data-part='0']")
    assert lane.locator(".marker[data-kind=cache][data-step=result_cache_hit]").count() == 1
    assert lane.locator(".bar[data-source=web]").count() == 0  # web answered from the cache
    arrow = lane.locator(".fallback-arrow[data-from=ha][data-to=web]")
    assert arrow.count() == 1
    # It points up at where the cache hit happened, from the end of ha's bar.
    shaft = box(arrow.locator("line.shaft"))
    hit = box(lane.locator(".instant[data-step=result_cache_hit]"))
    assert shaft["y"] + shaft["height"] / 2 > hit["y"] + hit["height"]
    assert shaft["y"] <= hit["y"] + hit["height"] + 2

    page.goto(f"{site['base']}/ui#/trace/{site['ids']['parts']}")
    page.wait_for_selector(".lane[data-part='1.1']")
    lanes = page.locator(".waterfall .lane")
    paths = [lanes.nth(i).get_attribute("data-part") for i in range(lanes.count())]
    assert paths == ["", "0", "1", "1.0", "1.1"]
    assert page.locator(".lane[data-part='1.0'] .bar[data-source=forecast]").count() == 1
    assert page.locator(".lane[data-part='0'] .bar[data-source=web]").count() == 1
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-trace-parts.png"), full_page=True)


def test_the_live_form_runs_a_query_and_shows_its_chain(page: Any, site: dict[str, Any]) -> None:
    page.goto(site["base"] + "/ui#/search")
    page.fill("#query", "are the lights on in the hallway")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-result .waterfall")
    assert "fallback" in page.inner_text("#search-status")
    result = page.locator("#search-result")
    assert result.locator(".bar[data-source=ha][data-outcome=error]").count() == 1
    assert result.locator(".fallback-arrow[data-from=ha][data-to=web]").count() == 1
    assert result.locator(".results li[data-source=web]").count() == 1
    events = result.locator("table.events tbody tr")
    assert events.count() >= 4

    page.fill("#query", "   ")
    page.click("#search-form button[type=submit]")
    expect(page.locator("#search-status")).to_contain_text("must not be empty")
    assert page.locator("#search-status.error").count() == 1
    page.fill("#query", "x" * 1001)
    page.click("#search-form button[type=submit]")
    expect(page.locator("#search-status")).to_contain_text("maximum of 1000")

    page.fill("#query", "tell me about eels")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-result .trace-link")
    trace_id = page.locator("#search-result code").first.inner_text()
    page.click("#search-result .trace-link")
    page.wait_for_selector("#view-trace .waterfall")
    assert page.locator("#trace-head code").inner_text() == trace_id
    assert page.locator("#view-trace .bar[data-source=kiwix]").count() == 1


def test_the_page_is_served_self_contained(site: dict[str, Any]) -> None:
    with httpx.Client(base_url=site["base"], timeout=10) as http:
        page = http.get("/ui")
        script = http.get("/ui/app.js")
        slash = http.get("/ui/", follow_redirects=False)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "http" not in page.text.replace('href="#', "")  # no absolute URL anywhere
    assert "innerHTML" not in script.text  # data is only ever set as text
    assert slash.status_code == 308 and slash.headers["location"].endswith("/ui")


def test_a_server_with_an_api_token_asks_for_it_and_then_works(
    browser: Any, tmp_path: Path
) -> None:
    """With `server.api_token` set, /ui (static, open) gets 401s from /traces: the page
    asks for the token, sends it as a bearer token, and keeps it for the tab only."""
    config = ui_config(tmp_path)
    config.server.api_token = SecretStr("s3cret-household-token")
    with uvicorn_server(create_app(config)) as base:
        with httpx.Client(base_url=base, timeout=30) as http:
            response = http.post(
                "/search",
                json={"query": "are the lights on"},
                headers={"Authorization": "Bearer s3cret-household-token"},
            )
            assert response.status_code == 200
        context = browser.new_context()
        page = context.new_page()
        page.set_default_timeout(15_000)
        authorizations: list[str | None] = []
        page.on(
            "request",
            lambda r: (
                authorizations.append(r.headers.get("authorization"))
                if "/traces" in r.url
                else None
            ),
        )
        page.goto(base + "/ui")
        expect(page.locator("#token-form")).to_be_visible()
        expect(page.locator("#list-status")).to_contain_text("needs its API token")

        page.fill("#api-token", "wrong")
        page.click("#token-form button[type=submit]")
        expect(page.locator("#list-status")).to_contain_text("was not accepted")

        page.fill("#api-token", "s3cret-household-token")
        page.click("#token-form button[type=submit]")
        rows = page.locator("#trace-list tbody tr")
        rows.first.wait_for()
        assert rows.count() == 1
        expect(page.locator("#token-form")).to_be_hidden()
        assert authorizations[-1] == "Bearer s3cret-household-token"
        assert "s3cret-household-token" not in page.url
        context.close()


def _overlapping(page: Any, selector: str) -> list[tuple[str, str]]:
    """Pairs of elements matching `selector` whose boxes intersect (by more than a pixel)."""
    found = page.eval_on_selector_all(
        selector,
        """nodes => nodes.map(n => {
        const r = n.getBoundingClientRect();
        return {id: n.dataset.step + '#' + n.dataset.seq, x: r.left, y: r.top, w: r.width, h: r.height};
    })""",
    )
    pairs = []
    for i, a in enumerate(found):
        for b in found[i + 1 :]:
            if (
                a["x"] + a["w"] - 1 > b["x"]
                and b["x"] + b["w"] - 1 > a["x"]
                and a["y"] + a["h"] - 1 > b["y"]
                and b["y"] + b["h"] - 1 > a["y"]
            ):
                pairs.append((a["id"], b["id"]))
    return pairs


def skip_config(tmp: Path):
    """ui_config plus `garden`, disabled, with a fallback: its part's decision, skip and
    fallback land within microseconds of each other, on an axis of some 40 ms."""
    config = ui_config(tmp)
    data = config.model_dump(mode="json")
    data["routing"]["keywords"]["garden"] = ["greenhouse"]
    data["sources"]["garden"] = {"type": "scripted", "enabled": False, "fallback": ["kiwix"]}
    data["sources"]["kiwix"]["delay_s"] = 0.04  # a 40 ms axis, as a real answer gives
    return parse_config({k: data[k] for k in ("routing", "trace", "sources")})


def test_instant_steps_never_overlap_and_each_can_be_hovered(browser: Any, tmp_path: Path) -> None:
    with uvicorn_server(create_app(skip_config(tmp_path))) as base:
        with httpx.Client(base_url=base, timeout=30) as http:
            response = http.post("/search", json={"query": "is the greenhouse warm"})
            assert response.status_code == 200
            trace_id = response.json()["trace_id"]
            chain = http.get(f"/traces/{trace_id}").json()["chain"]
        steps = [e["step"] for e in chain if e["part"] == "0"]
        assert steps[:3] == ["intent_keyword", "source_skipped", "fallback"]
        spread = chain[2]["t_ms"] - chain[0]["t_ms"]
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{base}/ui#/trace/{trace_id}")
        page.wait_for_selector(".lane[data-part='0'] .marker[data-step=source_skipped]")
        assert _overlapping(page, ".waterfall .marker") == [], (
            f"markers overlap ({spread} ms apart)"
        )
        markers = page.locator(".waterfall .marker")  # every step but the timed calls
        assert markers.count() == len([e for e in chain if e["step"] != "source_invoked"])
        skip = page.locator(".lane[data-part='0'] .marker[data-step=source_skipped]")
        assert skip.get_attribute("data-kind") == "skip"
        colour = skip.locator(".dot").evaluate("n => getComputedStyle(n).backgroundColor")
        timeout = page.evaluate("""() => { const s = document.createElement('span');
            s.className = 'swatch outcome-timeout'; document.body.append(s);
            const c = getComputedStyle(s).backgroundColor; s.remove(); return c; }""")
        assert colour != timeout, "a skipped source is drawn in the timeout colour"
        assert "skipped" in page.inner_text(".legend")
        for step in ("intent_keyword", "source_skipped", "fallback"):
            page.locator(f".lane[data-part='0'] .marker[data-step={step}]").hover()
            expect(page.locator("#tooltip")).to_contain_text(step)
        page.mouse.move(0, 0)
        expect(page.locator("#tooltip")).to_be_hidden()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "ui-trace-skip.png"), full_page=True)
        context.close()


def test_no_markers_overlap_on_any_stored_trace(page: Any, site: dict[str, Any]) -> None:
    for trace_id in site["ids"].values():
        page.goto(f"{site['base']}/ui#/trace/{trace_id}")
        page.wait_for_selector(f"#trace-head code:text('{trace_id}')")
        page.wait_for_selector(".waterfall .marker")
        assert _overlapping(page, ".waterfall .marker") == [], trace_id


def test_the_tooltip_goes_away_when_the_page_changes(page: Any, site: dict[str, Any]) -> None:
    page.goto(f"{site['base']}/ui#/trace/{site['ids']['fallback']}")
    bar = page.locator(".lane[data-part='0'] .bar[data-source=web]")
    bar.hover()
    tooltip = page.locator("#tooltip")
    tooltip.wait_for(state="visible")
    page.evaluate("location.hash = '#/traces'")  # the mouse has not moved: no mouseleave
    page.wait_for_selector("#view-traces:not([hidden])")
    expect(tooltip).to_be_hidden()


def test_item_text_is_cut_between_words(page: Any, site: dict[str, Any]) -> None:
    query = "tell me about the long history of the " + "ancient " * 30 + "world"
    page.goto(site["base"] + "/ui#/search")
    page.fill("#query", query)
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-result .items .item-text")
    full = f"text 0 about {query}"
    shown = page.locator("#search-result .items .item-text").first.inner_text()
    assert len(full) > 200 and shown.endswith("…")
    kept = shown[:-1]
    assert full.startswith(kept) and full[len(kept)] == " ", f"cut mid-word: {shown!r}"


def test_unserved_and_withheld_parts_read_as_such(page: Any, site: dict[str, Any]) -> None:
    """The trace page is given results as the API stores them; these two statuses called
    no source (unserved) or changed nothing (withheld)."""
    page.goto(f"{site['base']}/ui#/trace/{site['ids']['plain']}")
    page.wait_for_selector("#view-trace .waterfall")
    page.route(
        "**/traces/fake*",
        lambda route: route.fulfill(
            json={
                "trace_id": "fake",
                "started_at": 1.0,
                "query": "set an alarm and unlock the door",
                "status_code": 200,
                "duration_ms": 1.0,
                "failed": False,
                "fallback": False,
                "cached": False,
                "dry_run": False,
                "redacted": False,
                "dropped_events": 0,
                "error": None,
                "chain": [],
                "narrative": [],
                "labels": [],
                "label_routes": [],
                "results": [
                    {
                        "query": "set an alarm",
                        "source": None,
                        "status": "unserved",
                        "route": None,
                        "item_count": 0,
                    },
                    {
                        "query": "unlock the door",
                        "source": "ha",
                        "status": "withheld",
                        "route": "ha",
                        "item_count": 1,
                        "withheld": {"reason": "not_allowed", "reasons": ["not_allowed"]},
                    },
                ],
            }
        ),
    )
    page.evaluate("location.hash = '#/trace/fake'")
    unserved = page.locator(".results li[data-status=unserved]")
    withheld = page.locator(".results li[data-status=withheld]")
    expect(unserved).to_contain_text("no source serves this")
    expect(withheld).to_contain_text("not carried out (not_allowed)")
    assert "item" not in unserved.inner_text() and "no source" not in withheld.inner_text()


def test_a_planned_part_says_which_of_its_sources_are_out(page: Any, site: dict[str, Any]) -> None:
    """A dry run's result carries its plan (`plan`: the sources it would try, those out);
    the page says who would answer, or that the part would fail."""
    planned = {"source": "ha", "status": "planned", "route": "ha", "item_count": 0}
    trace = fake_trace(
        query="lights status and also the news",
        dry_run=True,
        results=[
            {
                **planned,
                "query": "lights status",
                "plan": {"sources": ["ha"], "unavailable": {"ha": "disabled"}},
            },
            {
                **planned,
                "query": "the news",
                "source": "web",
                "route": "web",
                "plan": {"sources": ["web", "kiwix"], "unavailable": {"web": "circuit_open"}},
            },
        ],
    )
    page.goto(f"{site['base']}/ui#/traces")
    page.route("**/traces/fake*", lambda route: route.fulfill(json=trace))
    page.evaluate("location.hash = '#/trace/fake'")
    parts = page.locator(".results li[data-status=planned]")
    expect(parts.nth(0)).to_contain_text(
        "planned (dry run); ha is disabled, and nothing stands in: it would fail"
    )
    expect(parts.nth(1)).to_contain_text("web has its circuit open: kiwix would answer")


def test_a_snapshots_answer_to_a_question_of_now_says_it_may_be_old(
    page: Any, site: dict[str, Any]
) -> None:
    """`may_be_out_of_date` on a result (kiwix answered for the live source) is said beside
    its status; a result without it says nothing of the kind."""
    answered = {"status": "ok", "item_count": 2, "route": "web"}
    trace = fake_trace(
        query="latest news and also tell me about tides",
        results=[
            {**answered, "query": "latest news", "source": "kiwix", "may_be_out_of_date": True},
            {**answered, "query": "tell me about tides", "source": "kiwix", "route": "kiwix"},
        ],
        chain=[
            {
                "step": "snapshot_answered",
                "seq": 0,
                "t_ms": 1.0,
                "part": "0",
                "query": "latest news",
                "source": "kiwix",
                "live_route": "web",
            }
        ],
    )
    page.goto(f"{site['base']}/ui#/traces")
    page.route("**/traces/fake*", lambda route: route.fulfill(json=trace))
    page.evaluate("location.hash = '#/trace/fake'")
    parts = page.locator(".results li[data-status=ok]")
    expect(parts.nth(0)).to_contain_text("ok, may be out of date")
    expect(parts.nth(1)).to_contain_text("ok")
    assert "out of date" not in parts.nth(1).inner_text()
    expect(page.locator("body")).to_contain_text("kiwix for web: may be old")


def test_a_part_is_labelled_from_its_trace_page(browser: Any, tmp_path: Path) -> None:
    with uvicorn_server(create_app(ui_config(tmp_path))) as base:
        with httpx.Client(base_url=base, timeout=30) as http:
            trace_id = http.post(
                "/search", json={"query": "what's the news; tell me about tides"}
            ).json()["trace_id"]
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(15_000)
        posts: list[Any] = []
        page.on("request", lambda r: posts.append(r) if r.method == "POST" else None)
        page.goto(f"{base}/ui#/trace/{trace_id}")
        row = page.locator(".label-table tr[data-part='1']")
        row.wait_for()
        assert row.get_attribute("data-decision") == "kiwix"
        assert page.locator(".label-table tbody tr").count() == 2
        row.locator("select.label-route").select_option("web")
        row.locator("button.label-save").click()
        expect(page.locator(".label-table tr[data-part='1'] .label-badge")).to_have_text(
            "labelled web"
        )
        expect(page.locator(".narrative")).to_contain_text("the user labelled it web")
        (post,) = posts
        assert post.headers["content-type"] == "application/json"
        assert post.post_data_json == {"part": "1", "route": "web"}
        with httpx.Client(base_url=base, timeout=30) as http:
            labels = http.get(f"/traces/{trace_id}").json()["labels"]
        assert [(lab["part"], lab["route"]) for lab in labels] == [("1", "web")]
        context.close()


def test_an_unserved_request_reads_so_in_the_list(page: Any, site: dict[str, Any]) -> None:
    """A request no source served has no sources; its parts say what became of it. The
    list is given a page as the API serves it (a store with such a trace)."""
    summary = {
        "trace_id": "f" * 32,
        "started_at": 1.0,
        "time": "1970-01-01T00:00:01.000+00:00",
        "query": "set an alarm and unlock the door",
        "status_code": 200,
        "duration_ms": 1.0,
        "failed": False,
        "fallback": False,
        "cached": False,
        "dry_run": False,
        "redacted": False,
        "captured": False,
        "replay_of": None,
        "session_id": None,
        "part_count": 2,
        "sources": [],
        "parts": [{"route": None, "status": "unserved"}, {"route": "ha", "status": "withheld"}],
    }
    page.route(
        "**/traces?*",
        lambda route: route.fulfill(
            json={"traces": [summary], "total": 1, "limit": 50, "offset": 0, "next_cursor": None}
        ),
    )
    page.goto(site["base"] + "/ui")
    cell = page.locator("#trace-list tbody tr td.parts")
    expect(cell).to_have_text("— unserved · ha withheld")


def _live(page: Any, base: str, query: str) -> None:
    """Runs `query` in the live form and waits for its chain."""
    page.goto(base + "/ui#/search")
    page.fill("#query", query)
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-result .waterfall")


def test_an_unless_condition_reads_unless_as_the_chain_records_it(
    page: Any, site: dict[str, Any]
) -> None:
    query = "unless it rains tomorrow, tell me about tides; if it rains tomorrow, what's the news"
    _live(page, site["base"], query)
    chain = page.evaluate("""() => [...document.querySelectorAll(
        '#search-result table.events tr[data-step=conditional_detected]')].length""")
    assert chain == 2
    for where in ("#search-result", "#trace-head"):
        if where == "#trace-head":
            page.click("#search-result .trace-link")
            page.wait_for_selector("#view-trace .waterfall")
        conditions = page.locator(f"{where} .results li[data-condition]")
        expect(conditions).to_have_count(2)
        assert conditions.nth(0).get_attribute("data-condition") == "unless"
        assert conditions.nth(0).inner_text().startswith("unless it rains tomorrow →")
        assert conditions.nth(1).get_attribute("data-condition") == "if"
        assert conditions.nth(1).inner_text().startswith("if it rains tomorrow →")


def test_a_condition_whose_event_was_not_recorded_says_neither_if_nor_unless(
    page: Any, site: dict[str, Any]
) -> None:
    """Past routing.max_events a conditional_detected event may be missing: the page does
    not guess. A result's own `negated` (should the server add one) is read too."""
    condition = {"query": "it rains", "source": "forecast", "status": "ok", "item_count": 1}
    trace = fake_trace(
        results=[
            {
                "query": "tell me about tides",
                "source": "kiwix",
                "status": "ok",
                "item_count": 1,
                "condition": condition,
            },
            {
                "query": "what's the news",
                "source": "web",
                "status": "ok",
                "item_count": 1,
                "condition": {**condition, "negated": True},
            },
        ],
    )
    page.goto(f"{site['base']}/ui#/traces")
    page.route("**/traces/fake*", lambda route: route.fulfill(json=trace))
    page.evaluate("location.hash = '#/trace/fake'")
    conditions = page.locator("#trace-head .results li[data-condition]")
    expect(conditions).to_have_count(2)
    assert conditions.nth(0).get_attribute("data-condition") == "unknown"
    assert conditions.nth(0).inner_text().startswith("if/unless it rains →")
    assert conditions.nth(1).get_attribute("data-condition") == "unless"


def fake_trace(**fields: Any) -> dict[str, Any]:
    """A trace as GET /traces/{id} serves it, for what a real store will not hold."""
    return {
        "trace_id": "fake",
        "started_at": 1.0,
        "query": "a fake trace",
        "status_code": 200,
        "duration_ms": 1.0,
        "failed": False,
        "fallback": False,
        "cached": False,
        "dry_run": False,
        "redacted": False,
        "dropped_events": 0,
        "error": None,
        "chain": [],
        "narrative": [],
        "labels": [],
        "label_routes": [],
        "results": [],
        **fields,
    }


# Where the page holds stored text in elements of its own: each is bidi-isolated.
ISOLATED = [
    ".results .q",
    ".results .items b",
    ".results .item-text",
    "table.events .field",
    ".narrative li",
    ".head .query",
]
UNSAFE_IN_PAGE = """() => {
    const unsafe = /[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]/;
    const found = [];
    if (unsafe.test(document.body.textContent)) found.push('text');
    for (const node of document.querySelectorAll('[title]')) {
        if (unsafe.test(node.getAttribute('title'))) found.push('title of ' + node.tagName);
    }
    return found;
}"""


def test_bidi_and_control_characters_in_stored_text_are_shown_as_escapes(
    page: Any, site: dict[str, Any]
) -> None:
    """An unterminated U+202E in a query (and in the items the source echoes it into)
    would mirror everything after it on its line; it reads `\\u202e`, as in the CLI."""
    query = "tell me about tides \u202eevil\u202c \u2066x"
    _live(page, site["base"], query)
    assert page.evaluate(UNSAFE_IN_PAGE) == []
    shown = page.locator("#search-result .results .q").first
    assert shown.text_content() == "tell me about tides \\u202eevil\\u202c \\u2066x"
    assert shown.locator(".esc").count() == 3
    title = page.locator("#search-result .results .items b").first.text_content()
    assert "\\u202eevil\\u202c" in title
    trace_id = page.locator("#search-result code").first.inner_text()

    page.click("#search-result .trace-link")
    page.wait_for_selector("#view-trace .waterfall")
    assert page.evaluate(UNSAFE_IN_PAGE) == []
    assert page.locator("#trace-head h2.query").text_content() == shown.text_content()
    for selector in ISOLATED:
        nodes = page.locator(f"#view-trace {selector}")
        if "item" in selector:  # a stored trace keeps no items: the live answer has them
            nodes = page.locator(f"#search-result {selector}")
        assert nodes.count() > 0, selector
        bidi = nodes.first.evaluate("n => getComputedStyle(n).unicodeBidi")
        assert bidi == "isolate", selector
    # The results line reads left to right: the route stands right of the query.
    line = page.locator("#trace-head .results > li").first
    assert box(line.locator("strong"))["x"] > box(line.locator(".q"))["x"]

    # The list shows the escape too; the filter takes the text as typed (the real U+202E).
    page.goto(site["base"] + "/ui#/traces")
    link = page.locator(f"#trace-list tr[data-trace-id='{trace_id}'] td.query a")
    expect(link).to_have_text("tell me about tides \\u202eevil\\u202c \\u2066x")
    assert link.evaluate("n => getComputedStyle(n).unicodeBidi") == "isolate"
    assert page.evaluate(UNSAFE_IN_PAGE) == []
    page.fill("#filters input[name=q]", "tides \u202eevil")
    page.click("#filters button[type=submit]")
    expect(page.locator("#list-status")).to_contain_text("1 of 1")
    assert page.locator("#trace-list tbody tr").first.get_attribute("data-trace-id") == trace_id
    assert page.input_value("#filters input[name=q]") == "tides \u202eevil"


def test_the_viewer_escapes_the_same_characters_as_the_cli(page: Any, site: dict[str, Any]) -> None:
    from search.terminal import escape_controls

    text = "".join(chr(c) for c in range(0x3000) if c != 0xFEFF)
    text += "\uffa0\ufe0f\U000e0041\U000e0100\U0001f600"  # past U+FFFF: tags, selectors
    page.goto(f"{site['base']}/ui#/traces")
    page.route(
        "**/traces/fake*",
        lambda route: route.fulfill(json=fake_trace(query=text, narrative=[text])),
    )
    page.evaluate("location.hash = '#/trace/fake'")
    page.wait_for_selector("#trace-head h2.query")
    # The CLI prints stored text through `say`: its own tabs and line breaks stay.
    expected = escape_controls(text, keep="\n\t")
    assert page.locator("#trace-head h2.query").text_content() == expected
    assert page.locator(".narrative li").first.text_content() == expected


def test_odd_trace_links_say_what_is_wrong(page: Any, site: dict[str, Any]) -> None:
    page.goto(f"{site['base']}/ui#/trace/")
    expect(page.locator("#trace-head .status.error")).to_contain_text("no trace id")
    page.evaluate("location.hash = '#/trace/%E0%A4%A'")
    expect(page.locator("#trace-head .status.error")).to_contain_text("malformed")
    # An answer that is no trace (here: a page of the list) is said so, not drawn.
    page.route(
        "**/traces/odd*",
        lambda route: route.fulfill(
            json={"traces": [], "total": 0, "limit": 50, "offset": 0, "next_cursor": None}
        ),
    )
    page.evaluate("location.hash = '#/trace/odd'")
    expect(page.locator("#trace-head .status.error")).to_contain_text("is not a trace")
    assert page.locator("#trace-body *").count() == 0
    # ... and a good link still works afterwards.
    page.evaluate(f"location.hash = '#/trace/{site['ids']['plain']}'")
    page.wait_for_selector("#view-trace .waterfall")
    # `page` asserts no uncaught exception.


def _page_width(page: Any) -> tuple[int, int]:
    return page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )


def test_long_values_wrap_and_the_page_is_no_wider_than_the_window(
    browser: Any, site: dict[str, Any]
) -> None:
    word = "pneumonoultramicroscopicsilicovolcanoconiosis" * 6
    query = f"what's the news about {word}; if it rains tomorrow, tell me about {word}"
    for width in (1400, 800):
        context = browser.new_context(viewport={"width": width, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15_000)
        _live(page, site["base"], query)
        scroll, client = _page_width(page)
        assert scroll <= client, f"live form {scroll} px wide in a {client} px window"
        page.click("#search-result .trace-link")
        page.wait_for_selector("#view-trace .waterfall")
        for trace_id in (None, site["ids"]["parts"]):
            if trace_id:
                page.evaluate(f"location.hash = '#/trace/{trace_id}'")
                page.wait_for_selector(f"#trace-head code:text('{trace_id}')")
            scroll, client = _page_width(page)
            assert scroll <= client, f"trace page {scroll} px wide in a {client} px window"
        # The long candidates value wraps inside its field; the key stays whole.
        field = page.locator("table.events .field", has_text="candidates=").first
        assert box(field)["height"] > 20
        page.goto(site["base"] + "/ui#/traces")
        page.locator("#trace-list tbody tr").first.wait_for()
        scroll, client = _page_width(page)
        assert scroll <= client, f"trace list {scroll} px wide in a {client} px window"
        context.close()


def test_paging_follows_the_cursor_without_the_offset(browser: Any, tmp_path: Path) -> None:
    """From #/traces?offset=10 "Older traces" gives the rest, none skipped; the API
    refuses cursor and offset together (422 naming both) rather than skip rows."""
    with uvicorn_server(create_app(ui_config(tmp_path))) as base:
        with httpx.Client(base_url=base, timeout=30) as http:
            ids = [
                http.post("/search", json={"query": f"tides number {n}"}).json()["trace_id"]
                for n in range(62)
            ]
            first = http.get("/traces", params={"limit": 50, "offset": 10}).json()
            refused = http.get(
                "/traces", params={"limit": 50, "offset": 10, "cursor": first["next_cursor"]}
            )
        assert refused.status_code == 422
        error = refused.json()["error"]
        assert error["field"] == "cursor" and "offset" in error["message"]

        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(15_000)
        lists: list[str] = []
        page.on("request", lambda r: lists.append(r.url) if "/traces?" in r.url else None)
        page.goto(f"{base}/ui#/traces?offset=10")
        expect(page.locator("#list-status")).to_contain_text("50 of 62 traces")
        page.click("#more")
        expect(page.locator("#list-status")).to_contain_text("52 of 62 traces")
        rows = page.locator("#trace-list tbody tr")
        shown = [rows.nth(i).get_attribute("data-trace-id") for i in range(rows.count())]
        assert shown == ids[::-1][10:]
        expect(page.locator("#more")).to_be_hidden()
        assert "offset=10" in lists[0] and "cursor=" in lists[-1]
        assert "offset" not in lists[-1]
        context.close()


def small_config(tmp: Path):
    """ui_config with no trace store and the fewest events a request may record."""
    data = ui_config(tmp).model_dump(mode="json")
    data["routing"]["max_events"] = 10
    data["trace"]["enabled"] = False
    return parse_config({k: data[k] for k in ("routing", "trace", "sources")})


def test_the_live_form_says_what_was_dropped_and_links_no_trace_without_a_store(
    browser: Any, tmp_path: Path
) -> None:
    with uvicorn_server(create_app(small_config(tmp_path))) as base:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(15_000)
        query = "; ".join(f"tell me about topic {n}" for n in range(6))
        page.goto(base + "/ui#/search")
        page.fill("#query", query)
        with page.expect_response("**/search") as answer:
            page.click("#search-form button[type=submit]")
        dropped = answer.value.json()["dropped_events"]
        assert dropped > 0
        page.wait_for_selector("#search-result .waterfall")
        expect(page.locator("#search-status")).to_contain_text(
            f"{dropped} events dropped (routing.max_events)"
        )
        assert page.locator("#search-result table.events tbody tr").count() == 10
        expect(page.locator("#search-result .trace-unstored")).to_contain_text("switched off")
        assert page.locator("#search-result .trace-link").count() == 0
        assert page.locator("#search-result code").first.inner_text()  # the id is still shown
        context.close()
