"""The shared HTTP plumbing (sources/http.py) against loopback servers that misbehave.

No backend is involved: `tests.sources.hostile.BodyServer` speaks plain HTTP/1.1 and
sends huge, endless or error answers, and counts what it managed to write before the
client closed. The size limit is checked by that count, not by timing. JSON decoding is
checked on the bytes a backend could send (NaN, Infinity, 1e999, deep nesting).
"""

from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import AsyncIterator

import httpx
import pytest

from sources import http
from sources.base import SourceBadResponse, SourceRateLimited, SourceServerError
from tests.sources.hostile import BodyServer

MiB = 1024 * 1024
LIMIT = http.MAX_BODY_BYTES
# What may sit in the loopback socket buffers (both ends) on top of what the client read.
SLACK = 24 * MiB


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    c = http.make_client("http://127.0.0.1:1", timeout_s=10)
    yield c
    await c.aclose()


async def fetch(
    client: httpx.AsyncClient, server: BodyServer, max_bytes: int = LIMIT
) -> httpx.Response:
    return await http.request(client, "GET", f"{server.url}/x", what="backend", max_bytes=max_bytes)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
async def test_a_300_mb_body_is_refused_after_the_limit(
    client: httpx.AsyncClient, chunked: bool
) -> None:
    async with BodyServer(300 * MiB, chunked=chunked) as server:
        with pytest.raises(SourceBadResponse, match=f"answer is over {LIMIT} bytes"):
            await fetch(client, server)
        await server.finished()
    assert server.client_left
    assert server.written < LIMIT + SLACK  # not 300 MiB


async def test_an_endless_body_is_cut_off(client: httpx.AsyncClient) -> None:
    async with BodyServer(None) as server:
        with pytest.raises(SourceBadResponse, match="over"):
            await fetch(client, server)
        await server.finished()
    assert server.client_left
    assert server.written < LIMIT + SLACK


async def test_a_per_call_limit_applies(client: httpx.AsyncClient) -> None:
    async with BodyServer(None) as server:
        with pytest.raises(SourceBadResponse, match="over 65536 bytes"):
            await fetch(client, server, max_bytes=64 * 1024)
        await server.finished()
    assert server.written < 64 * 1024 + SLACK


@pytest.mark.parametrize("chunked", [True, False])
async def test_a_body_within_the_limit_is_read_whole(
    client: httpx.AsyncClient, chunked: bool
) -> None:
    async with BodyServer(LIMIT, chunked=chunked) as server:
        response = await fetch(client, server)
    assert response.content == b" " * LIMIT


async def test_an_error_status_body_is_never_read(client: httpx.AsyncClient) -> None:
    async with BodyServer(None, status=500) as server:
        with pytest.raises(SourceServerError):
            await fetch(client, server)
        await server.finished()
    assert server.written < SLACK


async def test_429_is_rate_limited(client: httpx.AsyncClient) -> None:
    async with BodyServer(20, status=429) as server:
        with pytest.raises(SourceRateLimited) as caught:
            await fetch(client, server)
    assert caught.value.reason == "rate_limited"


async def test_a_redirect_is_not_followed_and_says_so(client: httpx.AsyncClient) -> None:
    async with BodyServer(0, status=302) as server:
        with pytest.raises(SourceBadResponse, match="redirect"):
            await fetch(client, server)
    assert len(server.requests) == 1


# --- JSON a backend may send -------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"t": NaN}',
        b'{"t": Infinity}',
        b'{"t": -Infinity}',
        b'{"t": 1e999}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"t": ' + b"9" * 5000 + b"}",  # past Python's int digit limit: ValueError
        b"\xff\xfe\xfd",
        b"<html>",
    ],
    ids=["nan", "inf", "-inf", "1e999", "deep", "huge-int", "bytes", "html"],
)
def test_json_a_parser_would_choke_on_is_malformed(body: bytes) -> None:
    response = httpx.Response(200, content=body)
    with pytest.raises(SourceBadResponse, match="backend sent a body that is not JSON") as caught:
        http.parse_json(response, "backend")
    assert caught.value.reason == "malformed_response"


def test_plain_json_still_decodes() -> None:
    body = b'{"a": [1, 2.5, -3e10, null, true, "x"]}'
    assert http.parse_json(httpx.Response(200, content=body), "b") == {
        "a": [1, 2.5, -3e10, None, True, "x"]
    }


# --- what messages may quote --------------------------------------------------------------


def test_shown_cuts_backend_text() -> None:
    assert http.shown("x" * 3_000_000) == "x" * http.SHOWN_CHARS + http.SHOWN_CUT
    assert len(http.shown(["y" * 1_000_000] * 1000)) <= http.SHOWN_CHARS + 1
    assert http.shown("short") == "short"
    assert http.shown(5) == "5"


def test_public_url_drops_credentials() -> None:
    assert http.public_url("http://user:pw@127.0.0.1:8123/") == "http://127.0.0.1:8123"
    assert http.public_url("https://h.example/root") == "https://h.example/root"


# --- compressed answers -------------------------------------------------------------------


def gzipped(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_compressed_answer_is_decoded(client: httpx.AsyncClient, encoding: str) -> None:
    body = b'{"results": ["' + b"a" * 100_000 + b'"]}'
    packed = gzipped(body) if encoding == "gzip" else zlib.compress(body)
    async with BodyServer(None, content=packed, encoding=encoding) as server:
        response = await fetch(client, server)
    assert http.parse_json(response, "b") == {"results": ["a" * 100_000]}
    assert b"accept-encoding: gzip, deflate" in server.requests[0].lower()


async def test_a_gzip_bomb_is_refused_without_inflating_it(client: httpx.AsyncClient) -> None:
    """256 MiB of zeros in 250 KB of gzip: the client's memory peak stays near the limit
    (tracemalloc counts what this process allocated while the answer was read)."""
    bomb = gzipped(b"\0" * (256 * MiB))
    async with BodyServer(None, content=bomb, encoding="gzip") as server:
        tracemalloc.start()
        try:
            with pytest.raises(SourceBadResponse, match="over"):
                await fetch(client, server)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < LIMIT + len(bomb) + 16 * MiB  # not 256 MiB, nor a 64 MiB inflated chunk


@pytest.mark.parametrize(
    ("content", "encoding", "match"),
    [
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 20, "gzip", "not decompress"),
        (gzipped(b'{"a": 1}')[:-12], "gzip", "cut short"),
        (b"{}", "br", "encoding not asked for"),
    ],
)
async def test_a_body_that_cannot_be_decoded_is_malformed(
    client: httpx.AsyncClient, content: bytes, encoding: str, match: str
) -> None:
    async with BodyServer(None, content=content, encoding=encoding) as server:
        with pytest.raises(SourceBadResponse, match=match):
            await fetch(client, server)
