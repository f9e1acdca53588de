"""Build the offline encyclopedia: a JSONL of articles in, a ZIM with a full-text index out.

`build_zim` does the work in-process. libzim's writer prints progress to file
descriptor 1, which would corrupt an MCP stdio stream or a CLI's `--json` output, so
servers and tests call `ensure_zim` instead: it rebuilds only when the ZIM is missing or
older than its JSONL, and then in a subprocess whose output is captured.

CLI: `python -m sources.zim_build IN.jsonl OUT.zim [--force]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import html
import json
import os
import re
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from libzim.writer import Creator, Hint, IndexData, Item, StringProvider

MAIN_PATH = "index"
BUILD_TIMEOUT_S = 300.0
_PROJECT_ROOT = Path(__file__).resolve().parent.parent


class ZimBuildError(RuntimeError):
    """The JSONL was unusable or the build subprocess failed."""


@dataclass(frozen=True, slots=True)
class Article:
    title: str
    text: str
    path: str


def slugify(title: str) -> str:
    """A URL-safe ZIM path for a title: 'Mercury (planet)' -> 'Mercury_(planet)'."""
    slug = re.sub(r"[^A-Za-z0-9()._-]+", "_", title).strip("_.")
    return slug or "article"


def read_articles(jsonl: Path) -> list[Article]:
    """Parse and validate the corpus; unique paths are guaranteed (suffixes on clashes)."""
    articles: list[Article] = []
    seen_titles: set[str] = set()
    seen_paths: set[str] = {MAIN_PATH}
    try:
        lines = jsonl.read_text(encoding="utf-8").split("\n")  # not splitlines: U+2028 is text
    except UnicodeDecodeError as exc:
        raise ZimBuildError(f"{jsonl}: not UTF-8 text (at byte {exc.start})") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ZimBuildError(f"{jsonl}:{lineno}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ZimBuildError(f"{jsonl}:{lineno}: expected a JSON object")
        title, text = row.get("title"), row.get("text")
        if not isinstance(title, str) or not title.strip():
            raise ZimBuildError(f"{jsonl}:{lineno}: missing or empty 'title'")
        if not isinstance(text, str) or not text.strip():
            raise ZimBuildError(f"{jsonl}:{lineno}: missing or empty 'text'")
        title = title.strip()
        if title in seen_titles:
            raise ZimBuildError(f"{jsonl}:{lineno}: duplicate title {title!r}")
        seen_titles.add(title)
        path, n = slugify(title), 2
        while path in seen_paths:
            path, n = f"{slugify(title)}_{n}", n + 1
        seen_paths.add(path)
        articles.append(Article(title, text.strip(), path))
    if not articles:
        raise ZimBuildError(f"{jsonl}: no articles")
    return articles


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body><h1>{html.escape(title)}</h1>\n"
        f"{body}\n</body></html>\n"
    )


def article_html(article: Article) -> str:
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", article.text) if p.strip()]
    body = "\n".join(f"<p>{html.escape(' '.join(p.split()))}</p>" for p in paragraphs)
    return _page(article.title, body)


def index_html(articles: list[Article], title: str) -> str:
    links = "\n".join(
        f'<li><a href="{html.escape(a.path)}">{html.escape(a.title)}</a></li>'
        for a in sorted(articles, key=lambda a: a.title.casefold())
    )
    return _page(title, f"<ul>\n{links}\n</ul>")


class _NoIndex(IndexData):
    """Keeps the main page (which lists every title) out of the full-text index."""

    def has_indexdata(self) -> bool:
        return False

    def get_title(self) -> str:
        return ""

    def get_content(self) -> str:
        return ""

    def get_keywords(self) -> str:
        return ""

    def get_wordcount(self) -> int:
        return 0

    def get_geoposition(self) -> tuple[float, float] | None:
        return None


class _Page(Item):
    def __init__(self, path: str, title: str, content: str, front: bool) -> None:
        super().__init__()
        self._path, self._title, self._content, self._front = path, title, content, front
        if not front:
            self.get_indexdata = _NoIndex

    def get_path(self) -> str:
        return self._path

    def get_title(self) -> str:
        return self._title

    def get_mimetype(self) -> str:
        return "text/html"

    def get_contentprovider(self) -> StringProvider:
        return StringProvider(self._content)

    def get_hints(self) -> dict[Hint, int]:
        return {Hint.FRONT_ARTICLE: self._front}


def _png(size: int, rgb: tuple[int, int, int]) -> bytes:
    """A plain square PNG: kiwix tools expect a 48x48 `Illustration`."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * size
    ihdr = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(row * size))
        + chunk(b"IEND", b"")
    )


def is_up_to_date(jsonl: Path, out: Path) -> bool:
    """True when `out` exists and is at least as new as `jsonl`."""
    try:
        return out.stat().st_mtime >= jsonl.stat().st_mtime
    except FileNotFoundError:
        return False


def build_zim(jsonl: Path, out: Path, *, force: bool = False) -> Path:
    """Write `out` from `jsonl` (atomically); a no-op when `out` is already up to date.

    Runs libzim in this process, so it prints to fd 1: use `ensure_zim` from servers.
    """
    jsonl, out = Path(jsonl), Path(out)
    if not jsonl.is_file():
        raise ZimBuildError(f"corpus not found: {jsonl}")
    if not force and is_up_to_date(jsonl, out):
        return out
    articles = read_articles(jsonl)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.building")
    book_title = "Offline encyclopedia (demo)"
    try:
        creator = Creator(tmp).config_indexing(True, "eng").config_nbworkers(1)
        with creator as c:
            c.set_mainpath(MAIN_PATH)
            c.add_metadata("Title", book_title)
            c.add_metadata("Name", out.stem)
            c.add_metadata("Language", "eng")
            c.add_metadata("Creator", "search-router project")
            c.add_metadata("Publisher", "search-router project")
            c.add_metadata("Date", dt.date.today().isoformat())
            c.add_metadata("Description", "Short general-knowledge articles for offline search")
            c.add_metadata("License", "CC BY 4.0")
            c.add_illustration(48, _png(48, (40, 90, 160)))
            c.add_item(_Page(MAIN_PATH, book_title, index_html(articles, book_title), False))
            for article in articles:
                c.add_item(_Page(article.path, article.title, article_html(article), True))
        os.replace(tmp, out)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".tmp")):
            leftover.unlink(missing_ok=True)
    return out


@contextmanager
def _build_lock(out: Path) -> Iterator[None]:
    """Serialise concurrent builders of the same file (two servers, parallel tests)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = out.with_name(f".{out.name}.lock")
    with lock.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_zim(jsonl: Path, out: Path, *, timeout_s: float = BUILD_TIMEOUT_S) -> Path:
    """Return `out`, first (re)building it from `jsonl` in a subprocess if it is stale.

    The subprocess's stdout and stderr are captured, so nothing reaches this process's
    fd 1; on failure the tail of that output is in the `ZimBuildError` message.
    """
    jsonl, out = Path(jsonl).resolve(), Path(out).resolve()
    if not jsonl.is_file():
        raise ZimBuildError(f"corpus not found: {jsonl}")
    if is_up_to_date(jsonl, out):
        return out
    with _build_lock(out):
        if is_up_to_date(jsonl, out):  # another process built it while we waited
            return out
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
        )
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "sources.zim_build", str(jsonl), str(out)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=_PROJECT_ROOT,
                env=env,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ZimBuildError(
                f"building {out} from {jsonl} timed out after {timeout_s:g}s"
            ) from None
        if proc.returncode != 0 or not out.is_file():
            raise ZimBuildError(
                f"building {out} from {jsonl} failed (exit {proc.returncode}): "
                + _why(proc.stdout.decode("utf-8", "replace"))
            )
    return out


def _why(output: str) -> str:
    """The builder's own `error:` line, else the last line it printed (a traceback's last
    line names the exception): one line, not the traceback."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    found = errors[-1] if errors else (lines[-1] if lines else "no output")
    return found[:300]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sources.zim_build", description=__doc__)
    parser.add_argument("jsonl", type=Path, help="articles, one JSON object per line")
    parser.add_argument("out", type=Path, help="the ZIM file to write")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    try:
        path = build_zim(args.jsonl, args.out, force=args.force)
    except ZimBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
