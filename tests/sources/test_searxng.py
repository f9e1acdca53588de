"""`searxng` against a loopback server replaying SearXNG's documented JSON API exactly.

SearXNG cannot run here, so `tests.support.wire_servers.SearxngServer` answers
`GET /search?q=...&format=json` with SearXNG's own JSON shape (results[].title/url/content,
unresponsive_engines, ...) and its own failure modes: Flask's HTML 403 when `json` is not in
`search.formats`, the limiter's 429, `{"error": "search error"}` with 500, and a proxy's 502.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from sources import registry, searxng
from sources.base import (
    SourceBadResponse,
    SourceError,
    SourceRateLimited,
    SourceServerError,
    SourceTimeout,
    SourceUnauthorized,
    SourceUnavailable,
)
from sources.searxng import SearxngSource
from tests.sources.hostile import BodyServer
from tests.support.wire_servers import Fault, SearxngServer, closed_port_url, searxng_result


@pytest.fixture(scope="module")
def server() -> Iterator[SearxngServer]:
    with SearxngServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _reset(server: SearxngServer) -> None:
    server.clear_faults()
    server.results = None
    server.unresponsive_engines = []
    server.requests.clear()


def make(url: str, **extra: object) -> SearxngSource:
    config = registry.kind_module("searxng").Config.model_validate(
        {"type": "searxng", "url": url, "timeout_s": 2, **extra}
    )
    source = registry.kind_module("searxng").build("web", config)
    assert isinstance(source, SearxngSource)
    return source


@pytest.fixture
async def web(server: SearxngServer) -> AsyncIterator[SearxngSource]:
    source = make(server.url)
    await source.start()
    yield source
    await source.aclose()


async def test_results_become_items_and_request_asks_for_json(
    web: SearxngSource, server: SearxngServer
) -> None:
    items = await web.search("python asyncio")
    assert [i.url for i in items] == [f"https://example.org/python-asyncio/{n}" for n in (1, 2, 3)]
    assert items[0].title == "Python Asyncio – result 1"
    assert items[0].text == "All about python asyncio, part 1."
    [seen] = server.requests
    assert seen.path == "/search"
    assert seen.param("q") == "python asyncio" and seen.param("format") == "json"
    assert seen.param("categories") is None and seen.param("language") is None


async def test_categories_language_and_max_results(server: SearxngServer) -> None:
    source = make(server.url, categories="general, news", language="de-DE", max_results=2)
    await source.start()
    try:
        items = await source.search("wetter")
    finally:
        await source.aclose()
    assert len(items) == 2
    seen = server.requests[-1]
    assert seen.param("categories") == "general,news"
    assert seen.param("language") == "de-DE"


async def test_results_without_title_or_url_and_repeats_are_dropped(
    web: SearxngSource, server: SearxngServer
) -> None:
    untitled = searxng_result("", "https://a.example/1", "no title")
    unlinked = searxng_result("No link", "https://b.example/", "no url")
    del unlinked["url"]
    good = searxng_result("Good", "https://c.example/", "  kept \n text ")
    no_content = searxng_result("Bare", "https://d.example/", "")
    server.results = [untitled, unlinked, good, dict(good), no_content]
    items = await web.search("anything")
    assert [(i.title, i.text, i.url) for i in items] == [
        ("Good", "kept text", "https://c.example/"),
        ("Bare", "Bare", "https://d.example/"),
    ]


async def test_empty_results_are_an_empty_list(web: SearxngSource, server: SearxngServer) -> None:
    server.set_fault(Fault.empty())
    assert await web.search("nothing to see") == []


async def test_all_engines_failing_is_a_server_error_not_empty(
    web: SearxngSource, server: SearxngServer
) -> None:
    server.results = []
    server.unresponsive_engines = [["duckduckgo", "timeout"], ["brave", "CAPTCHA"]]
    with pytest.raises(SourceServerError, match="duckduckgo \\(timeout\\)"):
        await web.search("anything")


@pytest.mark.parametrize(
    "engines",
    [
        [["x" * 3_000_000, "timeout"]],
        [["google", "y" * 3_000_000]],
        [["e" * 100_000, "r" * 100_000]] * 5,
        ["z" * 3_000_000],
    ],
    ids=["name", "reason", "many", "not-a-pair"],
)
async def test_a_huge_engine_name_is_cut_in_the_message(
    web: SearxngSource, server: SearxngServer, engines: list[list[str]]
) -> None:
    server.results = []
    server.unresponsive_engines = engines
    with pytest.raises(SourceServerError) as caught:
        await web.search("anything")
    assert str(caught.value).startswith("SearXNG engines did not answer: ")
    assert len(str(caught.value)) < 300


async def test_an_endless_answer_is_cut_off() -> None:
    """`BodyServer` (tests/sources/hostile.py) stands in for a SearXNG, or a proxy before
    it, whose answer never ends; it counts what it wrote before the router hung up."""
    async with BodyServer(None) as endless:
        source = make(endless.url)
        try:
            with pytest.raises(SourceBadResponse, match="over"):
                await source.search("anything")
        finally:
            await source.aclose()
        await endless.finished()
    assert endless.client_left and endless.written < 32 * 1024 * 1024


async def test_an_endless_error_page_is_read_only_in_part() -> None:
    """A 500 whose body never ends: SearXNG's `{"error"}` is looked for in its first bytes."""
    async with BodyServer(None, status=500) as endless:
        source = make(endless.url)
        try:
            with pytest.raises(SourceServerError, match="HTTP 500"):
                await source.search("anything")
        finally:
            await source.aclose()
        await endless.finished()
    assert endless.client_left and endless.written < 32 * 1024 * 1024


async def test_json_format_disabled_says_how_to_fix_it() -> None:
    with SearxngServer(formats=("html",)) as html_only:
        source = make(html_only.url)
        await source.start()
        try:
            with pytest.raises(SourceUnauthorized) as caught:
                await source.search("anything")
        finally:
            await source.aclose()
    assert "enable `json` in search.formats" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "error", "reason"),
    [
        (401, SourceUnauthorized, "unauthorized"),
        (403, SourceUnauthorized, "unauthorized"),
        (429, SourceRateLimited, "rate_limited"),
        (500, SourceServerError, "server_error"),
        (502, SourceServerError, "server_error"),
    ],
)
async def test_error_statuses_are_typed(
    web: SearxngSource, server: SearxngServer, status: int, error: type[SourceError], reason: str
) -> None:
    server.set_fault(Fault.status(status))
    with pytest.raises(error) as caught:
        await web.search("anything")
    assert caught.value.reason == reason


async def test_500_carries_searxng_message(web: SearxngSource, server: SearxngServer) -> None:
    server.set_fault(Fault.status(500))
    with pytest.raises(SourceServerError, match="search error"):
        await web.search("anything")
    assert len(server.requests) == 1  # a 500 is not retried


async def test_one_bad_gateway_is_retried(web: SearxngSource, server: SearxngServer) -> None:
    server.set_fault(Fault.status(502), times=1)
    assert len(await web.search("retry me")) == 3
    assert len(server.requests) == 2


async def test_no_query_is_a_400_with_its_message(web: SearxngSource) -> None:
    with pytest.raises(SourceError, match="No query") as caught:
        await web.search("")
    assert type(caught.value) is SourceError


@pytest.mark.parametrize("fault", [Fault.not_json(), Fault.wrong_shape()])
async def test_malformed_bodies(web: SearxngSource, server: SearxngServer, fault: Fault) -> None:
    server.set_fault(fault)
    with pytest.raises(SourceBadResponse):
        await web.search("anything")


async def test_result_that_is_not_an_object_is_malformed(
    web: SearxngSource, server: SearxngServer
) -> None:
    server.set_fault(Fault.custom(200, {"query": "q", "results": ["just a string"]}))
    with pytest.raises(SourceBadResponse):
        await web.search("q")


async def test_slow_answer_times_out_without_retry(server: SearxngServer) -> None:
    source = make(server.url, timeout_s=0.3)
    server.set_fault(Fault.delay(3))
    await source.start()
    try:
        with pytest.raises(SourceTimeout):
            await source.search("slow")
    finally:
        await source.aclose()
    assert len(server.requests) == 1


async def test_closed_port_is_unavailable() -> None:
    source = make(closed_port_url())
    await source.start()
    try:
        with pytest.raises(SourceUnavailable):
            await source.search("anything")
    finally:
        await source.aclose()


async def test_client_is_pooled_and_closed(server: SearxngServer) -> None:
    source = make(server.url)
    await source.start()
    client = source._client
    await source.search("one")
    await source.search("two")
    assert source._client is client
    await source.aclose()
    assert client is not None and client.is_closed and source._client is None


async def test_info_hides_credentials_in_url() -> None:
    source = make("http://user:secret@127.0.0.1:8888")
    info = await source.info()
    assert "secret" not in str(info)
    assert info["type"] == "searxng"


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        searxng.Config.model_validate({"type": "searxng", "url": "127.0.0.1:8888"})
    with pytest.raises(ValueError):
        searxng.Config.model_validate({"type": "searxng", "url": "http://x", "max_results": 0})
    with pytest.raises(ValueError):
        searxng.Config.model_validate({"type": "searxng", "url": "http://x", "api": "k"})
