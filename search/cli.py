"""`search serve | query | route`: the command line, over the same Service as HTTP.

Exit status: 0 on success, 1 on a failed search, 2 on bad usage or bad config.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from search.config import Config, ConfigError, load_config
from search.label_cli import add_commands as add_label_commands
from search.query_text import has_visible_text, query_problem
from search.terminal import say
from search.trace_cli import add_commands as add_trace_commands

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments or input file: exit 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="search", description="Explainable search router")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the HTTP API")
    serve.add_argument("--config", help="config file (default: $SEARCH_CONFIG or config.yaml)")
    serve.add_argument("--host", help="bind address (default from config: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default from config: 8080)")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")

    query = commands.add_parser("query", help="answer one query in-process")
    query.add_argument("text", help="the query")
    query.add_argument("--explain", action="store_true", help="print the explanation chain")
    query.add_argument("--json", action="store_true", help="print the response body as JSON")
    query.add_argument("--config")

    route = commands.add_parser("route", help="dry run: print the routing plan")
    route.add_argument("text", nargs="?", help="the query (or use --input)")
    route.add_argument("--input", help="file: one query per line, or JSONL with a 'text' field")
    route.add_argument("--json", action="store_true", help="print JSON")
    route.add_argument("--config")
    COMMANDS.update(add_trace_commands(commands))  # trace list|show, replay
    COMMANDS.update(add_label_commands(commands))  # label, check

    mcp = commands.add_parser("mcp", help="serve the MCP tools over stdio (for MCP clients)")
    mcp.add_argument("--config")
    return parser


def _load(path: str | None) -> Config:
    return load_config(path)


def _check_parts(service: Any, query: str, where: str = "") -> None:
    """Over `routing.max_parts` is bad usage (exit 2), found before any model is loaded."""
    from routing.pipeline import TooManyParts

    try:
        service.router.check_parts(query)
    except TooManyParts as exc:
        raise UsageError(f"{where}{exc}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from search.app import create_app

    config = _load(args.config)  # validate before forking workers: exit 2 on bad config
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    if args.workers < 1:
        raise UsageError("--workers: must be at least 1")
    if args.workers == 1:
        uvicorn.run(create_app(config), host=host, port=port, log_level="info", access_log=False)
        return EXIT_OK
    if args.config:
        os.environ["SEARCH_CONFIG"] = str(Path(args.config).resolve())
    from search.metrics import MULTIPROCESS_ENV

    # The workers count /metrics into files here, so any of them can answer for all.
    with tempfile.TemporaryDirectory(prefix="search-metrics-") as metrics_dir:
        os.environ.setdefault(MULTIPROCESS_ENV, metrics_dir)
        uvicorn.run(
            "search.asgi:app_factory",
            factory=True,
            host=host,
            port=port,
            workers=args.workers,
            log_level="info",
            access_log=False,
        )
    return EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    from search.render import chain_table, results_text
    from search.service import Service

    config = _load(args.config)
    problem = query_problem(args.text, config.server.max_query_chars)
    if problem is not None:
        raise UsageError(problem)

    async def run() -> Any:
        service = Service(config)
        try:
            _check_parts(service, args.text)
            await service.start()
            return await service.search(args.text, explain=args.explain)
        finally:
            await service.aclose()

    outcome = asyncio.run(run())
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


def _read_queries(path: str) -> Iterator[str]:
    """Queries from a file: plain lines, or JSONL objects with a 'text' field; a line with
    nothing visible on it is skipped like a blank one."""
    try:
        handle = Path(path).open(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--input: cannot read {path}: {exc.strerror}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                try:
                    data = json.loads(line)
                except json.JSONDecodeError:
                    raise UsageError(f"--input: line {number} is not valid JSON") from None
                text = data.get("text") if isinstance(data, dict) else None
                if not isinstance(text, str):
                    raise UsageError(f"--input: line {number} has no string 'text' field")
                line = text
            if has_visible_text(line):
                yield line


def cmd_route(args: argparse.Namespace) -> int:
    from search.render import chain_table
    from search.service import Service

    if bool(args.text) == bool(args.input):
        raise UsageError("route: give either TEXT or --input FILE")
    config = _load(args.config)
    queries = list(_read_queries(args.input)) if args.input else [args.text]
    if not args.input:
        problem = query_problem(args.text, config.server.max_query_chars)
        if problem is not None:
            raise UsageError(problem)

    async def run() -> int:
        service = Service(config)
        try:
            for number, query in enumerate(queries, start=1):
                _check_parts(service, query, f"--input: query {number}: " if args.input else "")
            await service.start(sources=False)
            for query in queries:
                outcome = await service.search(query, dry_run=True)
                flat = []
                for result in outcome.results:
                    if result.condition is not None:
                        flat.append(result.condition)
                    flat.append(result)
                parts = [
                    {"query": r.query, "source": r.route, "stage": r.stage} for r in flat
                ]
                if args.input or args.json:
                    line = json.dumps({"query": query, "parts": parts}, ensure_ascii=False)
                    say(line, json_text=True)
                else:
                    for part in parts:
                        say(f"{part['query']!r} -> {part['source']} ({part['stage']})")
                    say()
                    say(chain_table(outcome.chain))
        finally:
            await service.aclose()
        return EXIT_OK

    return asyncio.run(run())


def cmd_mcp(args: argparse.Namespace) -> int:
    from search.mcp_server import run_stdio

    return run_stdio(_load(args.config))  # config errors exit 2 before stdout is touched


COMMANDS = {"serve": cmd_serve, "query": cmd_query, "route": cmd_route, "mcp": cmd_mcp}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ConfigError, UsageError) as exc:
        say(f"search: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
