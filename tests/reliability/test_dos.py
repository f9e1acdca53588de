"""One client cannot take the router down for everyone.

The reproduction: eight clients at once each send a 1000-character query of 250
`;`-separated parts that no rule decides, so every part needs a real embedding from the
bundled model and then a call to the real ZIM source. Meanwhile an unrelated client asks
encyclopedia questions it asked once before the flood (the keyword rules leave a question
about the world to the semantic stage, which may wait for the model behind the flood).

- With the shipped cap (`routing.max_parts: 8`) the flood is refused with 422 naming
  `query`, before a single part is embedded.
- With the cap lifted, the flood runs, and the unrelated questions are still answered by
  kiwix while it runs: source calls and inference have separate worker pools, so a kiwix
  call never waits behind embedding work, never times out for it, and kiwix's circuit
  breaker stays closed. (With one shared pool these kiwix calls queued behind the
  embeddings, timed out and opened the breaker: every client then got `circuit_open`.
  Later, ZIM answers found in milliseconds were still called late when the busy event loop
  came round to them after their deadline, and opened the breaker now and then; a source's
  clock now stops when its worker has answered, sources/workers.py.)

The real app runs under uvicorn on loopback, with the real model and the real ZIM. What
happens when is fixed by the test, not by timing: the unrelated questions are sent once
the flood's embeddings are under way and go on until the whole flood is answered, and the
test checks afterwards that most of the flood was still waiting for the model when the
first of them was sent.
"""

from __future__ import annotations

import asyncio
import string
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from routing.stages.embedder import load_embedder
from search.api.app import create_app
from search.config import parse_config
from search.service import Service
from tests.support.app import uvicorn_server

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 8
KIWIX_TIMEOUT_S = 2.0  # a ZIM search here takes milliseconds; the queue took seconds
UNRELATED = [
    "who wrote romeo and juliet",
    "who painted the mona lisa",
    "who wrote romeo and juliet",
    "who discovered penicillin",
]
WAIT_S = 60.0


def flood_query(client: int) -> str:
    """1000 characters: 250 three-letter parts no rule decides, distinct per client."""
    letters = string.ascii_lowercase
    parts = [f"{letters[client]}{letters[i // 26 % 26]}{letters[i % 26]}" for i in range(250)]
    return ";".join(parts)[:1000]


def config(demo_zim: Path, **routing: Any) -> Any:
    """The shipped routing (rules, exemplars, the model), kiwix on the demo ZIM."""
    data = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    data["routing"].update(routing)
    data["sources"]["kiwix"] = {
        "type": "zim",
        "paths": [str(demo_zim)],
        "timeout_s": KIWIX_TIMEOUT_S,
    }
    data["cache"] = {"result_ttl_s": 0}  # every question is a real kiwix call
    data["trace"] = {"enabled": False}
    data["mcp"] = {"enabled": False}
    return parse_config(data)


@dataclass
class Encodes:
    """Counts the real model's single-query encodes (the semantic stage's per-part work)."""

    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self) -> int:
        with self.lock:
            return self.count


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Encodes]:
    counter = Encodes()
    embedder = load_embedder()  # the process-wide model the semantic stage uses
    real = embedder.encode_one

    def counted(text: str) -> Any:
        vector = real(text)
        with counter.lock:
            counter.count += 1
        return vector

    monkeypatch.setattr(embedder, "encode_one", counted)
    yield counter


@pytest.fixture
def served(request: pytest.FixtureRequest, demo_zim: Path) -> Iterator[tuple[str, Service]]:
    cfg = config(demo_zim, **request.param)
    service = Service(cfg)
    with uvicorn_server(create_app(cfg, service)) as base:
        yield base, service


def assert_answered_by_kiwix(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text
    body = response.json()
    [part] = body["results"]
    assert part["source"] == "kiwix" and part["status"] == "ok" and part["items"], part
    steps = [e["step"] for e in body["explanation"]]
    assert steps[0] == "intent_keyword", steps  # decided without the model
    [call] = [e for e in body["explanation"] if e["step"] == "source_invoked"]
    assert call["outcome"] == "ok", call
    assert not [e for e in body["explanation"] if e["step"] == "source_skipped"]


async def ask(client: httpx.AsyncClient, query: str) -> httpx.Response:
    return await client.post("/search", json={"query": query, "explain": True})


@pytest.mark.parametrize("served", [{}], indirect=True)
async def test_the_shipped_cap_refuses_the_flood_before_any_embedding(
    served: tuple[str, Service], encodes: Encodes
) -> None:
    base, service = served
    assert service.config.routing.max_parts == 8
    async with httpx.AsyncClient(base_url=base, timeout=WAIT_S) as client:
        before = encodes.seen()
        flood = await asyncio.gather(*(ask(client, flood_query(n)) for n in range(CLIENTS)))
        assert encodes.seen() == before  # refused before a single part was embedded
        for response in flood:
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert error["field"] == "query" and "250 parts" in error["message"]
        for query in UNRELATED:
            assert_answered_by_kiwix(await ask(client, query))


@pytest.mark.parametrize("served", [{"max_parts": 1000}], indirect=True)
async def test_a_flood_of_parts_leaves_other_clients_answered_and_kiwix_closed(
    served: tuple[str, Service], encodes: Encodes
) -> None:
    base, service = served
    breaker = service.dispatcher.breakers["kiwix"]
    async with httpx.AsyncClient(base_url=base, timeout=WAIT_S) as client:
        for query in UNRELATED:  # warm: the ZIM is open, each question asked once
            assert_answered_by_kiwix(await ask(client, query))
        started = encodes.seen()
        flood = [asyncio.ensure_future(ask(client, flood_query(n))) for n in range(CLIENTS)]
        # Under way: the flood's parts are being embedded, the rest wait for the model.
        for _ in range(int(WAIT_S / 0.01)):
            if encodes.seen() - started >= 50:
                break
            await asyncio.sleep(0.01)
        at_first_question = encodes.seen() - started
        assert at_first_question >= 50, "the flood never reached the model"
        asked = 0
        while not all(request.done() for request in flood):  # each ends by its deadline
            assert_answered_by_kiwix(await ask(client, UNRELATED[asked % len(UNRELATED)]))
            assert breaker.state == "closed" and breaker.failures == 0
            asked += 1
        # At least the first question was asked during the flood. How many more fit in is
        # the machine's speed: the first one's embedding queues behind every part the
        # flood queued before it (one FIFO inference pool), so on a loaded machine it is
        # answered only as the flood's requests end at their deadline.
        assert asked >= 1, "the flood was over before the questions were asked"
        responses = await asyncio.gather(*flood)
        flood_encodes = encodes.seen() - started
        # The questions really were asked in the thick of it: when the first was sent,
        # most of the flood's parts were still waiting to be embedded.
        assert at_first_question < flood_encodes / 2, (at_first_question, flood_encodes)
        for response in responses:
            # the flood's own requests may run out of request deadline; nothing else
            assert response.status_code in (200, 504), response.text[:500]
        assert breaker.state == "closed" and breaker.failures == 0
        assert_answered_by_kiwix(await ask(client, UNRELATED[-1]))
