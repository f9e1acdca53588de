"""`kiwix_serve` against a REAL kiwix-serve (Debian kiwix-tools) over ZIMs this suite builds.

Nothing here is replayed: the ZIMs are written by libzim's Creator with a full-text index
(and one without), kiwix-serve serves them on 127.0.0.1, and the source talks to it.
Skipped only when the kiwix-serve binary is not installed (`.ci/run` installs it).
What a real kiwix-serve cannot be made to send (NaN in /suggest, endless or huge bodies,
a proxy's 429) comes from loopback servers at the end: `KiwixWire`, speaking kiwix-serve
3.3.0's /search and /suggest formats, and tests/sources/hostile.py's `BodyServer`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from sources import kiwix_serve
from sources.base import SourceBadResponse, SourceError, SourceRateLimited, SourceUnavailable
from sources.kiwix_serve import KiwixServeSource, KiwixUnknownBook, article_excerpt, parse_rss
from sources.zim_build import ensure_zim
from tests.sources.hostile import BodyServer
from tests.support.kiwix_serve import TINY_ARTICLES, KiwixServe, available, build_zim
from tests.support.require import require_service
from tests.support.wire_servers import WireServer, closed_port_url

CORPUS = Path(__file__).resolve().parents[2] / "sources" / "corpus" / "articles.jsonl"
needs_kiwix = pytest.mark.usefixtures("kiwix_installed")


@pytest.fixture
def kiwix_installed() -> None:
    require_service("kiwix-serve", available(), "kiwix-tools is not installed")


OTHER_ARTICLES = [
    {
        "path": "Glacier",
        "title": "Glacier",
        "text": "A glacier is a persistent body of dense ice that moves slowly under its weight.",
    },
    {
        "path": "Volcano_island",
        "title": "Volcano island",
        "text": "A volcanic island rises from the sea floor where magma breaks through the crust.",
    },
]


@pytest.fixture(scope="module")
def kiwix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KiwixServe]:
    require_service("kiwix-serve", available(), "kiwix-tools is not installed")
    root = tmp_path_factory.mktemp("kiwix")
    zims = [
        build_zim(root / "tiny.zim", TINY_ARTICLES),
        build_zim(root / "other.zim", OTHER_ARTICLES),
        build_zim(root / "noindex.zim", TINY_ARTICLES, indexing=False),
        # The encyclopedia the project ships, built the way the app builds it.
        ensure_zim(CORPUS, root / "corpus.zim"),
    ]
    with KiwixServe(zims) as server:
        yield server


def make(url: str, books: list[str], **extra: object) -> KiwixServeSource:
    config = kiwix_serve.Config.model_validate(
        {"type": "kiwix_serve", "url": url, "books": books, "timeout_s": 5, **extra}
    )
    source = kiwix_serve.build("kiwix", config)
    assert isinstance(source, KiwixServeSource)
    return source


@pytest.fixture
async def tiny(kiwix: KiwixServe) -> AsyncIterator[KiwixServeSource]:
    source = make(kiwix.url, ["tiny"])
    await source.start()
    yield source
    await source.aclose()


@needs_kiwix
async def test_fulltext_finds_article_with_whole_snippet(
    tiny: KiwixServeSource, kiwix: KiwixServe
) -> None:
    items = await tiny.search("magma mantle")
    assert [i.title for i in items] == ["Volcano"]
    item = items[0]
    # The snippet wraps matches in <b>: the text must run past the first one, untagged.
    assert "<b>" not in item.text and "</b>" not in item.text
    assert "rupture in the crust" in item.text
    assert "Magma rises" in item.text
    assert item.url == f"{kiwix.url}/tiny/Volcano"


@needs_kiwix
async def test_shipped_encyclopedia_served_by_kiwix_serve(kiwix: KiwixServe) -> None:
    source = make(kiwix.url, ["corpus"], max_results=3)
    await source.start()
    try:
        items = await source.search("who was Marie Curie")
    finally:
        await source.aclose()
    assert items[0].title == "Marie Curie"
    assert "physicist" in items[0].text
    assert items[0].url == f"{kiwix.url}/corpus/Marie_Curie"


@needs_kiwix
async def test_item_url_opens_the_article_on_kiwix_serve(tiny: KiwixServeSource) -> None:
    [item] = await tiny.search("Enigma cipher")
    assert item.url is not None
    async with httpx.AsyncClient(timeout=5) as client:
        page = await client.get(item.url)
    assert page.status_code == 200
    assert "Bletchley Park" in page.text


@needs_kiwix
async def test_question_words_do_not_defeat_fulltext(tiny: KiwixServeSource) -> None:
    items = await tiny.search("what is a lighthouse?")
    assert items and items[0].title == "Lighthouse"
    assert "guides ships" in items[0].text


@needs_kiwix
async def test_nothing_found_is_empty_list(tiny: KiwixServeSource) -> None:
    assert await tiny.search("zebrafish quasar") == []


@needs_kiwix
async def test_max_results_caps_items(tiny: KiwixServeSource, kiwix: KiwixServe) -> None:
    assert len(await tiny.search("the")) > 1  # several articles match
    source = make(kiwix.url, ["tiny"], max_results=1)
    await source.start()
    try:
        items = await source.search("the")
    finally:
        await source.aclose()
    assert len(items) == 1


@needs_kiwix
async def test_two_books_are_merged_by_rank(kiwix: KiwixServe) -> None:
    source = make(kiwix.url, ["tiny", "other"])
    await source.start()
    try:
        items = await source.search("magma")
    finally:
        await source.aclose()
    assert {i.url for i in items} == {
        f"{kiwix.url}/tiny/Volcano",
        f"{kiwix.url}/other/Volcano_island",
    }


@needs_kiwix
async def test_suggestions_answer_when_the_book_has_no_fulltext_index(kiwix: KiwixServe) -> None:
    source = make(kiwix.url, ["noindex"])
    await source.start()
    try:
        items = await source.search("honey bee")
    finally:
        await source.aclose()
    assert [i.title for i in items] == ["Honey bee"]
    # The suggested article is fetched: its opening paragraph is the text.
    assert "collects nectar and pollen" in items[0].text
    assert items[0].url == f"{kiwix.url}/noindex/Honey_bee"


@needs_kiwix
async def test_suggestions_answer_when_fulltext_finds_nothing(kiwix: KiwixServe) -> None:
    # "Alan Tur" is a title prefix but not a full word: full text misses, suggest hits.
    source = make(kiwix.url, ["tiny"])
    await source.start()
    try:
        items = await source.search("Alan Tur")
        assert [i.title for i in items] == ["Alan Turing"]
        assert "English mathematician" in items[0].text
        source.config = source.config.model_copy(update={"suggest_fallback": False})
        assert await source.search("Alan Tur") == []
    finally:
        await source.aclose()


@needs_kiwix
async def test_unknown_book_is_a_typed_error(kiwix: KiwixServe) -> None:
    source = make(kiwix.url, ["no_such_book"])
    await source.start()
    try:
        with pytest.raises(KiwixUnknownBook, match="no_such_book") as caught:
            await source.search("volcano")
    finally:
        await source.aclose()
    assert caught.value.reason == "unknown_book"


async def test_closed_port_is_source_unavailable() -> None:
    source = make(closed_port_url(), ["tiny"])
    await source.start()
    try:
        with pytest.raises(SourceUnavailable) as caught:
            await source.search("volcano")
    finally:
        await source.aclose()
    assert caught.value.reason == "connection_refused"


@needs_kiwix
async def test_stopped_server_is_source_unavailable(tmp_path: Path) -> None:
    with KiwixServe([build_zim(tmp_path / "solo.zim", TINY_ARTICLES[:2])]) as server:
        source = make(server.url, ["solo"])
        await source.start()
        assert await source.search("volcano")
    try:
        with pytest.raises(SourceUnavailable):
            await source.search("volcano")
    finally:
        await source.aclose()


# -- parsing, on the exact bytes kiwix-serve 3.3.0 sends ----------------------------------

RSS = b"""<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"
     xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/"
     xmlns:atom="http://www.w3.org/2005/Atom">
  <channel>
    <title>Search: volcano</title>
    <link>/search?pattern=volcano&amp;content=wiki&amp;format=xml&amp;start=1&amp;pageLength=25</link>
    <description>Search result for volcano</description>
    <opensearch:totalResults>1,234</opensearch:totalResults>
    <opensearch:startIndex>1</opensearch:startIndex>
    <opensearch:itemsPerPage>25</opensearch:itemsPerPage>
    <item>
      <title>Volcano</title>
      <link>/kiwix/wiki/Volcano</link>
        <description><b>Volcano</b> A <b>volcano</b> is a rupture in the crust....</description>
        <book><title>Wiki</title></book>
        <wordCount>23</wordCount>
    </item>
  </channel>
</rss>
"""


def test_parse_rss_total_with_separators_and_whole_description() -> None:
    total, items = parse_rss(RSS, "http://127.0.0.1:9/kiwix")
    assert total == 1234
    assert items[0].text == "Volcano A volcano is a rupture in the crust...."
    # A root-relative link keeps the --urlRootLocation prefix it already carries.
    assert items[0].url == "http://127.0.0.1:9/kiwix/wiki/Volcano"


def test_parse_rss_rejects_non_xml_and_huge_bodies() -> None:
    with pytest.raises(SourceBadResponse):
        parse_rss(b"<html><body>proxy error", "http://x")
    with pytest.raises(SourceBadResponse):
        parse_rss(b"<feed></feed>", "http://x")
    with pytest.raises(SourceBadResponse, match="over"):
        parse_rss(b" " * (kiwix_serve.MAX_BODY + 1), "http://x")


def test_article_excerpt_skips_toolbar_and_scripts() -> None:
    page = (
        "<html><head><script>var x = '<p>no</p>';</script></head><body>"
        "<span class='kiwix'><form><input name='pattern'></form></span>"
        "<h1>T</h1><p>First   paragraph.</p><div><p>Second <i>one</i>.</p></div></body></html>"
    )
    assert article_excerpt(page) == "First paragraph. Second one."


def test_config_rejects_bad_books_and_urls() -> None:
    with pytest.raises(ValueError):
        kiwix_serve.Config.model_validate({"type": "kiwix_serve", "url": "http://x", "books": []})
    with pytest.raises(ValueError):
        kiwix_serve.Config.model_validate({"type": "kiwix_serve", "url": "ftp://x", "books": ["a"]})
    config = kiwix_serve.Config.model_validate(
        {"type": "kiwix_serve", "url": "http://x/", "books": ["wiki.zim"]}
    )
    assert config.books == ["wiki"] and config.url == "http://x"


@needs_kiwix
async def test_credentials_in_url_never_reach_items_or_info(kiwix: KiwixServe) -> None:
    source = make(kiwix.url.replace("http://", "http://reader:s3cret@"), ["tiny"])
    await source.start()
    try:
        [item] = await source.search("Enigma cipher")
        info = await source.info()
    finally:
        await source.aclose()
    assert item.url == f"{kiwix.url}/tiny/Alan_Turing"
    assert "s3cret" not in str(info)


# -- what a real kiwix-serve cannot be made to send -----------------------------------------

EMPTY_RSS = b"""<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/">
  <channel>
    <title>Search: nothing</title>
    <opensearch:totalResults>0</opensearch:totalResults>
  </channel>
</rss>
"""


class KiwixWire(WireServer):
    """kiwix-serve 3.3.0's `/search` (RSS that finds nothing) and `/suggest` (JSON), the
    latter answering `suggest`: for the suggestion bodies a real kiwix-serve never sends."""

    def __init__(self, suggest: str, trickle_articles: bool = False) -> None:
        super().__init__()
        self.suggest = suggest
        self.trickle_articles = trickle_articles

    def routes(self) -> list[Route]:
        async def search(request: Request) -> Response:
            return await self.serve(request, lambda _r, _s: Response(EMPTY_RSS, 200))

        async def suggest(request: Request) -> Response:
            body = Response(self.suggest, media_type="application/json; charset=utf-8")
            return await self.serve(request, lambda _r, _s: body)

        async def article(request: Request) -> Response:
            """An article page sent a byte every 0.1 s (each read well within a timeout)."""

            async def drip() -> AsyncIterator[bytes]:
                yield b"<html><body><p>"
                for _ in range(300):
                    await asyncio.sleep(0.1)
                    yield b"x"

            return StreamingResponse(drip(), media_type="text/html")

        routes = [Route("/search", search), Route("/suggest", suggest)]
        if self.trickle_articles:
            routes.append(Route("/{book}/{path:path}", article))
        return routes


@pytest.mark.parametrize(
    "suggest",
    [
        '[{"value": "A", "label": "A", "kind": "path", "path": "A", "n": NaN}]',
        '[{"value": "A", "label": "A", "kind": "path", "path": "A", "n": 1e999}]',
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=["nan", "1e999", "deep"],
)
async def test_suggestions_no_parser_takes_are_malformed(suggest: str) -> None:
    with KiwixWire(suggest) as server:
        source = make(server.url, ["wiki"])
        try:
            with pytest.raises(SourceBadResponse, match="not JSON") as caught:
                await source.search("volcano")
        finally:
            await source.aclose()
    assert caught.value.reason == "malformed_response"


async def test_kiwix_wire_sanity_a_plain_suggestion_answers() -> None:
    with KiwixWire('[{"value": "Lava", "label": "Lava", "kind": "path", "path": "A/Lava"}]') as srv:
        source = make(srv.url, ["wiki"])
        try:
            [item] = await source.search("lava")
        finally:
            await source.aclose()
    assert item.title == "Lava" and item.url == f"{srv.url}/wiki/A/Lava"


async def test_an_article_page_sent_a_byte_at_a_time_gives_way_to_its_title() -> None:
    """The excerpt is best effort: a page that never ends (each byte renewing the read's
    timeout) is given up after half the source's timeout, and the title answers."""
    suggestion = '[{"value": "Lava", "label": "Lava", "kind": "path", "path": "A/Lava"}]'
    with KiwixWire(suggestion, trickle_articles=True) as srv:
        source = make(srv.url, ["wiki"], timeout_s=2)
        try:
            started = asyncio.get_running_loop().time()
            [item] = await source.search("lava")
            took = asyncio.get_running_loop().time() - started
        finally:
            await source.aclose()
    assert (item.title, item.text) == ("Lava", "Lava")
    assert took < 2  # within the source's own timeout: the search answers


def test_parse_rss_refuses_a_document_type_and_bounds_a_snippet() -> None:
    """kiwix-serve declares no document type; one could declare an entity that a small
    answer uses 100,000 times (under expat's own guard, still a huge item)."""
    entity = b'<!DOCTYPE rss [<!ENTITY e "' + b"A" * 250 + b'">]>'
    bomb = RSS.replace(b"<rss", entity + b"<rss", 1).replace(b"<b>volcano</b>", b"&e;" * 1000)
    with pytest.raises(SourceBadResponse, match="declares a document type"):
        parse_rss(bomb, "http://x")
    long = RSS.replace(b"<b>volcano</b>", b"lava " * 2000)
    [item] = parse_rss(long, "http://x")[1]
    assert len(item.text) <= kiwix_serve.SNIPPET_CHARS


async def test_429_is_rate_limited() -> None:
    """`BodyServer` (tests/sources/hostile.py): a proxy before kiwix-serve that rate-limits."""
    async with BodyServer(20, status=429, content_type="text/plain") as server:
        source = make(server.url, ["wiki"])
        try:
            with pytest.raises(SourceRateLimited) as caught:
                await source.search("volcano")
        finally:
            await source.aclose()
    assert caught.value.reason == "rate_limited"


@pytest.mark.parametrize("size", [300 * 1024 * 1024, None], ids=["300MiB", "endless"])
async def test_a_search_answer_over_the_limit_is_cut_off(size: int | None) -> None:
    async with BodyServer(size, content_type="application/rss+xml") as server:
        source = make(server.url, ["wiki"])
        try:
            with pytest.raises(SourceBadResponse, match=f"over {kiwix_serve.MAX_BODY} bytes"):
                await source.search("volcano")
        finally:
            await source.aclose()
        await server.finished()
    assert server.client_left and server.written < kiwix_serve.MAX_BODY + 24 * 1024 * 1024


async def test_an_endless_error_page_is_read_only_in_part() -> None:
    """kiwix-serve's 400 details are looked for in the first bytes of the page only."""
    async with BodyServer(None, status=400, content_type="text/html") as server:
        source = make(server.url, ["wiki"])
        try:
            with pytest.raises(SourceError, match="HTTP 400"):
                await source.search("volcano")
        finally:
            await source.aclose()
        await server.finished()
    assert server.client_left and server.written < 24 * 1024 * 1024
