"""`search serve | query | route`: the command line, over the same Service as HTTP.

Exit status: 0 on success, 1 on a failed search, 2 on bad usage or bad config.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search import __version__
from search.client_settings import ClientSettings, read_client_settings, settings_of
from search.errors import ConfigError
from search.query_text import encodable, query_problem
from search.terminal import say

if TYPE_CHECKING:
    from search.config import Config

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE = 141


class UsageError(Exception):
    """Bad arguments or input file: exit 2."""


class CommandFailed(Exception):
    """A failure said in one line (a source that cannot start, a server that took the
    request and did not answer): exit 1."""


# The commands defined in this module; any other needs the full parser (trace, label, fit:
# their modules import the trace store and the config models, which a client asking the
# running server does without).
CORE_COMMANDS = frozenset({"serve", "query", "route", "doctor", "mcp"})


def _port(text: str) -> int:
    """`--port`, checked as `server.port` is (0: any free port), before anything loads:
    out of range, the socket layer fails only after the model loaded."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def _parser(full: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="search", description="Explainable search router")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the HTTP API")
    serve.add_argument("--config", help="config file (default: $SEARCH_CONFIG or config.yaml)")
    serve.add_argument("--host", help="bind address (default from config: 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port (default from config: 8080)")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")

    query = commands.add_parser(
        "query", help="answer one query (by the running server if one answers, else in-process)"
    )
    query.add_argument("text", help="the query")
    query.add_argument("--explain", action="store_true", help="print the explanation chain")
    query.add_argument("--json", action="store_true", help="print the response body as JSON")
    query.add_argument("--local", action="store_true", help="in-process, even if a server runs")
    query.add_argument("--config")

    route = commands.add_parser("route", help="dry run: print the routing plan")
    route.add_argument("text", nargs="?", help="the query (or use --input)")
    route.add_argument("--input", help="file: one query per line, or JSONL with a 'text' field")
    route.add_argument("--json", action="store_true", help="print JSON")
    route.add_argument("--local", action="store_true", help="in-process, even if a server runs")
    route.add_argument(
        "--store",
        action="store_true",
        help="with --input: keep a dry-run trace per query (not kept by default, so a batch "
        "does not push real history out of the trace store)",
    )
    route.add_argument("--config")
    if full:
        from search.correction.fit_cli import add_fit_command
        from search.correction.label_cli import add_commands as add_label_commands
        from search.traces.cli import add_commands as add_trace_commands

        COMMANDS.update(add_trace_commands(commands))  # trace list|show, replay
        COMMANDS.update(add_label_commands(commands))  # label, check
        COMMANDS.update(add_fit_command(commands))  # fit

    doctor = commands.add_parser(
        "doctor", help="check each configured source and the LLM: reachable, version, auth"
    )
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
    doctor.add_argument("--config")

    mcp = commands.add_parser("mcp", help="serve the MCP tools over stdio (for MCP clients)")
    mcp.add_argument("--config")
    return parser


def _load(path: str | None) -> Config:
    from search.config import load_config

    return load_config(path)


def _client_settings(args: argparse.Namespace) -> tuple[ClientSettings, Config | None]:
    """What asking the running server needs, read without the full config when it can be
    (`search.client_settings`); else the full config too, which names a bad key."""
    settings = None if args.local else read_client_settings(args.config)
    if settings is not None:
        return settings, None
    config = _load(args.config)
    return settings_of(config), config


def _check_parts(service: Any, query: str, where: str = "") -> None:
    """Over `routing.max_parts` is bad usage (exit 2), found before any model is loaded."""
    from routing.pipeline import TooManyParts

    try:
        service.router.check_parts(query)
    except TooManyParts as exc:
        raise UsageError(f"{where}{exc}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from search.api.app import OneLineStartError, create_app

    config = _load(args.config)  # validate before forking workers: exit 2 on bad config
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    if args.workers < 1:
        raise UsageError("--workers: must be at least 1")
    if args.workers == 1:
        return _serve(
            lambda: uvicorn.run(
                OneLineStartError(create_app(config, settle=True)),
                host=host,
                port=port,
                log_level="info",
                access_log=False,
            ),
            host,
            port,
        )
    if args.config:
        os.environ["SEARCH_CONFIG"] = str(Path(args.config).resolve())
    from search.observability.metrics import MULTIPROCESS_ENV

    # The workers count /metrics into files here, so any of them can answer for all.
    with tempfile.TemporaryDirectory(prefix="search-metrics-") as metrics_dir:
        os.environ.setdefault(MULTIPROCESS_ENV, metrics_dir)
        return _serve(
            lambda: uvicorn.run(
                "search.api.asgi:app_factory",
                factory=True,
                host=host,
                port=port,
                workers=args.workers,
                log_level="info",
                access_log=False,
            ),
            host,
            port,
        )


def _serve(run: Callable[[], None], host: str, port: int) -> int:
    """Run the server; one that did not start (the port taken, the app failed to start)
    is a failure, exit 1. uvicorn logs why, then exits with a status of its own (3)."""
    try:
        run()
    except SystemExit as exc:
        if exc.code in (None, 0):
            raise
        say(
            f"search: serve: the server did not start on {host}:{port} (why is logged above)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _before_loading_model() -> None:
    """Settings of this process for a command that loads the model.

    Progress bars only when someone watches them (stderr is a terminal). The tokenizer
    stays on one thread: torch has the cores, and its thread pool must not be forked (the
    tokenizers library reads this setting from the environment only; the process is ours).
    """
    from routing.stages.embedder import show_progress

    show_progress(sys.stderr.isatty())
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _ask_server(settings: ClientSettings, payload: dict[str, Any]) -> Any:
    """The running server's answer, or None when this router does not answer at the
    configured address (something else that answers there is named on stderr).

    A server that took the request and then did not answer fails the command (exit 1):
    the request may have run there, and a command must not be carried out twice."""
    from search.remote import NotThisRouter, RemoteFailed, RemoteRefused, ask

    try:
        return ask(settings, payload)
    except RemoteRefused as exc:
        raise UsageError(str(exc)) from None
    except RemoteFailed as exc:
        raise CommandFailed(str(exc)) from None
    except NotThisRouter as exc:
        say(f"search: {exc}; answering in-process", file=sys.stderr)
        return None


def cmd_query(args: argparse.Namespace) -> int:
    from search.traces.render import chain_table, results_text

    settings, config = _client_settings(args)
    problem = query_problem(args.text, settings.max_query_chars)
    if problem is not None:
        raise UsageError(problem)

    outcome = None
    if not args.local:
        outcome = _ask_server(settings, {"query": args.text, "explain": args.explain})
    if outcome is None:
        outcome = _query_locally(config or _load(args.config), args.text, args.explain)
    if args.json:
        say(json.dumps(outcome.body, indent=2, ensure_ascii=False), json_text=True)
    else:
        if "error" in outcome.body:
            error = outcome.body["error"]
            say(f"failed: {error['type']}: {error['message']}")
        else:
            say(results_text(outcome.body["results"]))
        if args.explain:
            say()
            say(chain_table(outcome.chain))
        say(f"\ntrace {outcome.trace_id}")
    return EXIT_OK if outcome.status_code == 200 else EXIT_FAILED


def _query_locally(config: Config, text: str, explain: bool) -> Any:
    from search.service import Service

    _before_loading_model()

    async def run() -> Any:
        service = Service(config)
        try:
            _check_parts(service, text)
            await _start(service)
            # the person at this machine's terminal: as a loopback client may
            return await service.search(text, explain=explain, authorized=True)
        finally:
            await service.aclose()

    import asyncio

    return asyncio.run(run())


async def _start(service: Any) -> None:
    """Start the service; a source the config names that cannot start (a ZIM file not
    found...) is one line, as `search serve` says it, not a traceback (exit 1)."""
    from sources.base import SourceError

    try:
        await service.start()
    except SourceError as exc:
        message = service.scrubber.text(f"{type(exc).__name__}: {exc}")
        raise CommandFailed(f"start-up failed: {message}") from None


def _read_queries(path: str, max_chars: int) -> Iterator[tuple[int, str]]:
    """Queries from a file, each with its line number: plain lines, or JSONL objects with
    a 'text' field; a blank line is skipped. Each query must pass the check one TEXT gets
    (`query_problem`: one with nothing visible, such as `{"text": "  "}` or a line of
    zero-width spaces, is bad input too), or the file is bad input naming the line.

    Read as `utf-8-sig` (an editor's byte order mark is not part of the first query) with
    `surrogateescape`, so bytes that are not UTF-8 are found on their line, not mid-read.
    """
    try:
        # closed by the with below
        handle = Path(path).open(encoding="utf-8-sig", errors="surrogateescape")  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"--input: cannot read {path}: {exc.strerror}") from None
    # The longest line a query may fill: JSON escapes a character in at most 12 (a
    # surrogate pair's two \uXXXX), plus the object's other fields. A longer line is
    # refused as soon as that much of it is read, not held whole in memory first.
    limit = 12 * max_chars + 1024
    with handle:
        for number, line in enumerate(iter(lambda: handle.readline(limit + 1), ""), start=1):
            if len(line.rstrip("\r\n")) > limit:
                raise UsageError(
                    f"--input: line {number} is over {limit:,} characters "
                    f"(a query may have {max_chars:,})"
                )
            if not encodable(line):
                raise UsageError(f"--input: {path}: line {number} is not UTF-8 text")
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                try:
                    data = json.loads(line)
                except (json.JSONDecodeError, RecursionError):  # Recursion: nested too deep
                    raise UsageError(f"--input: line {number} is not valid JSON") from None
                text = data.get("text") if isinstance(data, dict) else None
                if not isinstance(text, str):
                    raise UsageError(f"--input: line {number} has no string 'text' field")
                line = text
            problem = query_problem(line, max_chars)
            if problem is not None:
                raise UsageError(f"--input: line {number}: {problem}")
            yield number, line


def _plan_parts(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plan's parts in order, a condition before its consequence."""
    flat: list[dict[str, Any]] = []
    for result in results:
        if isinstance(result.get("condition"), dict):
            flat.append(result["condition"])
        flat.append(result)
    parts = []
    for r in flat:
        part = {"query": r["query"], "source": r.get("route"), "stage": r.get("stage")}
        if isinstance(r.get("plan"), dict):  # the sources it would try, those out now
            part.update(r["plan"])
        parts.append(part)
    return parts


def _plan_line(part: dict[str, Any]) -> str:
    """One part of the plan, and what it would meet: "'lights' -> ha (intent_keyword);
    ha is disabled, and nothing stands in: it would fail"."""
    line = f"{part['query']!r} -> {part['source'] or 'no source'} ({part['stage']})"
    from search.traces.narrative import plan_outcome

    meets = plan_outcome(part["source"], part.get("sources"), part.get("unavailable"))
    return f"{line}; {meets}" if meets else line


def _print_plan(
    args: argparse.Namespace, query: str, parts: list[dict[str, Any]], chain: list[dict[str, Any]]
) -> None:
    from search.traces.render import chain_table

    if args.input or args.json:
        say(json.dumps({"query": query, "parts": parts}, ensure_ascii=False), json_text=True)
    else:
        for part in parts:
            say(_plan_line(part))
        say()
        say(chain_table(chain))


def cmd_route(args: argparse.Namespace) -> int:
    if bool(args.text) == bool(args.input):
        raise UsageError("route: give either TEXT or --input FILE")
    if args.store and not args.input:
        raise UsageError("route: --store goes with --input (one TEXT is always stored)")
    if args.input:
        # A batch stays in-process: the server would keep a trace of every line.
        config = _load(args.config)
        queries = list(_read_queries(args.input, config.server.max_query_chars))
        return _route_locally(config, args, queries)
    settings, maybe_config = _client_settings(args)
    problem = query_problem(args.text, settings.max_query_chars)
    if problem is not None:
        raise UsageError(problem)
    if not args.local:
        answer = _ask_server(settings, {"query": args.text, "explain": True, "dry_run": True})
        if answer is not None:
            if answer.status_code != 200:
                error = answer.body.get("error") or {}
                say(f"failed: {error.get('type')}: {error.get('message')}")
                return EXIT_FAILED
            _print_plan(args, args.text, _plan_parts(answer.body["results"]), answer.chain)
            return EXIT_OK
    return _route_locally(maybe_config or _load(args.config), args, [(0, args.text)])


def _route_locally(config: Config, args: argparse.Namespace, queries: list[tuple[int, str]]) -> int:
    """Dry runs in-process; `queries`: each with its line of `--input` (0 for TEXT)."""
    from search.service import Service
    from search.traces.records import NullTraceSink

    _before_loading_model()
    keep_traces = args.store or not args.input

    async def run() -> int:
        service = Service(config, traces=None if keep_traces else NullTraceSink())
        try:
            for number, query in queries:
                _check_parts(service, query, f"--input: line {number}: " if args.input else "")
            await service.start(sources=False)
            for _, query in queries:
                outcome = await service.search(query, dry_run=True)
                parts = _plan_parts([result.to_dict() for result in outcome.results])
                _print_plan(args, query, parts, outcome.chain)
        finally:
            await service.aclose()
        return EXIT_OK

    import asyncio

    return asyncio.run(run())


def cmd_doctor(args: argparse.Namespace) -> int:
    from search.doctor import coverage, diagnose, table
    from search.scrub import Scrubber
    from search.terminal import escape_controls

    config = _load(args.config)
    import asyncio

    findings = asyncio.run(diagnose(config))
    scrubber = Scrubber.from_config(config)
    for finding in findings:
        finding.detail = scrubber.text(finding.detail)
    if args.json:
        say(
            json.dumps([f.to_dict() for f in findings], indent=2, ensure_ascii=False),
            json_text=True,
        )
    else:
        rows = [tuple(escape_controls(cell) for cell in row) for row in table(findings)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            say("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        for finding in findings:
            if finding.detail:
                say(f"{finding.name}: {escape_controls(finding.detail)}")
        for line in coverage(findings, config):
            say(escape_controls(line))
    # A configured LLM that does not answer is down too: routing would pass every unsure
    # part over it to the default, which the user configured the LLM to avoid.
    return EXIT_FAILED if any(f.down for f in findings) else EXIT_OK


def cmd_mcp(args: argparse.Namespace) -> int:
    from search.mcp_server import run_stdio

    return run_stdio(_load(args.config))  # config errors exit 2 before stdout is touched


# Commands that always load the model; `query` and `route` do only when run in-process.
MODEL_COMMANDS = frozenset({"serve", "mcp", "replay"})
COMMANDS = {
    "serve": cmd_serve,
    "query": cmd_query,
    "route": cmd_route,
    "doctor": cmd_doctor,
    "mcp": cmd_mcp,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(full=not argv or argv[0] not in CORE_COMMANDS).parse_args(argv)
    if args.command in MODEL_COMMANDS:
        _before_loading_model()
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except (ConfigError, UsageError) as exc:
        say(f"search: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CommandFailed as exc:
        say(f"search: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_FAILED
    except BrokenPipeError:
        # The reader stopped reading (`search route ... | head -1`): quietly done, with
        # stdout on /dev/null so the flush at exit does not fail again; 128 + SIGPIPE,
        # as a tool the signal ended.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
