"""Whether each configured source can be reached, and which version answers there.

Shared by `/healthz` and `search doctor`. A source says what it knows of itself through
`Source.info()` (its version, or the `SourceError.reason` asking failed with); for a
source reached over the network, a TCP connection to its URL's host and port says
whether anything listens there at all, so every kind gets a reachability, including
those whose service has no cheap "who are you" request.

`/healthz` is a probe, called often and by anyone who can reach the server, so it serves
`HealthCache`'s facts (refreshed at most every `ttl_s`, and never waiting on a slow source
longer than `wait_s`) and only the four public fields: no URL, path or credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sources.base import Source

# Failure reasons that mean "nothing answered", as opposed to "it answered, but no".
UNREACHABLE = frozenset({"connection_refused", "timeout"})
INFO_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """What one check of one source found."""

    name: str
    type: str
    enabled: bool
    reachable: bool | None = None  # None: disabled, so not checked
    version: str | None = None
    error: str | None = None  # a SourceError reason ("unauthorized", "timeout", ...)
    facts: Mapping[str, Any] | None = None  # everything info() said (for the doctor)

    def public(self) -> dict[str, Any]:
        """The fields `/healthz` shows."""
        data: dict[str, Any] = {"type": self.type, "enabled": self.enabled}
        if self.enabled:
            data["reachable"] = self.reachable
            data["version"] = self.version
            if self.error is not None:
                data["error"] = self.error
        return data


async def tcp_reachable(url: str, timeout_s: float) -> bool:
    """Whether a TCP connection to `url`'s host and port is accepted within `timeout_s`."""
    parts = urlsplit(url)
    if not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    try:
        async with asyncio.timeout(timeout_s):
            _reader, writer = await asyncio.open_connection(parts.hostname, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):  # the peer hung up first: it was there all the same
        await writer.wait_closed()
    return True


async def check_source(source: Source, url: str | None) -> SourceHealth:
    """Ask `source.info()` and, for a networked source, dial its URL (both bounded)."""
    timeout_s = min(source.timeout_s, INFO_TIMEOUT_S)
    try:
        async with asyncio.timeout(timeout_s):
            facts = dict(await source.info())
    except TimeoutError:
        facts = {"type": source.kind, "error": "timeout"}
    except Exception as exc:  # noqa: BLE001 - a broken info() is a finding, not a crash
        facts = {"type": source.kind, "error": getattr(exc, "reason", type(exc).__name__)}
    error = facts.get("error")
    error = None if error is None else str(error)
    reachable = error not in UNREACHABLE
    if reachable and url:
        reachable = await tcp_reachable(url, timeout_s)
        if not reachable and error is None:
            error = "connection_refused"
    version = facts.get("version")
    return SourceHealth(
        name=source.name,
        type=str(facts.get("type") or source.kind),
        enabled=True,
        reachable=reachable,
        version=None if version is None else str(version),
        error=error,
        facts=facts,
    )


def source_url(entry: Any) -> str | None:
    """The URL a source's config points it at, if it is a networked kind."""
    url = getattr(entry, "url", None)
    return str(url) if url else None


class HealthCache:
    """The sources' health, refreshed at most every `ttl_s`.

    A refresh runs as one task; callers wait for it at most `wait_s` and otherwise get the
    facts of the previous refresh (or "not checked yet", `reachable: null`), so a source
    that hangs makes no probe of this server hang.
    """

    def __init__(
        self,
        sources: Mapping[str, Source],
        entries: Mapping[str, Any],
        *,
        ttl_s: float = 10.0,
        wait_s: float = 1.0,
    ) -> None:
        self.sources = sources
        self.entries = entries
        self.ttl_s = ttl_s
        self.wait_s = wait_s
        self._facts: dict[str, SourceHealth] = {}
        self._checked_at = float("-inf")
        self._refresh: asyncio.Task[None] | None = None

    async def _run_refresh(self) -> None:
        names = [n for n in self.entries if n in self.sources]
        found = await asyncio.gather(
            *(check_source(self.sources[n], source_url(self.entries[n])) for n in names)
        )
        self._facts = dict(zip(names, found, strict=True))
        self._checked_at = time.monotonic()

    async def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every configured source's public health fields, by name."""
        stale = time.monotonic() - self._checked_at > self.ttl_s
        if stale and (self._refresh is None or self._refresh.done()):
            self._refresh = asyncio.create_task(self._run_refresh())
        if self._refresh is not None and not self._refresh.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._refresh), self.wait_s)
            except TimeoutError:
                pass
        result: dict[str, dict[str, Any]] = {}
        for name, entry in self.entries.items():
            enabled = bool(entry.enabled)
            known = self._facts.get(name)
            if known is not None:
                result[name] = known.public()
            else:
                result[name] = SourceHealth(name, str(entry.type), enabled).public()
        return result

    async def aclose(self) -> None:
        if self._refresh is not None and not self._refresh.done():
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # shutting down
                await self._refresh
