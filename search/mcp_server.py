"""The MCP server: `search`, `get_trace` and (when allowed) `control` as MCP tools.

`search` is annotated read-only and is: a command in its query is withheld (reason
`read_only`), whatever the config allows. Changing the home is the separate `control`
tool, listed only when some source has `allow_control: true` and annotated destructive,
so a client asks its user before calling it; it passes the same control gate as
`POST /search` (never from a condition, a time qualifier, an unsure decision...).

Built on the official `mcp` SDK's low-level `Server` (the high-level `MCPServer` calls
`logging.basicConfig` on construction, which would change logging for the whole app).
Both tools go through the same `Service` as `POST /search` and read the same trace
store as `GET /traces/{id}`: nothing here routes or rebuilds a chain.

Transports:
- streamable HTTP at `/mcp` inside the app (`http_endpoint`): stateless, JSON responses,
  so any worker of `search serve --workers N` can answer any request;
- stdio via `search mcp` (`run_stdio`): the protocol owns a private duplicate of the
  real stdout, and file descriptor 1 points at stderr for the life of the process, so
  nothing a C library (libzim) or a child process prints can reach the protocol stream.
  SIGTERM and SIGHUP end it as stdin's EOF does (the service closed, its traces written),
  even when a client that stopped reading stdout leaves an answer waiting (UNREAD_GRACE_S);
  a line that is no JSON-RPC message is answered with -32700 or -32600 (with its id
  when the id can be read, else `null`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from contextlib import AbstractAsyncContextManager, suppress
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from mcp_types.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    jsonrpc_message_adapter,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.types import ASGIApp

from routing.chain.events import run_in_thread
from routing.pipeline import TooManyParts
from search import __version__
from search.config import Config
from search.query_text import query_problem
from search.service import Service
from search.terminal import say
from search.trace_ids import NOT_A_TRACE_ID, is_trace_id
from search.traces.narrative import narrative
from sources.base import SourceError

log = logging.getLogger("search.mcp")

SERVER_NAME = "search-router"
# What each built-in kind answers, in the words of the `initialize` instructions.
KIND_TOPICS: dict[str, str] = {
    "zim": "offline encyclopedia",
    "kiwix_serve": "offline encyclopedia",
    "open_meteo": "weather forecast",
    "ha_weather": "weather forecast",
    "homeassistant": "smart home",
    "searxng": "web search",
}


def instructions(config: Config) -> str:
    """The `initialize` instructions, naming only what the enabled sources answer (a
    source of another kind by its name), so a client's model never asks for a source
    this household has not configured."""
    topics = dict.fromkeys(
        KIND_TOPICS.get(entry.type, name) for name, entry in config.sources.items() if entry.enabled
    )
    listed = f" ({', '.join(topics)})" if topics else ""
    return (
        f"Answers questions from the household's own sources{listed}. "
        "One query may hold several questions; each part is routed to the right source. "
        "Pass explain=true to see why each source was chosen, and get_trace(trace_id) to "
        "read a past request's recorded chain."
    )


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    query: str = Field(description="The question; may hold several parts ('weather and news').")
    explain: bool = Field(
        default=False, description="Also return the explanation chain (every routing step)."
    )


class TraceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    trace_id: str = Field(
        min_length=1, max_length=128, description="The trace_id a search returned."
    )


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def _sources_line(config: Config) -> str:
    described = [
        f"{name} ({entry.description})" if getattr(entry, "description", None) else name
        for name, entry in config.sources.items()
        if entry.enabled
    ]
    return "Sources: " + "; ".join(described) + "." if described else ""


def control_allowed(config: Config) -> bool:
    """Whether any enabled source may act (only then is the `control` tool offered)."""
    return any(
        entry.enabled and getattr(entry, "allow_control", False)
        for entry in config.sources.values()
    )


def tool_list(config: Config, control_offered: bool = True) -> list[Tool]:
    search_description = (
        "Search the household's sources and answer with results per part of the query, "
        "the same body as POST /search: query, trace_id, results, cached, "
        "fallback_occurred, explanation. It never changes anything: a command in the "
        "query is reported as withheld. " + _sources_line(config)
    ).strip()
    control = (
        [
            Tool(
                name="control",
                description=(
                    "Carry out a command on the home ('turn off the kitchen light', 'lock the front "
                    "door'), as POST /search would: a command under a condition, meant for later, "
                    "or not confidently understood is withheld and nothing changes. Same body as "
                    "search; a result with status 'withheld' says why."
                ),
                input_schema=_schema(SearchArgs),
                annotations=ToolAnnotations(
                    read_only_hint=False,
                    destructive_hint=True,
                    idempotent_hint=False,
                    open_world_hint=True,
                ),
            )
        ]
        if control_offered and control_allowed(config)
        else []
    )
    return [
        Tool(
            name="search",
            description=search_description,
            input_schema=_schema(SearchArgs),
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
        ),
        Tool(
            name="get_trace",
            description=(
                "A stored request by trace_id: its recorded chain of routing events, part "
                "results (without source content) and a narrative diagnosis, as GET /traces/{id}."
            ),
            input_schema=_schema(TraceArgs),
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        ),
        *control,
    ]


def tool_result(body: dict[str, Any], is_error: bool = False) -> CallToolResult:
    """The body as structured content, and as JSON text for clients that read only text."""
    text = json.dumps(body, ensure_ascii=False, default=str)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=body, is_error=is_error
    )


def _error(type_: str, message: str, field: str | None = None) -> CallToolResult:
    detail: dict[str, Any] = {"type": type_, "message": message}
    if field is not None:
        detail["field"] = field
    return tool_result({"error": detail}, is_error=True)


def _parse(model: type[BaseModel], arguments: dict[str, Any] | None) -> BaseModel | CallToolResult:
    try:
        return model.model_validate(arguments or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "arguments"
        message = "unknown argument" if err["type"] == "extra_forbidden" else err["msg"]
        return _error("invalid_arguments", f"{field}: {message}", field)


async def run_search(
    service: Service,
    arguments: dict[str, Any] | None,
    *,
    read_only: bool = True,
    authorized: bool = False,
) -> CallToolResult:
    """`search` (read-only) and `control`: the same checks and the same Service call as
    POST /search."""
    args = _parse(SearchArgs, arguments)
    if isinstance(args, CallToolResult):
        return args
    assert isinstance(args, SearchArgs)
    problem = query_problem(args.query, service.config.server.max_query_chars)
    if problem is not None:
        return _error("invalid_request", problem, "query")
    try:
        service.router.check_parts(args.query)
    except TooManyParts as exc:
        return _error("too_many_parts", str(exc), exc.field)
    outcome = await service.search(
        args.query, explain=args.explain, read_only=read_only, authorized=authorized
    )
    return tool_result(outcome.body, is_error=outcome.status_code != 200)


async def find_trace(service: Service, trace_id: str) -> dict[str, Any] | None:
    """A stored trace as `GET /traces/{id}` shows it, from whichever store the service has."""
    store: Any = service.traces
    if hasattr(store, "get_trace"):
        trace = await run_in_thread(store.get_trace, trace_id)
        if trace is None and hasattr(store, "flush"):
            await store.flush()  # written a few ms after its response
            trace = await run_in_thread(store.get_trace, trace_id)
        if trace is not None:
            trace["narrative"] = narrative(
                trace["chain"],
                with_text=not trace.get("redacted", False),
                dropped_events=trace.get("dropped_events", 0),
                labels=trace.get("labels", []),
            )
        return trace
    if hasattr(store, "get"):  # MemoryTraceSink (tests, embedders)
        record = store.get(trace_id)
        if record is None:
            return None
        return {
            "trace_id": record.trace_id,
            "started_at": record.started_at,
            "query": record.query,
            "status_code": record.status_code,
            "duration_ms": record.duration_ms,
            "dropped_events": record.dropped_events,
            "error": record.error,
            "chain": record.chain,
            "results": record.results,
            "narrative": narrative(record.chain, dropped_events=record.dropped_events),
        }
    return None


async def run_get_trace(service: Service, arguments: dict[str, Any] | None) -> CallToolResult:
    args = _parse(TraceArgs, arguments)
    if isinstance(args, CallToolResult):
        return args
    assert isinstance(args, TraceArgs)
    store = service.traces
    if not (hasattr(store, "get_trace") or hasattr(store, "get")):
        return _error("not_found", "the trace store is switched off (trace.enabled: false)")
    if not is_trace_id(args.trace_id):
        return _error("invalid_arguments", NOT_A_TRACE_ID, "trace_id")
    try:
        trace = await find_trace(service, args.trace_id)
    except Exception as exc:  # noqa: BLE001 - an unreadable store is the tool's error
        log.warning("get_trace failed: %s", type(exc).__name__)
        return _error("trace_store_error", f"the trace store could not be read: {exc}")
    if trace is None:
        return _error("not_found", f"trace {args.trace_id}: no such trace", "trace_id")
    return tool_result(trace)


def build_mcp_server(service: Service, *, control_offered: bool = True) -> Server[Any]:
    """The MCP server over `service` (its lifespan is the app's or `run_stdio`'s).

    `control_offered`: whether this transport may offer the `control` tool at all. Over
    stdio the client is the user's own process; over HTTP only with `server.api_token`
    set (Home Assistant's MCP client, which sends no bearer token, gets a read-only
    router)."""
    offered = control_offered and control_allowed(service.config)
    tools = tool_list(service.config, offered)
    schemas = {tool.name: tool.input_schema for tool in tools}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        if params.name == "search":
            return await run_search(service, params.arguments)
        if params.name == "get_trace":
            return await run_get_trace(service, params.arguments)
        if params.name == "control" and offered:
            return await run_search(service, params.arguments, read_only=False, authorized=True)
        raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}")

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=instructions(service.config),
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


# --- streamable HTTP -----------------------------------------------------------------


def http_endpoint(
    server: Server[Any], max_body_bytes: int = 1024 * 1024
) -> tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[None]]]:
    """The ASGI endpoint for `/mcp`, and the session manager's lifespan to enter once."""
    server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        max_request_body_size=max_body_bytes,
        # The app's RequestGuard checks Host and Origin on every route, this one included.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    manager = server.session_manager
    return StreamableHTTPASGIApp(manager), manager.run


# --- stdio -----------------------------------------------------------------------------


def divert_std_fds() -> tuple[int, int]:
    """Keep private duplicates of stdin/stdout for the protocol; point fd 0 at /dev/null
    and fd 1 (and `sys.stdout`) at stderr, for this process and every child it starts."""
    sys.stdout.flush()
    wire_in = os.dup(0)  # non-inheritable (PEP 446): children never see the wire
    wire_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return wire_in, wire_out


class StartFailed(Exception):
    """A source the config names cannot start: `search mcp` says so in one line, exit 1."""


class ClientGone(Exception):
    """The client closed its end of stdout, or stopped reading it: `search mcp` says so in
    one line, exit 1."""


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _rpc_error(code: int, message: str, request_id: str | int | None) -> SessionMessage:
    return SessionMessage(
        JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
    )


def readable_id(line: bytes) -> str | int | None:
    """The id of a line that is a JSON object with a string or integer `id`, else None.

    JSON-RPC answers an invalid request with its id when the id can be read, so a client
    that sent a malformed request learns which of its requests failed; `null` only when
    it cannot (not JSON, not an object, an id of another type)."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    found = data.get("id") if isinstance(data, dict) else None
    if isinstance(found, bool) or not isinstance(found, str | int):
        return None
    return found


def malformed_answer(exc: ValidationError, line: bytes = b"") -> SessionMessage:
    """-32700 (id null) for a line that is not JSON; -32600 for JSON that is no JSON-RPC
    message, with the line's id when it has a readable one."""
    if any(err["type"] == "json_invalid" for err in exc.errors()):
        return _rpc_error(PARSE_ERROR, "Parse error", None)
    return _rpc_error(INVALID_REQUEST, "Invalid Request", readable_id(line))


def _read_lines(
    wire_in: int,
    loop: asyncio.AbstractEventLoop,
    lines: MemoryObjectSendStream[bytes | None],
    max_bytes: int,
) -> None:
    """Hand each line of the wire to the loop, then close `lines` at EOF. Runs in a daemon
    thread of its own: a read in a worker thread cannot be cancelled, so a client that
    neither writes nor closes stdin would hold up a close-down (a signal, a closed stdout)
    until its next line.

    A line over `max_bytes` is handed on as None, and the rest of it is read past, never
    held: a message is bounded as over HTTP (`server.max_body_bytes`)."""
    try:
        with open(wire_in, "rb") as stream:
            while line := stream.readline(max_bytes + 1):
                message: bytes | None = line
                if len(line.rstrip(b"\r\n")) > max_bytes:
                    while not line.endswith(b"\n") and (line := stream.readline(65536)):
                        pass
                    message = None
                asyncio.run_coroutine_threadsafe(lines.send(message), loop).result()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, CancelledError, RuntimeError):
        pass  # the loop stopped listening, or is gone
    except OSError:
        pass  # the wire is unreadable: as good as closed
    with suppress(RuntimeError):  # the loop is closed: nobody is waiting
        loop.call_soon_threadsafe(lines.close)


def _consume(written: asyncio.Future[None]) -> None:
    if not written.cancelled():
        written.exception()  # retrieved, so asyncio does not log it as never retrieved


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# After a stop (a signal, stdin's end), how long an answer may wait for a client that has
# stopped reading stdout before the server closes down without delivering it.
UNREAD_GRACE_S = 5.0
_POLL_S = 0.25  # how often a waiting write looks whether a stop came


class LineWriter:
    """The protocol's stdout, written on a daemon thread of its own, which alone owns (and
    closes) the descriptor.

    A write to a client that stopped reading blocks until it reads again. A worker thread
    of the event loop's would hold up the close-down and then the interpreter's exit; this
    thread is left blocked instead, and dies with the process. Closing the descriptor
    under a blocked write from another thread could let it write into whatever file
    reuses the number, so only this thread closes it, once its writes are done."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._queue: queue.SimpleQueue[tuple[bytes, Future[None]] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="mcp-stdout", daemon=True).start()

    def write(self, data: bytes) -> Future[None]:
        """Queue `data`; the future ends when it is written (or with the OSError)."""
        done: Future[None] = Future()
        self._queue.put((data, done))
        return done

    def close(self) -> None:
        """Close the descriptor once what was queued before is written."""
        self._queue.put(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            data, done = item
            try:
                _write_all(self.fd, data)
            except OSError as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)
        with suppress(OSError):
            os.close(self.fd)


class StdioWire:
    """The protocol's ends of stdin and stdout, one JSON-RPC message a line.

    `stop()` ends the input as EOF does, so the server finishes the way it does when the
    client closes stdin; a client that closed stdout stops it too (`client_gone`)."""

    def __init__(self, wire_in: int, wire_out: int, max_line_bytes: int = 64 * 1024) -> None:
        self.wire_in = wire_in
        self.wire_out = wire_out
        self.max_line_bytes = max_line_bytes
        self.client_gone = False
        self.unread = False  # answers were left undelivered: the client was not reading
        self._input = anyio.CancelScope()
        self._stopped_at: float | None = None

    def stop(self) -> None:
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        self._input.cancel()

    async def serve(self, server: Server[Any]) -> None:
        """Run `server` over the wire until the input ends (EOF, `stop()`)."""
        lines_in, lines = anyio.create_memory_object_stream[bytes | None](0)
        to_server, server_in = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        server_out, from_server = anyio.create_memory_object_stream[SessionMessage](0)
        loop = asyncio.get_running_loop()
        threading.Thread(
            target=_read_lines,
            args=(self.wire_in, loop, lines_in, self.max_line_bytes),
            name="mcp-stdin",
            daemon=True,
        ).start()
        out = LineWriter(self.wire_out)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._read, lines, to_server, server_out.clone())
                tasks.start_soon(self._write, from_server, out)
                async with server_in, server_out:
                    await server.run(server_in, server_out, server.create_initialization_options())
        finally:
            out.close()

    async def _read(
        self,
        lines: MemoryObjectReceiveStream[bytes | None],
        to_server: MemoryObjectSendStream[SessionMessage | Exception],
        answers: MemoryObjectSendStream[SessionMessage],
    ) -> None:
        """Pass each message to the server; answer a malformed line here, as the SDK
        would drop it and leave the client waiting."""
        async with lines, to_server, answers:
            with self._input:
                async for line in lines:
                    if line is None:  # over the bound: its id was not read either
                        await answers.send(self._too_long())
                        continue
                    if not line.strip():
                        continue
                    try:
                        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValidationError as exc:
                        await answers.send(malformed_answer(exc, line))
                        continue
                    await to_server.send(SessionMessage(message))

    def _too_long(self) -> SessionMessage:
        return _rpc_error(
            INVALID_REQUEST,
            f"Invalid Request: a message is at most {self.max_line_bytes:,} bytes "
            "(server.max_body_bytes)",
            None,
        )

    async def _write(
        self, messages: MemoryObjectReceiveStream[SessionMessage], out: LineWriter
    ) -> None:
        """Write each message as a line; once the client is gone (or, after a stop, has
        not read for UNREAD_GRACE_S), drain without writing so the server finishes its
        requests and closes down."""
        async with messages:
            async for message in messages:
                if self.client_gone or self.unread:
                    continue
                line = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                try:
                    await self._delivered(out.write(line.encode()))
                except (BrokenPipeError, ConnectionResetError):
                    self.client_gone = True
                    self.stop()

    async def _delivered(self, write: Future[None]) -> None:
        """Wait for `write`, until UNREAD_GRACE_S after a stop at the latest."""
        written = asyncio.wrap_future(write)
        while not written.done():
            await asyncio.wait({written}, timeout=_POLL_S)
            stopped = self._stopped_at
            waited = 0.0 if stopped is None else time.monotonic() - stopped
            if not written.done() and waited >= UNREAD_GRACE_S:
                self.unread = True
                written.add_done_callback(_consume)  # its end, if ever, is nobody's
                return
        written.result()


async def serve_stdio(config: Config, wire_in: int, wire_out: int) -> None:
    """Start the service (sources, models), then speak MCP on the wire until stdin closes,
    a SIGTERM or SIGHUP arrives, or the client closes stdout; close the service either way,
    so the last requests' traces are written.

    A source that cannot start (a ZIM file not found...) is `StartFailed`, its message
    as `search serve` words it: "start-up failed: ZimUnavailable: ..."."""
    from search.observability.telemetry import telemetry_observers

    observers = telemetry_observers(config)
    service = Service(config, observers=list(observers))
    wire = StdioWire(wire_in, wire_out, config.server.max_body_bytes)
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, wire.stop)
    try:
        try:
            await service.start()
        except SourceError as exc:
            message = service.scrubber.text(f"{type(exc).__name__}: {exc}")
            raise StartFailed(f"start-up failed: {message}") from None
        await wire.serve(build_mcp_server(service))
    finally:
        await service.aclose()
        for observer in observers:
            await run_in_thread(observer.shutdown)
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
    if wire.client_gone:
        raise ClientGone("the client went away (it closed its end of stdout)")
    if wire.unread:
        raise ClientGone("stopped with answers undelivered (the client was not reading stdout)")


def run_stdio(config: Config) -> int:
    """`search mcp`: the stdio transport. Logs go to stderr; stdout is the protocol's."""
    wire_in, wire_out = divert_std_fds()
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.WARNING,
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    try:
        asyncio.run(serve_stdio(config, wire_in, wire_out))
    except KeyboardInterrupt:
        pass
    except (StartFailed, ClientGone) as exc:
        say(f"search: mcp: {exc}", file=sys.stderr)
        return 1
    return 0
