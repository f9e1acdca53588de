"""The in-process `zim` source, on real ZIM files written by libzim from the shipped corpus.

Nothing is mocked: `build_demo_zim` runs the real builder (libzim's Creator with a
full-text index) in a subprocess, and `ZimSource` searches the result with libzim's
Searcher. Extra small ZIMs are built the same way from JSONL written by the tests.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pydantic
import pytest
from libzim.reader import Archive
from libzim.search import Query, Searcher

from sources.registry import kind_module
from sources.zim import (
    Config,
    ZimSource,
    ZimUnavailable,
    build,
    content_words,
    make_snippet,
    relaxations,
    title_coverage,
)
from sources.zim_build import ZimBuildError, build_zim, ensure_zim, slugify
from tests.support.zim import CORPUS, build_demo_zim


@pytest.fixture(scope="module")
def demo_zim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_zim(tmp_path_factory.mktemp("zim"))


def write_jsonl(path: Path, articles: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(a) + "\n" for a in articles), encoding="utf-8")
    return path


SMALL = [
    {"title": "Liberty Bell", "text": "The Liberty Bell is a bell in Philadelphia.\n\nIt cracked."},
    {"title": "Liberty ships", "text": "Liberty ships were cargo ships built in wartime."},
    {"title": "Kettle", "text": "A kettle boils water for tea."},
]


async def started(paths: list[Path | str], **extra: object) -> ZimSource:
    config = Config.model_validate({"type": "zim", "paths": [str(p) for p in paths], **extra})
    source = build("kiwix", config)
    assert isinstance(source, ZimSource)
    await source.start()
    return source


# --- the shipped corpus ----------------------------------------------------------


def test_corpus_has_enough_unique_non_empty_articles() -> None:
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    titles = [row["title"] for row in rows]
    assert len(set(titles)) == len(titles) >= 190
    assert all(row["text"].strip() and row["title"].strip() for row in rows)
    assert all(set(row) == {"title", "text"} for row in rows)
    for needed in ("Romeo and Juliet", "Statue of Liberty", "Salt", "Black pepper", "Rain"):
        assert needed in titles
    # Slugs are unique too, so no article shadows another in the ZIM.
    assert len({slugify(t) for t in titles}) == len(titles)


# --- searching the demo ZIM ------------------------------------------------------


async def test_statue_of_liberty_comes_first_with_a_snippet_of_the_query(demo_zim: Path) -> None:
    source = await started([demo_zim])
    items = await source.search("Statue of Liberty")
    assert items[0].title == "Statue of Liberty"
    snippet = items[0].text.lower()
    assert "statue" in snippet and "liberty" in snippet
    assert 0 < len(items[0].text) <= 300
    assert items[0].url is None  # no url_base configured


async def test_question_words_are_dropped_and_the_query_relaxed(demo_zim: Path) -> None:
    query = "who wrote romeo and juliet"
    # libzim alone ANDs every word, and no article has all of them:
    raw = Searcher(Archive(demo_zim)).search(Query().set_query(query))
    assert raw.getEstimatedMatches() == 0
    source = await started([demo_zim])
    titles = [item.title for item in await source.search(query)]
    assert titles[0] == "Romeo and Juliet"  # named by the query, so ranked first
    assert "William Shakespeare" in titles  # the article that has every content word


async def test_looser_matches_only_top_up_with_articles_the_query_names(demo_zim: Path) -> None:
    source = await started([demo_zim])
    titles = [item.title for item in await source.search("how tall is mount everest")]
    assert titles[0] == "Mount Everest"
    assert "Mars" in titles  # "as tall as Mount Everest": every word, so still listed
    # 'Statue of Liberty' matches two articles; single-word matches ('liberty' alone)
    # name neither word in their titles, so they do not pad the answer.
    titles = [item.title for item in await source.search("Statue of Liberty")]
    assert titles == ["Statue of Liberty", "New York City"]


async def test_nonsense_finds_nothing(demo_zim: Path) -> None:
    source = await started([demo_zim])
    assert await source.search("qwxzv plorknath zzyzzyx") == []
    assert len(await source.search("the of and")) <= 5  # stopwords only: no crash
    # Xapian operator syntax in user input is plain text, never a parse error.
    assert isinstance(await source.search('"unbalanced AND ( NOT'), list)


async def test_snippets_are_bounded_and_centred_on_the_query(demo_zim: Path) -> None:
    source = await started([demo_zim], snippet_chars=80, max_results=3)
    for query in ("thunderstorm", "who discovered penicillin", "capital of France", "rain"):
        items = await source.search(query)
        assert 1 <= len(items) <= 3
        for item in items:
            assert 0 < len(item.text) <= 80, item
    (item,) = [
        i for i in await source.search("who discovered penicillin") if i.title == "Penicillin"
    ]
    assert "discovered penicillin" in item.text  # the hit is past the first 80 characters
    assert item.text.startswith("…")


async def test_urls_name_book_and_path_when_url_base_is_set(demo_zim: Path) -> None:
    source = await started([demo_zim], url_base="http://127.0.0.1:8080/content/")
    items = await source.search("Statue of Liberty")
    assert items[0].url == "http://127.0.0.1:8080/content/demo/Statue_of_Liberty"


async def test_results_of_several_books_are_merged_round_robin(
    demo_zim: Path, tmp_path: Path
) -> None:
    small = ensure_zim(write_jsonl(tmp_path / "small.jsonl", SMALL), tmp_path / "small.zim")
    source = await started([demo_zim, small], url_base="http://h/content", max_results=4)
    urls = [item.url or "" for item in await source.search("liberty")]
    books = [url.split("/")[4] for url in urls]
    assert books == ["demo", "small", "demo", "small"]
    info = await source.info()
    assert info["type"] == "zim"
    shipped = len(CORPUS.read_text(encoding="utf-8").splitlines())
    assert [(b["name"], b["articles"]) for b in info["books"]] == [("demo", shipped), ("small", 3)]
    assert info["articles"] == shipped + 3


async def test_search_runs_off_the_event_loop_thread(demo_zim: Path) -> None:
    source = await started([demo_zim])
    seen: list[str] = []
    original = source._search_all

    def spy(words: list[str]):  # type: ignore[no-untyped-def]
        seen.append(threading.current_thread().name)
        return original(words)

    source._search_all = spy  # type: ignore[method-assign]
    await source.search("gravity")
    assert seen and seen[0] != threading.current_thread().name


async def test_paths_are_relative_to_the_working_directory(
    demo_zim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(demo_zim.parent)
    source = await started(["demo.zim"])
    assert (await source.search("photosynthesis"))[0].title == "Photosynthesis"


# --- start-up failures -----------------------------------------------------------


async def test_missing_file_fails_start_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "wiki.zim"
    source = build("kiwix", Config(type="zim", paths=[str(missing)]))
    with pytest.raises(ZimUnavailable, match="not found") as err:
        await source.start()
    assert str(missing) in str(err.value)
    assert err.value.reason == "zim_unavailable"


async def test_unreadable_file_fails_start_naming_the_path(tmp_path: Path) -> None:
    junk = tmp_path / "junk.zim"
    junk.write_bytes(b"this is not a zim file" * 100)
    with pytest.raises(ZimUnavailable, match="cannot open") as err:
        await started([junk])
    assert str(junk) in str(err.value)


async def test_zim_without_fulltext_index_fails_start(tmp_path: Path) -> None:
    from libzim.writer import Creator, Hint, Item, StringProvider

    class Page(Item):
        def get_path(self) -> str:
            return "A"

        def get_title(self) -> str:
            return "A"

        def get_mimetype(self) -> str:
            return "text/html"

        def get_contentprovider(self) -> StringProvider:
            return StringProvider("<html><body><p>a page</p></body></html>")

        def get_hints(self) -> dict[Hint, int]:
            return {Hint.FRONT_ARTICLE: True}

    plain = tmp_path / "plain.zim"
    with Creator(plain).config_indexing(False, "eng") as creator:
        creator.add_item(Page())
    with pytest.raises(ZimUnavailable, match="no full-text index") as err:
        await started([plain])
    assert str(plain) in str(err.value)


async def test_search_before_start_is_a_typed_error(demo_zim: Path) -> None:
    source = build("kiwix", Config(type="zim", paths=[str(demo_zim)]))
    with pytest.raises(ZimUnavailable, match="not started"):
        await source.search("gravity")


# --- building --------------------------------------------------------------------


def test_ensure_zim_skips_an_up_to_date_file(demo_zim: Path) -> None:
    before = demo_zim.stat().st_mtime_ns
    started_at = time.perf_counter()
    assert ensure_zim(CORPUS, demo_zim) == demo_zim.resolve()
    assert time.perf_counter() - started_at < 0.5
    assert demo_zim.stat().st_mtime_ns == before


def test_ensure_zim_rebuilds_in_a_subprocess_without_touching_stdout(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    corpus = write_jsonl(tmp_path / "small.jsonl", SMALL)
    out = ensure_zim(corpus, tmp_path / "out" / "small.zim")
    assert Archive(out).article_count == 3
    assert capfd.readouterr().out == ""  # libzim's progress lines went to the pipe
    # A newer corpus makes the file stale: it is rebuilt, with the new article.
    write_jsonl(corpus, [*SMALL, {"title": "Teapot", "text": "A teapot holds tea."}])
    os.utime(corpus, ns=(out.stat().st_mtime_ns + 10**9,) * 2)
    ensure_zim(corpus, out)
    assert Archive(out).article_count == 4
    assert capfd.readouterr().out == ""
    assert [p.name for p in out.parent.iterdir() if p.name != ".small.zim.lock"] == ["small.zim"]


def test_building_in_process_does_write_to_stdout(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Why `ensure_zim` exists: libzim's Creator writes to fd 1 itself."""
    build_zim(write_jsonl(tmp_path / "s.jsonl", SMALL), tmp_path / "s.zim")
    assert capfd.readouterr().out.strip() != ""


def test_ensure_zim_reports_a_bad_corpus_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": "A", "text": "x"}\n{"title": "B"}\n', encoding="utf-8")
    with pytest.raises(ZimBuildError, match=r"bad\.jsonl:2: missing or empty 'text'"):
        ensure_zim(bad, tmp_path / "bad.zim")
    assert not (tmp_path / "bad.zim").exists()
    with pytest.raises(ZimBuildError, match="corpus not found"):
        ensure_zim(tmp_path / "absent.jsonl", tmp_path / "x.zim")


def test_a_corpus_that_is_not_text_is_one_line_of_error_not_a_traceback(tmp_path: Path) -> None:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'{"title": "A", "text": "caf\xe9"}\n')
    with pytest.raises(ZimBuildError) as caught:
        ensure_zim(binary, tmp_path / "binary.zim")
    message = str(caught.value)
    assert "not UTF-8 text" in message and "Traceback" not in message and "\n" not in message


def test_a_line_separator_inside_a_text_is_text(tmp_path: Path) -> None:
    from sources.zim_build import read_articles

    path = tmp_path / "u2028.jsonl"
    path.write_text('{"title": "A", "text": "one\u2028two"}\n', encoding="utf-8")
    (article,) = read_articles(path)
    assert article.text == "one\u2028two"


async def test_build_from_builds_the_first_path_at_start(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "small.jsonl", SMALL)
    target = tmp_path / "built" / "small.zim"
    source = await started([target], build_from=str(corpus))
    assert target.is_file()
    assert [i.title for i in await source.search("kettle")] == ["Kettle"]


async def test_build_from_a_broken_corpus_fails_start(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", encoding="utf-8")
    with pytest.raises(ZimUnavailable, match="cannot build") as err:
        await started([tmp_path / "x.zim"], build_from=str(bad))
    assert "bad.jsonl:1: not JSON" in str(err.value)


async def test_a_built_file_answers_when_its_corpus_is_not_where_build_from_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Started from another directory, a relative `build_from` is not found: the ZIM
    already built from it still answers, and the log says why it was not checked."""
    corpus = write_jsonl(tmp_path / "small.jsonl", SMALL)
    target = tmp_path / "small.zim"
    await started([target], build_from=str(corpus))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with caplog.at_level("WARNING", logger="sources.zim"):
        source = await started([target], build_from="small.jsonl")
    assert [i.title for i in await source.search("kettle")] == ["Kettle"]
    assert "small.jsonl is not there" in caplog.text and str(elsewhere) in caplog.text


async def test_a_relative_build_from_that_is_missing_names_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ZimUnavailable, match="corpus not found") as err:
        await started([tmp_path / "x.zim"], build_from="corpus/articles.jsonl")
    assert f"a relative path is read from {tmp_path}" in str(err.value)


# --- configuration and the pure helpers ------------------------------------------


def test_config_is_validated_and_registered() -> None:
    assert kind_module("zim").Config is Config
    with pytest.raises(pydantic.ValidationError, match="paths"):
        Config(type="zim", paths=[])
    with pytest.raises(pydantic.ValidationError, match="url_base"):
        Config(type="zim", paths=["a.zim"], url_base="ftp://x")
    with pytest.raises(pydantic.ValidationError, match="extra"):
        Config.model_validate({"type": "zim", "paths": ["a.zim"], "pathz": []})


def test_content_words_drop_question_words_but_never_everything() -> None:
    assert content_words("Who wrote Romeo and Juliet?") == ["wrote", "romeo", "juliet"]
    assert content_words("tell me about the Eiffel Tower") == ["eiffel", "tower"]
    assert content_words("The Who") == ["the", "who"]
    assert content_words('"Eiffel" (TOWER)! eiffel?') == ["eiffel", "tower"]


def test_relaxations_drop_unknown_then_common_words() -> None:
    frequency = {"wrote": 9, "romeo": 2, "juliet": 2, "zzz": 0}
    assert relaxations(["wrote", "romeo", "zzz", "juliet"], frequency) == [
        ["wrote", "romeo", "juliet"],
        ["romeo", "juliet"],
        ["juliet"],  # a tie drops the shorter word
    ]


def test_title_coverage() -> None:
    assert title_coverage("Mount Everest", ["tall", "mount", "everest"]) == 1.0
    assert title_coverage("Mount Rushmore", ["mount", "everest"]) == 0.5
    assert title_coverage("Romeo and Juliet", ["romeo", "juliet"]) == 1.0
    assert title_coverage("Lightning", ["light"]) == 0.0  # not a mere prefix
    assert title_coverage("Planets", ["planet"]) == 1.0


def test_make_snippet_prefers_the_densest_window() -> None:
    text = "Alpha beta. " * 30 + "Gamma rises here. " + "Filler words. " * 20 + "Gamma delta."
    snippet = make_snippet(text, ["gamma", "delta"], 60)
    assert len(snippet) <= 60
    assert "Gamma delta" in snippet
    assert make_snippet("short", ["x"], 60) == "short"
    assert make_snippet(text, ["absent"], 40).startswith("Alpha beta.")
