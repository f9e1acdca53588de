"""`search mcp` as a real subprocess, spoken to line by line: SIGTERM and SIGHUP end it as
stdin's EOF does (its last traces written, exit 0), a malformed line is answered with a
JSON-RPC error and the next line still served, and a client that closes its end of
stdout gets a clean close-down with one line on stderr, not a hang or a traceback."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

import pytest

from search.config import TraceConfig, load_config
from search.mcp_server import instructions
from search.traces.store import SQLiteTraceStore, TraceFilter

ROOT = Path(__file__).resolve().parents[2]
REGISTER_SCRIPTED = "from tests.support import scripted\nscripted.register()\n"
START_S = 120.0  # the first answer waits for the service to start
ANSWER_S = 30.0
PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
INVALID = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}}


class McpProcess:
    """`python -m search mcp` over scripted sources, with its own trace store."""

    def __init__(self, tmp_path: Path) -> None:
        hooks = tmp_path / "hooks"
        hooks.mkdir()
        (hooks / "sitecustomize.py").write_text(REGISTER_SCRIPTED)
        self.traces = tmp_path / "traces.db"
        config = {
            "routing": {"default_source": "kiwix", "semantic": {"enabled": False}},
            "cache": {"result_ttl_s": 0},
            "trace": {"path": str(self.traces)},
            "sources": {
                "kiwix": {"type": "scripted"},
                "attic": {"type": "scripted", "enabled": False},
            },
        }
        config_path = tmp_path / "config.yaml"
        config_path.write_text(json.dumps(config))  # JSON is YAML
        self.stderr_path = tmp_path / "stderr.log"
        with self.stderr_path.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "search", "mcp", "--config", str(config_path)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": f"{hooks}:{ROOT}", "HF_HUB_OFFLINE": "1"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                bufsize=0,
            )
        self._pending = b""

    @property
    def stdin(self) -> IO[bytes]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    @property
    def stdout(self) -> IO[bytes]:
        assert self.proc.stdout is not None
        return self.proc.stdout

    def send(self, *lines: bytes | dict[str, Any]) -> None:
        for line in lines:
            data = line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n"
            self.stdin.write(data)

    def receive(self, timeout: float = ANSWER_S) -> dict[str, Any]:
        """The next line on stdout, waiting at most `timeout` seconds for it."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.stdout], [], [], max(left, 0))
            assert ready, f"no answer within {timeout} s; stderr: {self.stderr()}"
            chunk = os.read(self.stdout.fileno(), 65536)
            assert chunk, f"stdout closed; stderr: {self.stderr()}"
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def request(self, id_: int, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def initialize(self) -> dict[str, Any]:
        self.request(
            1,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        )
        answer = self.receive(START_S)
        assert answer["id"] == 1, answer
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        result: dict[str, Any] = answer["result"]
        return result

    def search(self, id_: int, query: str) -> None:
        self.request(id_, "tools/call", {"name": "search", "arguments": {"query": query}})

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stored(self) -> SQLiteTraceStore:
        return SQLiteTraceStore(TraceConfig(path=str(self.traces)))

    def stored_count(self) -> int:
        """How many traces the store holds now (0 before it exists)."""
        if not self.traces.exists():
            return 0
        store = self.stored()
        try:
            return len(store.list_traces(TraceFilter())["traces"])
        finally:
            store.close_sync()


@pytest.fixture()
def mcp(tmp_path: Path) -> Iterator[McpProcess]:
    process = McpProcess(tmp_path)
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait(timeout=ANSWER_S)
        for pipe in (process.proc.stdin, process.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_ends_it_as_eof_does_and_keeps_the_last_trace(
    mcp: McpProcess, signum: signal.Signals
) -> None:
    mcp.initialize()
    mcp.search(2, "photosynthesis")
    answer = mcp.receive()
    trace_id = answer["result"]["structuredContent"]["trace_id"]

    mcp.proc.send_signal(signum)  # stdin stays open: only the signal can end it
    assert mcp.proc.wait(timeout=ANSWER_S) == 0, mcp.stderr()

    assert "Traceback" not in mcp.stderr()
    store = mcp.stored()
    try:
        trace = store.get_trace(trace_id)
    finally:
        store.close_sync()
    assert trace is not None, "the last request's trace was lost"
    assert (trace["query"], trace["status_code"]) == ("photosynthesis", 200)


def test_a_malformed_line_gets_a_json_rpc_error_and_the_next_is_served(
    mcp: McpProcess,
) -> None:
    result = mcp.initialize()
    mcp.send(
        b"not json\n",
        b"[1, 2]\n",
        b'{"jsonrpc": "2.0", "method": 5}\n',
        b'"a string"\n',
        b"\xff\xfe{\n",
        b"  \n",  # an empty line asks nothing and gets nothing
        b'{"jsonrpc": "2.0", "id": 7, "method": 5}\n',  # its id is readable: echoed
        b'{"jsonrpc": "1.0", "id": "seven", "method": "tools/list"}\n',
        b'{"jsonrpc": "2.0", "id": true, "method": 5}\n',  # no JSON-RPC id: null
    )
    mcp.request(2, "tools/list")

    answers = [mcp.receive() for _ in range(8)]
    assert answers == [
        PARSE_ERROR,
        INVALID,
        INVALID,
        INVALID,
        PARSE_ERROR,
        {**INVALID, "id": 7},
        {**INVALID, "id": "seven"},
        INVALID,
    ]
    tools = mcp.receive()
    assert tools["id"] == 2
    assert {t["name"] for t in tools["result"]["tools"]} == {"search", "get_trace"}

    # Only the enabled source is named to the client's model.
    assert "(kiwix)" in result["instructions"] and "attic" not in result["instructions"]

    mcp.stdin.close()
    assert mcp.proc.wait(timeout=ANSWER_S) == 0, mcp.stderr()


def test_a_line_over_the_message_bound_is_refused_and_the_next_is_served(
    mcp: McpProcess,
) -> None:
    """A message is bounded as over HTTP (`server.max_body_bytes`, 64 KiB here): a 5 MB
    line gets an error once that much of it is read, and is read past, not kept."""
    mcp.initialize()
    padding = "x" * 5_000_000
    mcp.send({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"pad": padding}})
    mcp.request(4, "tools/list")
    refused = mcp.receive()
    assert refused["id"] is None and refused["error"]["code"] == -32600
    assert "at most 65,536 bytes (server.max_body_bytes)" in refused["error"]["message"]
    tools = mcp.receive()
    assert tools["id"] == 4 and "result" in tools
    mcp.stdin.close()
    assert mcp.proc.wait(timeout=ANSWER_S) == 0, mcp.stderr()


def test_a_client_that_closes_stdout_gets_a_clean_close_down(mcp: McpProcess) -> None:
    mcp.initialize()
    mcp.stdout.close()
    mcp.search(2, "photosynthesis")  # its answer cannot be delivered

    assert mcp.proc.wait(timeout=ANSWER_S) == 1  # stdin is still open
    assert mcp.stderr().splitlines() == [
        "search: mcp: the client went away (it closed its end of stdout)"
    ]
    store = mcp.stored()
    try:
        listed = store.list_traces(TraceFilter())
    finally:
        store.close_sync()
    assert [t["query"] for t in listed["traces"]] == ["photosynthesis"]  # service closed


def test_a_client_that_stops_reading_cannot_hold_up_a_stop_signal(mcp: McpProcess) -> None:
    """A client that keeps stdout open but no longer reads it fills the pipe, and the
    answer being written waits for a reader that never comes: a SIGTERM still ends the
    server (the service closed, its traces written) within a few seconds, saying so."""
    mcp.initialize()
    mcp.search(2, "photosynthesis")
    mcp.receive()
    fcntl.fcntl(mcp.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)  # the smallest: one page
    for id_ in range(3, 43):  # far more answers than the pipe holds, none of them read
        mcp.request(id_, "tools/list")
    deadline = time.monotonic() + ANSWER_S
    while not writing_to_a_full_pipe(mcp.proc.pid):
        assert time.monotonic() < deadline, f"no write waited on the pipe: {mcp.stderr()}"
        time.sleep(0.05)
    mcp.proc.send_signal(signal.SIGTERM)

    assert mcp.proc.wait(timeout=ANSWER_S) == 1, mcp.stderr()
    assert mcp.stderr().splitlines() == [
        "search: mcp: stopped with answers undelivered (the client was not reading stdout)"
    ]
    assert mcp.stored_count() == 1  # the service was closed: its trace is kept


def writing_to_a_full_pipe(pid: int) -> bool:
    """Whether a thread of process `pid` waits in the kernel to write to a pipe (its
    stderr is a file here, so the pipe is stdout)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(OSError):  # a thread that ended meanwhile
            if "pipe_write" in (task / "wchan").read_text():
                return True
    return False


def test_instructions_name_only_what_enabled_sources_answer() -> None:
    config = load_config(ROOT / "config.yaml")  # only the ZIM is enabled
    assert instructions(config).startswith(
        "Answers questions from the household's own sources (offline encyclopedia). "
    )
    config.sources["ha"].enabled = True
    config.sources["web"].enabled = True
    assert "sources (offline encyclopedia, smart home, web search). " in instructions(config)
    for entry in config.sources.values():
        entry.enabled = False
    assert instructions(config).startswith("Answers questions from the household's own sources. ")
