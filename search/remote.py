"""Ask the server already running at the configured address, instead of loading the model.

`search query` and `search route` would otherwise import torch and load the model for one
answer (seconds); a running server has both loaded and answers in milliseconds. Only the
standard library's HTTP client is used, so asking costs no heavy import either.

The server is the one at `server.host:server.port` of the CLI's config, with its
`server.api_token` (read by `search.client_settings`, which validates only those keys). Nothing listening there means "run in-process"; anything else that
answers but is not this API (not JSON, no `trace_id`) also falls back to in-process.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any

from search.client_settings import ClientSettings

CONNECT_TIMEOUT_S = 0.5
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
# What this API answers bad input with (a 404 or 405 means some other server is there).
REFUSALS = frozenset({400, 403, 413, 415, 422})


class RemoteRefused(Exception):
    """The server answered, but refused the request as bad or unauthorised (exit 2)."""


@dataclass(frozen=True, slots=True)
class RemoteAnswer:
    """The server's status code and response body for one `POST /search`."""

    status_code: int
    body: dict[str, Any]

    @property
    def trace_id(self) -> str:
        return str(self.body.get("trace_id") or "")

    @property
    def chain(self) -> list[dict[str, Any]]:
        return list(self.body.get("explanation") or [])


def server_address(settings: ClientSettings) -> tuple[str, int]:
    """Where the configured server listens, as a client dials it (a wildcard bind is
    reached on loopback)."""
    host = settings.host
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    return host.strip("[]"), settings.port


def ask(settings: ClientSettings, payload: dict[str, Any]) -> RemoteAnswer | None:
    """`POST /search` to the configured server; None when no search server answers there.

    Connecting waits at most `CONNECT_TIMEOUT_S` (a local server accepts at once); the
    answer may take up to the request deadline, plus a margin for the server's own work.
    """
    host, port = server_address(settings)
    read_timeout_s = settings.request_deadline_s + 5.0
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if settings.api_token:
        headers["Authorization"] = f"Bearer {settings.api_token}"
    connection = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT_S)
    try:
        try:
            connection.connect()
        except OSError:  # refused, unreachable, or nothing accepted in time
            return None
        assert connection.sock is not None
        connection.sock.settimeout(read_timeout_s)
        try:
            connection.request("POST", "/search", json.dumps(payload).encode(), headers)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            return None  # it went away or is not speaking HTTP: answer in-process
    finally:
        connection.close()
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if response.status == 401:
        raise RemoteRefused(
            f"the server at {host}:{port} refused the request: check server.api_token"
        )
    if response.status in REFUSALS and isinstance(body.get("error"), dict):
        raise RemoteRefused(str(body["error"].get("message") or "bad request"))
    if "trace_id" not in body:
        return None
    return RemoteAnswer(response.status, body)
