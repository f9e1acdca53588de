"""Offline encyclopedia search in-process with libzim: ZIM files on disk, no server.

libzim's full-text search ANDs every word of the query and returns entry paths only, so
this module
1. relaxes queries: question words and stopwords are dropped up front (with AND, the
   typed query can only match a subset of what its content words match), then words that
   occur in no article; when the rest finds nothing, it tries every subset one word
   smaller (dropping common words first), and so on down, within a search budget;
   looser subsets only top up a result while they keep more than half of the words;
2. puts articles whose title contains query words first (libzim's ranking barely weighs
   titles: "how tall is mount everest" otherwise answers Mars before Mount Everest),
   keeping libzim's order otherwise;
3. writes its own snippet around the query words in the article's text.
libzim calls hold the GIL and block, so every call runs in a worker of the sources pool
(`sources.workers`), never behind model inference.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from html.parser import HTMLParser
from itertools import combinations, zip_longest
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from libzim.reader import Archive
from libzim.search import Query, Searcher
from pydantic import Field, field_validator

from sources.base import Item, Source, SourceError
from sources.registry import SourceConfig
from sources.workers import run_source_work
from sources.zim_build import ZimBuildError, ensure_zim, is_up_to_date

log = logging.getLogger(__name__)

MAX_ARTICLE_BYTES = 1024 * 1024  # snippets come from the text; huge pages are cut here
MAX_QUERY_WORDS = 8  # each word costs one term-frequency lookup
SEARCH_BUDGET = 24  # libzim searches per query and book for the subset relaxation
CANDIDATES_PER_RESULT = 3  # candidates gathered per wanted result, before the title rerank
_WORD = re.compile(r"\w+(?:'\w+)?")
_SPACE = re.compile(r"\s+")
_SENTENCE_START = re.compile(r"(?<=[.!?])\s+(?=\S)")

# Words that carry no topic: question words, auxiliaries, articles, polite filler.
_STOPWORD_LIST = """
    a about actually all also am an and any anything are as at be been being but by can
    could define definition describe details did do does explain explanation facts find for
    from give have how i if in info information into is it its know let me meaning more my
    of on or please say search show some something tell than that the their them then there
    these they this those to us want was we were what whats when where which who whom whose
    why will with would you your
"""
STOPWORDS = frozenset(_STOPWORD_LIST.split())


class ZimUnavailable(SourceError):
    """A configured ZIM file is missing, unreadable, unbuildable or has no full-text index."""

    reason = "zim_unavailable"


class Config(SourceConfig):
    """`sources.<name>` keys for `type: zim`."""

    type: Literal["zim"]
    paths: list[str] = Field(
        min_length=1, description="ZIM files, relative to the current working directory."
    )
    build_from: str | None = Field(
        default=None,
        description="A JSONL corpus; start() (re)builds paths[0] from it when missing or stale.",
    )
    max_results: int = Field(default=5, ge=1, le=50)
    snippet_chars: int = Field(default=300, ge=40, le=5000)
    url_base: str | None = Field(
        default=None,
        description="Items get url `url_base/<book>/<path>` (e.g. kiwix-serve's /content).",
    )

    @field_validator("paths")
    @classmethod
    def _non_empty_paths(cls, value: list[str]) -> list[str]:
        if any(not p.strip() for p in value):
            raise ValueError("paths must not contain empty strings")
        return value

    @field_validator("url_base")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else value


# --- query relaxation -------------------------------------------------------------


def query_words(query: str) -> list[str]:
    """Lower-cased words of `query`; quotes, brackets and other query syntax are dropped."""
    return [w.lower() for w in _WORD.findall(query)]


def content_words(query: str) -> list[str]:
    """`query` without stopwords, duplicates removed; all words if nothing else is left."""
    words = query_words(query)
    kept = [w for w in words if w not in STOPWORDS and w.replace("'", "") not in STOPWORDS]
    return list(dict.fromkeys(kept or words))[:MAX_QUERY_WORDS]


def relaxations(words: list[str], frequency: dict[str, int]) -> list[list[str]]:
    """A greedy chain from strictest to loosest, dropping the most common word each step.

    `frequency` maps a word to the number of articles matching it alone; words that match
    nothing are left out (they can only make an AND query fail). Ties drop the shorter
    word first. Used when the subset search ran out of budget.
    """
    current = [w for w in words if frequency.get(w, 0) > 0]
    steps: list[list[str]] = []
    while current:
        steps.append(list(current))
        worst = max(current, key=lambda w: (frequency[w], -len(w)))
        current.remove(worst)
    return steps


def subsets(words: list[str], frequency: dict[str, int], size: int) -> list[list[str]]:
    """The `size`-word subsets of `words`, those dropping the most common words first."""

    def dropped(combo: tuple[str, ...]) -> int:
        return sum(frequency[w] for w in words if w not in combo)

    return [list(c) for c in sorted(combinations(words, size), key=dropped, reverse=True)]


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 4 and word.endswith("s") else word


def word_matches(query_word: str, text_word: str) -> bool:
    """'planets' matches 'planet', 'light' matches 'lights' but not 'lightning'."""
    stem = _stem(query_word)
    if text_word in (query_word, stem):
        return True
    return len(stem) >= 4 and text_word.startswith(stem) and len(text_word) - len(stem) <= 3


def title_coverage(title: str, words: list[str]) -> float:
    """The share of the title's content words that the query names (0.0 to 1.0).

    'Mount Everest' is fully named by "how tall is mount everest", 'Mount Rushmore' half.
    """
    title_words = [w for w in query_words(title) if w not in STOPWORDS] or query_words(title)
    if not title_words:
        return 0.0
    named = sum(1 for t in title_words if any(word_matches(w, t) for w in words))
    return named / len(title_words)


# --- HTML to text and snippets ----------------------------------------------------


class _Text(HTMLParser):
    """Visible body text, without the <title>/<h1> (the item title says it already)."""

    _SKIP = frozenset({"script", "style", "head", "title", "h1", "noscript", "template"})
    _BREAK = frozenset({"p", "div", "li", "br", "tr", "h2", "h3", "h4", "h5", "h6", "section"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.chunks: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skip += 1
        elif tag in self._BREAK:
            self.chunks.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skip:
            self._skip -= 1
        elif tag in self._BREAK:
            self.chunks.append(" ")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.chunks.append(data)


def html_to_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    return _SPACE.sub(" ", "".join(parser.chunks)).strip()


def _word_pattern(word: str) -> str:
    """The regex form of `word_matches`: the word, or its stem plus a short ending."""
    stem = _stem(word)
    if len(stem) >= 4:
        return rf"\b{re.escape(stem)}\w{{0,3}}\b"
    return rf"\b{re.escape(word)}\b"


def make_snippet(text: str, words: list[str], limit: int) -> str:
    """At most `limit` characters of `text` around the densest early cluster of `words`."""
    if len(text) <= limit:
        return text
    lead = limit // 5
    hits: list[tuple[int, str]] = []
    if words:
        pattern = re.compile("|".join(f"({_word_pattern(w)})" for w in words), re.IGNORECASE)
        for match in pattern.finditer(text):
            hits.append((match.start(), words[match.lastindex - 1]))  # type: ignore[operator]
            if len(hits) >= 200:
                break
    start = 0
    if hits:
        best = max(
            hits,
            key=lambda h: (
                len({w for p, w in hits if h[0] - lead <= p < h[0] - lead + limit}),
                -h[0],
            ),
        )[0]
        start = max(0, best - lead)
        # Prefer to open at a sentence start shortly before the hit.
        sentence = [m.end() for m in _SENTENCE_START.finditer(text, start, best + 1)]
        if sentence:
            start = sentence[-1]
        elif start:
            space = text.find(" ", start, best)
            start = space + 1 if space != -1 else best
    prefix = "…" if start else ""
    room = limit - len(prefix)
    window = text[start:]
    if len(window) <= room:
        return prefix + window
    cut = window[: room - 1]
    if " " in cut[room // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return prefix + cut.rstrip(" ,;:") + "…"


# --- the source -------------------------------------------------------------------


@dataclass
class _Book:
    """One open archive and its searcher; the lock keeps one search at a time on it."""

    name: str
    path: Path
    archive: Archive
    searcher: Searcher
    lock: threading.Lock = field(default_factory=threading.Lock)

    def title(self, path: str) -> str:
        try:
            return self.archive.get_entry_by_path(path).title
        except KeyError:
            return ""

    def matches(self, words: list[str], limit: int) -> tuple[int, list[str]]:
        search = self.searcher.search(Query().set_query(" ".join(words)))
        total = search.getEstimatedMatches()
        return total, (list(search.getResults(0, limit)) if total and limit else [])


def open_book(path: Path) -> _Book:
    """Open `path` for full-text search, or raise `ZimUnavailable` saying what is wrong."""
    if not path.is_file():
        raise ZimUnavailable(f"ZIM file not found: {path}")
    try:
        archive = Archive(path)
    except (RuntimeError, OSError) as exc:
        raise ZimUnavailable(f"cannot open ZIM file {path}: {exc}") from None
    if not archive.has_fulltext_index:
        raise ZimUnavailable(f"ZIM file {path} has no full-text index")
    return _Book(path.name.removesuffix(".zim"), path, archive, Searcher(archive))


class ZimSource(Source):
    """Full-text search over one or more local ZIM files, merged by libzim's rank."""

    kind = "zim"

    def __init__(self, name: str, config: Config) -> None:
        super().__init__(name, config.timeout_s)
        self.config = config
        self._books: list[_Book] = []

    async def start(self) -> None:
        if not self._books:
            self._books = await run_source_work(self._open_all)

    def _open_all(self) -> list[_Book]:
        paths = [Path(p).expanduser() for p in self.config.paths]
        if self.config.build_from:
            corpus = Path(self.config.build_from).expanduser()
            if not corpus.is_file() and paths[0].is_file():
                # Started from another directory, say: the built file still answers.
                log.warning(
                    "%s: build_from %s is not there (a relative path is read from the "
                    "working directory, %s); using %s as it is",
                    self.name,
                    corpus,
                    Path.cwd(),
                    paths[0],
                )
            elif not is_up_to_date(corpus, paths[0]):
                try:
                    ensure_zim(corpus, paths[0])
                except ZimBuildError as exc:
                    lost = not corpus.is_file() and not corpus.is_absolute()
                    where = f" (a relative path is read from {Path.cwd()})" if lost else ""
                    raise ZimUnavailable(f"cannot build {paths[0]}: {exc}{where}") from None
        return [open_book(p) for p in paths]

    async def aclose(self) -> None:
        self._books = []

    async def info(self) -> dict[str, Any]:
        books = [
            {"name": b.name, "path": str(b.path), "articles": b.archive.article_count}
            for b in self._books
        ]
        return {
            "type": self.kind,
            "books": books,
            "articles": sum(b["articles"] for b in books),
        }

    async def search(self, query: str) -> list[Item]:
        if not self._books:
            raise ZimUnavailable(f"zim source {self.name!r} is not started")
        words = content_words(query)
        if not words:
            return []
        return await run_source_work(self._search_all, words)

    def _search_all(self, words: list[str]) -> list[Item]:
        per_book = [self._search_book(book, words) for book in self._books]
        merged: list[Item] = []
        for rank in zip_longest(*per_book):
            merged.extend(item for item in rank if item is not None)
        return merged[: self.config.max_results]

    def _search_book(self, book: _Book, words: list[str]) -> list[Item]:
        with book.lock:
            paths = self._ranked_paths(book, words)
            items = [self._item(book, path, words) for path in paths]
        return [item for item in items if item is not None]

    def _ranked_paths(self, book: _Book, words: list[str]) -> list[str]:
        """The best `max_results` paths for `words` in `book` (see the module docstring).

        Each candidate remembers how many query words the search that found it had; the
        score is that count plus twice the share of its title the query names, so the
        article *about* the subject beats one that merely mentions every word.
        """
        limit = self.config.max_results
        cap = limit * CANDIDATES_PER_RESULT
        frequency = {w: book.matches([w], 0)[0] for w in words}
        known = [w for w in words if frequency[w] > 0]
        keep_at_least = len(known) // 2 + 1
        found: dict[str, tuple[int, float]] = {}  # path -> (words matched, title coverage)
        budget = SEARCH_BUDGET

        def gather(step: list[str], titled_only: bool) -> None:
            for path in book.matches(step, cap)[1]:
                if path in found or len(found) >= cap:
                    continue
                coverage = title_coverage(book.title(path), known)
                if coverage or not titled_only:
                    found[path] = (len(step), coverage)

        for size in range(len(known), 0, -1):
            # Below the majority of the words, only articles named by the query get in.
            titled_only = bool(found) and size < keep_at_least
            for step in subsets(known, frequency, size):
                if budget <= 0 or len(found) >= cap:
                    break
                budget -= 1
                gather(step, titled_only)
            if budget <= 0 or len(found) >= cap or (not titled_only and len(found) >= limit):
                break
        if not found:  # out of budget on a long query: the greedy chain always ends
            for step in relaxations(known, frequency):
                gather(step, False)
                if found:
                    break
        ranked = sorted(found, key=lambda p: -(found[p][0] + 2.0 * found[p][1]))  # stable
        return ranked[:limit]

    def _item(self, book: _Book, path: str, words: list[str]) -> Item | None:
        try:
            entry = book.archive.get_entry_by_path(path)
            if entry.is_redirect:
                entry = entry.get_redirect_entry()
            zim_item = entry.get_item()
        except (KeyError, RuntimeError):
            return None  # the index names an entry the archive does not have
        if not zim_item.mimetype.startswith(("text/html", "text/plain")):
            return None
        raw = bytes(zim_item.content[:MAX_ARTICLE_BYTES]).decode("utf-8", "replace")
        text = html_to_text(raw) if zim_item.mimetype.startswith("text/html") else raw
        title = entry.title or zim_item.title or entry.path
        snippet = make_snippet(_SPACE.sub(" ", text).strip(), words, self.config.snippet_chars)
        url = None
        if self.config.url_base:
            url = f"{self.config.url_base}/{quote(book.name)}/{quote(entry.path, safe='/()._-')}"
        return Item(title=title, text=snippet or title, url=url)


def build(name: str, config: SourceConfig) -> Source:
    if not isinstance(config, Config):
        raise TypeError(f"zim source {name!r} needs a zim Config, got {type(config).__name__}")
    return ZimSource(name, config)
