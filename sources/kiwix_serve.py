"""Offline encyclopedia search through a running kiwix-serve (alternative to libzim in-process).

Verified against kiwix-tools 3.3.0 (libkiwix 11):
- full text: `GET /search?content=BOOK&pattern=Q&format=xml&pageLength=N` answers RSS whose
  `<item>` has `<title>`, a root-relative `<link>`, and a `<description>` snippet with the
  matched words in real `<b>` elements (so the whole `itertext()` is the snippet), plus
  `opensearch:totalResults` (which may carry thousands separators: "1,234");
- an unknown book → 400 with a (not well-formed) XML body `<detail>No such book: X</detail>`;
  a book without a full-text index → 404 "Fulltext search unavailable";
- titles: `GET /suggest?content=BOOK&term=Q&count=N` answers JSON
  `[{"value", "label", "kind": "path"|"pattern", "path"?}]`;
- every answer carries `Connection: close`, so nothing is kept alive.
`content=` is used for both calls because 3.3.0's /suggest does not know `books.name=`.
When the full-text search finds nothing (or the book has no full-text index), the title
suggestions answer instead, with the first paragraphs of each suggested article as text.
"""

from __future__ import annotations

import asyncio
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from itertools import zip_longest
from typing import Any, Literal
from urllib.parse import quote, urljoin

import httpx
from pydantic import Field, field_validator

from sources import http
from sources.base import Item, Source, SourceBadResponse, SourceError
from sources.registry import HttpUrl, SourceConfig

WHAT = "kiwix-serve"
MAX_BODY = 2 * 1024 * 1024  # search answers are bounded by pageLength; refuse anything huge
MAX_ARTICLE_BYTES = 512 * 1024  # enough for the opening paragraphs of any article
SNIPPET_CHARS = 600
_SPACE = re.compile(r"\s+")
_TAG = re.compile(r"<[^>]{0,200}>")
_DETAIL = re.compile(r"<(?:detail|error)>(.*?)</(?:detail|error)>", re.S)
_QUESTION = re.compile(
    r"^\s*(what|who|where|when|which|how)\s+(is|are|was|were|did|does|do)\s+(the\s+|a\s+|an\s+)?"
    r"|^\s*(tell me about|define|explain)\s+",
    re.I,
)


class KiwixUnknownBook(SourceError):
    """kiwix-serve does not serve a configured book (a config error, not an outage)."""

    reason = "unknown_book"


class _NoFullText(SourceError):
    reason = "no_fulltext_index"


class Config(SourceConfig):
    """`sources.<name>` keys for `type: kiwix_serve`."""

    type: Literal["kiwix_serve"]
    url: HttpUrl = Field(description="Base URL of kiwix-serve, with its --urlRootLocation if any.")
    books: list[str] = Field(min_length=1, description="Book names: ZIM file names without .zim")
    max_results: int = Field(default=5, ge=1, le=50)
    suggest_fallback: bool = Field(
        default=True, description="Answer from title suggestions when full text finds nothing."
    )

    @field_validator("books")
    @classmethod
    def _book_names(cls, value: list[str]) -> list[str]:
        names = [b.removesuffix(".zim").strip() for b in value]
        if any(not b or "/" in b for b in names):
            raise ValueError("book names are ZIM file names without .zim, and without '/'")
        return names


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def parse_total(text: str | None) -> int:
    """`opensearch:totalResults` as an int; "1,234" and "1 234" both mean 1234."""
    digits = re.sub(r"\D", "", text or "")
    return int(digits) if digits else 0


_DOCTYPE = re.compile(rb"<!DOCTYPE", re.IGNORECASE)


def parse_rss(body: bytes, base_url: str) -> tuple[int, list[Item]]:
    """(totalResults, items) from kiwix-serve's RSS search answer."""
    if len(body) > MAX_BODY:
        raise SourceBadResponse(f"{WHAT} search answer is over {MAX_BODY} bytes")
    if _DOCTYPE.search(body):
        # kiwix-serve declares none; one could declare entities that expand a small answer
        # into a huge one (expat refuses only the worst)
        raise SourceBadResponse(f"{WHAT} search answer declares a document type")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise SourceBadResponse(f"{WHAT} search answer is not XML ({exc})") from None
    channel = root.find("channel")
    if root.tag != "rss" or channel is None:
        raise SourceBadResponse(f"{WHAT} search answer is not an RSS channel")
    total = parse_total(channel.findtext("{http://a9.com/-/spec/opensearch/1.1/}totalResults"))
    items: list[Item] = []
    for entry in channel.findall("item"):
        title = _clean(entry.findtext("title") or "")
        link = (entry.findtext("link") or "").strip()
        description = entry.find("description")
        # The snippet holds <b> elements: findtext() would stop at the first one.
        snippet = _clean("".join(description.itertext())) if description is not None else ""
        snippet = _clean(_TAG.sub("", snippet))[:SNIPPET_CHARS]  # some send markup escaped
        if not title or not link:
            continue
        items.append(Item(title=title, text=snippet or title, url=urljoin(base_url + "/", link)))
    return total, items


class _Paragraphs(HTMLParser):
    """Collects the text of <p> elements (skipping kiwix's injected toolbar and scripts)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._depth = 0
        self._skip = 0
        self._chunks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "p":
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        elif tag == "p" and self._depth:
            self._depth -= 1
            if not self._depth:
                text = _clean("".join(self._chunks))
                self._chunks = []
                if text:
                    self.paragraphs.append(text)

    def handle_data(self, data: str) -> None:
        if self._depth and not self._skip:
            self._chunks.append(data)


def article_excerpt(html: str, limit: int = SNIPPET_CHARS) -> str:
    """The opening paragraphs of an article page, cut at about `limit` characters."""
    parser = _Paragraphs()
    parser.feed(html)
    parser.close()
    text = ""
    for paragraph in parser.paragraphs:
        text = f"{text} {paragraph}".strip()
        if len(text) >= limit:
            return text[:limit].rsplit(" ", 1)[0] + "…"
    return text


async def _map_error_status(response: httpx.Response) -> None:
    """Read kiwix-serve's error details before `sources.http` reduces them to a status."""
    path = response.request.url.path
    if response.status_code not in (400, 404) or not path.endswith(("/search", "/suggest")):
        return
    text = (await http.read_prefix(response, WHAT, 4096)).decode("utf-8", "replace")
    details = [_clean(_TAG.sub("", d)) for d in _DETAIL.findall(text)]
    detail = "; ".join(d for d in details if d and "is not a valid request" not in d)
    if "No such book" in text or (path.endswith("/suggest") and response.status_code == 404):
        book = response.request.url.params.get("content", "?")
        raise KiwixUnknownBook(f"{WHAT} does not serve the book {book!r}")
    if "Fulltext search unavailable" in text or "not available for this content" in text:
        raise _NoFullText(f"{WHAT} has no full-text index for this book")
    raise SourceError(
        f"{WHAT} rejected the request (HTTP {response.status_code})"
        + (f": {http.shown(detail)}" if detail else "")
    )


class KiwixServeSource(Source):
    """Books served by one kiwix-serve, searched concurrently and merged by rank."""

    kind = "kiwix_serve"

    def __init__(self, name: str, config: Config) -> None:
        super().__init__(name, config.timeout_s)
        self.config = config
        self._client: httpx.AsyncClient | None = None
        # Item URLs and info() never carry credentials a proxy URL may hold (user:pass@).
        self.public_base = str(httpx.URL(config.url).copy_with(username=None, password=None))
        self.public_base = self.public_base.rstrip("/")

    async def start(self) -> None:
        if self._client is None:
            self._client = http.make_client(self.config.url, self.timeout_s)
            self._client.event_hooks = {"request": [], "response": [_map_error_status]}

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise SourceError(f"{WHAT} source {self.name!r} used before start()")
        return self._client

    def article_url(self, book: str, path: str) -> str:
        return f"{self.public_base}/{quote(book)}/{quote(path, safe='/')}"

    async def search(self, query: str) -> list[Item]:
        if self._client is None:
            await self.start()
        # Xapian ANDs the words, so "what is photosynthesis" can miss what "photosynthesis"
        # finds: when the whole question finds nothing, its subject is tried alone.
        terms = [query]
        subject = _QUESTION.sub("", query).strip(" ?!.")
        if subject and subject.lower() != query.lower():
            terms.append(subject)
        for term in terms:
            per_book = await asyncio.gather(*(self._fulltext(b, term) for b in self.config.books))
            items = self._merge([found or [] for found in per_book])
            if items:
                return items
        if not self.config.suggest_fallback:
            return []
        suggested = await asyncio.gather(*(self._suggest(b, terms) for b in self.config.books))
        return self._merge(suggested)

    def _merge(self, per_book: list[list[Item]]) -> list[Item]:
        """Interleave the books' ranked lists, dropping repeats, up to max_results."""
        merged: list[Item] = []
        seen: set[str | None] = set()
        for row in zip_longest(*per_book):
            for item in row:
                if item is not None and item.url not in seen:
                    seen.add(item.url)
                    merged.append(item)
        return merged[: self.config.max_results]

    async def _fulltext(self, book: str, query: str) -> list[Item] | None:
        """Full-text hits in one book; None when the book has no full-text index."""
        params = {
            "content": book,
            "pattern": query,
            "format": "xml",
            "pageLength": str(self.config.max_results),
        }
        try:
            response = await http.request(
                self.client,
                "GET",
                "/search",
                what=WHAT,
                retries=1,
                max_bytes=MAX_BODY,
                params=params,
            )
        except _NoFullText:
            return None
        _total, items = parse_rss(response.content, self.public_base)
        return items

    async def _suggest(self, book: str, terms: list[str]) -> list[Item]:
        """Articles whose titles match the first of `terms` that matches any."""
        for term in terms:
            params = {"content": book, "term": term, "count": str(self.config.max_results)}
            response = await http.request(
                self.client,
                "GET",
                "/suggest",
                what=WHAT,
                retries=1,
                max_bytes=MAX_BODY,
                params=params,
            )
            entries = http.decode_json(response.content, f"{WHAT} /suggest")
            if not isinstance(entries, list):
                raise SourceBadResponse(f"{WHAT} suggestions are not a JSON list")
            found = [
                (e["value"], e["path"])
                for e in entries
                if isinstance(e, dict)
                and e.get("kind") == "path"
                and isinstance(e.get("value"), str)
                and isinstance(e.get("path"), str)
            ]
            if found:
                return list(
                    await asyncio.gather(
                        *(self._suggested_item(book, title, path) for title, path in found)
                    )
                )
        return []

    async def _suggested_item(self, book: str, title: str, path: str) -> Item:
        url = self.article_url(book, path)
        excerpt = await self._excerpt(url)
        return Item(title=_clean(title), text=excerpt or _clean(title), url=url)

    async def _excerpt(self, url: str) -> str:
        """The article's opening text; best effort (the title stands in when it fails, or
        takes over half the source's timeout: a page sent a byte at a time renews each
        read's timeout, and would hold the whole search)."""
        try:
            async with asyncio.timeout(self.timeout_s / 2):
                async with self.client.stream("GET", url) as response:
                    if response.status_code != 200:
                        return ""
                    body = await http.read_prefix(response, WHAT, MAX_ARTICLE_BYTES)
        except (httpx.HTTPError, SourceError, TimeoutError):
            return ""
        return article_excerpt(body.decode(response.encoding or "utf-8", "replace"))

    async def info(self) -> dict[str, Any]:
        return {"type": self.kind, "url": self.public_base, "books": list(self.config.books)}


def build(name: str, config: SourceConfig) -> Source:
    assert isinstance(config, Config)
    return KiwixServeSource(name, config)
