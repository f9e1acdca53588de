"""The router's HTTP API as the agent and the config flow use it (HA's own aiohttp).

Every call has a deadline; every way it can fail becomes a `RouterError` whose message
is fit to be spoken, so nothing escapes into Home Assistant. The API token goes only into
the Authorization header, never into a message.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from .const import ORIGIN_ASSIST, ORIGIN_HEADER


class RouterError(Exception):
    """The router could not answer; `str()` is a sentence for the user, `kind` for logs."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class RouterClient:
    """`POST /search` (and a reachability check) against one router."""

    def __init__(
        self, session: aiohttp.ClientSession, url: str, token: str | None, timeout_s: float
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = session
        self._headers = {ORIGIN_HEADER: ORIGIN_ASSIST}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    async def search(self, query: str, session_id: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, "explain": True}
        if session_id:
            body["session_id"] = session_id[:128]
        data = await self._call("POST", "/search", json=body)
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise RouterError("bad_response", "The search router sent an answer I can't read.")
        return data

    async def check(self) -> None:
        """Reachable, and the token (if any) accepted: `/openapi.json` needs both."""
        await self._call("GET", "/openapi.json")

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._session.request(
                    method, self.url + path, headers=self._headers, **kwargs
                ) as response:
                    status = response.status
                    try:
                        data = await response.json(content_type=None)
                    except ValueError:
                        data = None
        except TimeoutError as exc:
            raise RouterError(
                "timeout",
                f"The search router did not answer within {self.timeout_s:g} seconds.",
            ) from exc
        except aiohttp.ClientError as exc:
            raise RouterError("unreachable", "I can't reach the search router.") from exc
        if status == 401:
            raise RouterError("invalid_auth", "The search router refused my API token.")
        if status >= 400 and not (isinstance(data, dict) and "results" in data):
            message = ""
            if isinstance(data, dict) and isinstance(data.get("error"), dict):
                message = str(data["error"].get("message") or "")
            said = f": {message}" if message else "."
            raise RouterError("http_error", f"The search router could not answer{said}")
        return data
