"""A real kiwix-serve (Debian package kiwix-tools) over small ZIM files the suite builds.

`build_zim(path, articles)` writes a ZIM with a full-text index using libzim's Creator in a
subprocess (the Creator prints progress to fd 1, which would pollute pytest's output);
`KiwixServe([zim, ...])` starts `kiwix-serve --address 127.0.0.1 --port P` on a free
port, waits until it answers, and stops it by its PID.

    with KiwixServe([build_zim(tmp / "tiny.zim", TINY_ARTICLES)]) as kiwix:
        kiwix.url   # http://127.0.0.1:P ; books are named after the files ("tiny")
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Self

KIWIX_SERVE = "kiwix-serve"

# Articles with words that are easy to search for and to assert on.
TINY_ARTICLES: list[dict[str, str]] = [
    {
        "path": "Photosynthesis",
        "title": "Photosynthesis",
        "text": "Photosynthesis is the process by which green plants use sunlight to make sugar "
        "from carbon dioxide and water. Chlorophyll in the leaves absorbs the light.",
    },
    {
        "path": "Volcano",
        "title": "Volcano",
        "text": "A volcano is a rupture in the crust of a planet where lava, volcanic ash and "
        "gases escape. Magma rises from the mantle through a vent.",
    },
    {
        "path": "Alan_Turing",
        "title": "Alan Turing",
        "text": "Alan Turing was an English mathematician who formalised computation with the "
        "Turing machine and worked on breaking the Enigma cipher at Bletchley Park.",
    },
    {
        "path": "Honey_bee",
        "title": "Honey bee",
        "text": "The honey bee is a flying insect that collects nectar and pollen from flowers "
        "and stores honey in a wax comb inside the hive.",
    },
    {
        "path": "Lighthouse",
        "title": "Lighthouse",
        "text": "A lighthouse is a tower with a bright lamp that guides ships at night and warns "
        "them away from dangerous rocks along the coast.",
    },
]


def available() -> bool:
    return shutil.which(KIWIX_SERVE) is not None


def build_zim(path: Path, articles: Sequence[dict[str, str]], indexing: bool = True) -> Path:
    """Write a ZIM of `articles` ({path, title, text}) at `path`; the book name is its stem."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"indexing": indexing, "articles": list(articles)})
    done = subprocess.run(
        [sys.executable, __file__, "build", str(path)],
        input=payload,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0 or not path.exists():
        raise RuntimeError(f"building {path.name} failed: {done.stderr[-2000:]}")
    return path


class KiwixServe:
    """One kiwix-serve process over `zims`, on 127.0.0.1 and a free port."""

    def __init__(self, zims: Sequence[Path], startup_timeout_s: float = 15.0) -> None:
        self.zims = [Path(z) for z in zims]
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        from tests.support.ports import free_port  # not needed by the build subprocess

        last_error = ""
        for _attempt in range(3):  # the free port may be taken between probe and bind
            self.port = free_port()
            # A file, not a pipe: a pipe nobody reads could fill up and stall the server.
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in _stop_process
            self.process = subprocess.Popen(
                [
                    KIWIX_SERVE,
                    "--address",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    *map(str, self.zims),
                ],
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
            )
            if self._wait_ready():
                return
            last_error = self._stop_process()
        raise RuntimeError(f"kiwix-serve did not start: {last_error[-2000:]}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/", timeout=1) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        return False

    def _stop_process(self) -> str:
        """Terminate our process by PID (SIGTERM, then SIGKILL); return its stderr."""
        process, self.process = self.process, None
        if process is None:
            return ""
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        err = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            err = self._stderr.read().decode("utf-8", "replace")
            self._stderr.close()
            self._stderr = None
        return err

    def stop(self) -> None:
        self._stop_process()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _build_main(out: str) -> None:
    """Subprocess entry: read {"indexing", "articles"} on stdin, write the ZIM to `out`."""
    from libzim.writer import Creator, Hint, Item, StringProvider

    spec = json.load(sys.stdin)

    class Article(Item):  # type: ignore[misc]
        def __init__(self, entry: dict[str, str]) -> None:
            super().__init__()
            self.entry = entry

        def get_path(self) -> str:
            return self.entry["path"]

        def get_title(self) -> str:
            return self.entry["title"]

        def get_mimetype(self) -> str:
            return "text/html"

        def get_contentprovider(self) -> StringProvider:
            title, text = html.escape(self.entry["title"]), html.escape(self.entry["text"])
            return StringProvider(
                f"<html><head><meta charset='utf-8'><title>{title}</title></head>"
                f"<body><h1>{title}</h1><p>{text}</p></body></html>"
            )

        def get_hints(self) -> dict[Hint, int]:
            return {Hint.FRONT_ARTICLE: True}

    name = Path(out).stem
    with Creator(out).config_indexing(spec["indexing"], "eng") as creator:
        creator.set_mainpath(spec["articles"][0]["path"])
        for key, value in {
            "Name": name,
            "Title": f"Test book {name}",
            "Language": "eng",
            "Creator": "search-router tests",
            "Publisher": "search-router tests",
            "Description": "A tiny book built by the test suite",
            "Date": "2024-01-01",
        }.items():
            creator.add_metadata(key, value)
        for entry in spec["articles"]:
            creator.add_item(Article(entry))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "build":
        sys.exit("usage: kiwix_serve.py build OUT.zim  (articles JSON on stdin)")
    _build_main(sys.argv[2])
