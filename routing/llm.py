"""The LLM stage: ask a chat model which source should answer, when nothing cheaper knew.

Speaks the OpenAI-compatible chat-completions API (`POST {base_url}/chat/completions`),
which Ollama, llama.cpp's server, vLLM and OpenAI all serve; `base_url` includes the
version prefix (`http://127.0.0.1:11434/v1`). One pooled httpx client, opened in
`start()`, and a deadline around every call.

The prompt names the configured routes with their descriptions (plus "none") and asks for
`{"source": "<name>"}`. The answer is validated against the routes; JSON wrapped in prose
or a code fence is tolerated. What went wrong decides the default's reason:
`llm_failed` (connection error, timeout, HTTP error) or `llm_unusable` (no JSON, no source,
an unknown source). A fresh decision is cached exactly (decision cache) and semantically
(reused for paraphrases by the semantic stage), unless the query leans on the conversation.

The prompt and raw answer go into events only with `trace.capture_prompts: true`: they
can carry personal data. The API key is only ever in the Authorization header.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from routing.confidence import LLM_CONFIDENCE, single
from routing.events import record
from routing.intents import Decision, ResolveContext

if TYPE_CHECKING:
    from routing.decision_cache import DecisionCache
    from routing.semantic import LearnedDecisions, SemanticStage
    from routing.sessions import SessionStore
    from search.config import LLMConfig

NONE = "none"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
_DECODER = json.JSONDecoder()


class LLMFailure(Exception):
    """The LLM gave no usable decision; `reason` is the default's reason code."""

    def __init__(self, reason: str, detail: str, raw: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason  # llm_failed | llm_unusable
        self.detail = detail
        self.raw = raw


@dataclass(frozen=True, slots=True)
class LLMAnswer:
    route: str | None  # None: the model said no source fits
    raw: str
    elapsed_ms: float


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text`, even inside prose or a ```json fence."""
    position = text.find("{")
    while position >= 0:
        try:
            value, _ = _DECODER.raw_decode(text, position)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            return value
        position = text.find("{", position + 1)
    return None


def build_messages(
    routes: dict[str, str], query: str, previous: tuple[str, str] | None = None
) -> list[dict[str, str]]:
    """The chat messages asking for one route; `previous` is (query, route) of the last turn."""
    lines = [f"- {name}: {description or name}" for name, description in routes.items()]
    lines.append(f"- {NONE}: none of the above can answer it (alarms, timers, music, messages, "
                 "calendars, small talk, arithmetic).")
    names = ", ".join([*routes, NONE])
    system = (
        "You route search queries. Choose the ONE source below that can best answer the "
        "user's query.\n\nSources:\n" + "\n".join(lines) + "\n\n"
        'Reply with a JSON object and nothing else: {"source": "<name>"}, where <name> is '
        f"one of: {names}."
    )
    if previous is not None:
        user = (f"Previous query (answered by {previous[1]}): {previous[0]}\n"
                f"Query (it may refer to the previous one): {query}")
    else:
        user = f"Query: {query}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_answer(raw: str, routes: dict[str, str]) -> str | None:
    """The route the answer names (None for "none"); LLMFailure(llm_unusable) otherwise."""
    data = extract_json_object(raw)
    if data is None:
        raise LLMFailure("llm_unusable", "the answer holds no JSON object", raw)
    value = data.get("source", data.get("route"))
    if not isinstance(value, str) or not value.strip():
        raise LLMFailure("llm_unusable", "the answer names no source", raw)
    name = value.strip()
    if name.lower() == NONE:
        return None
    by_lower = {route.lower(): route for route in routes}
    route = name if name in routes else by_lower.get(name.lower())
    if route is None:
        shown = repr(name) if _NAME.match(name) else "(not a name)"
        raise LLMFailure("llm_unusable", f"the answer names an unknown source {shown}", raw)
    return route


class LLMStage:
    """Fresh routing decisions from a chat model."""

    name = "intent_llm"

    def __init__(
        self,
        config: LLMConfig,
        routes: dict[str, str],
        *,
        capture_prompts: bool = False,
        decision_cache: DecisionCache | None = None,
        learned: LearnedDecisions | None = None,
        semantic: SemanticStage | None = None,
        sessions: SessionStore | None = None,
    ) -> None:
        self.config = config
        self.routes = routes
        self.capture_prompts = capture_prompts
        self.decision_cache = decision_cache
        self.learned = learned
        self.semantic = semantic
        self.sessions = sessions
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        if self._client is None:
            headers = {"Content-Type": "application/json"}
            if self.config.api_key is not None and self.config.api_key.get_secret_value():
                headers["Authorization"] = f"Bearer {self.config.api_key.get_secret_value()}"
            self._client = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(self.config.timeout_s),
                limits=httpx.Limits(max_connections=16, max_keepalive_connections=8),
                follow_redirects=False,
            )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def ask(self, messages: list[dict[str, str]]) -> LLMAnswer:
        """One chat completion -> the named route; LLMFailure on anything unusable."""
        await self.start()
        assert self._client is not None
        body = {"model": self.config.model, "messages": messages, "temperature": 0}
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.config.timeout_s):
                response = await self._client.post(self.url, json=body)
        except (TimeoutError, httpx.TimeoutException):
            raise LLMFailure("llm_failed", f"no answer within {self.config.timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            raise LLMFailure("llm_failed", f"request failed: {type(exc).__name__}") from None
        elapsed_ms = round((time.perf_counter() - started) * 1000.0, 3)
        if response.status_code != 200:
            raise LLMFailure("llm_failed", f"HTTP {response.status_code} from the LLM server")
        try:
            payload = response.json()
            raw = payload["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise LLMFailure("llm_unusable", "not a chat-completions response") from None
        if not isinstance(raw, str):
            raise LLMFailure("llm_unusable", "the answer has no text content")
        return LLMAnswer(parse_answer(raw, self.routes), raw, elapsed_ms)

    async def _previous(self, context: ResolveContext) -> tuple[str, str] | None:
        if context.discourse is None or self.sessions is None:
            return None
        turn = await self.sessions.recall(context.session_id)
        return (turn.query, turn.route) if turn is not None else None

    async def _consult(
        self, query: str, context: ResolveContext, escalated: bool
    ) -> LLMAnswer | None:
        """Ask, recording the outcome; None when the LLM failed (event recorded)."""
        messages = build_messages(self.routes, query, await self._previous(context))
        try:
            answer = await self.ask(messages)
        except LLMFailure as failure:
            fields: dict[str, Any] = {}
            if self.capture_prompts:
                fields = {"prompt": messages, "raw_answer": failure.raw}
            record("llm_error", query=query, reason=failure.reason, detail=failure.detail,
                   discourse_escalated=escalated, **fields)
            context.default_reason = failure.reason
            return None
        fields = {"model": self.config.model, "elapsed_ms": answer.elapsed_ms}
        if self.capture_prompts:
            fields.update(prompt=messages, raw_answer=answer.raw)
        if answer.route is None:
            record("intent_llm", query=query, decision=None, discourse_escalated=escalated,
                   matched=False, outcome="no_source", confidence=LLM_CONFIDENCE,
                   candidates=single("none", LLM_CONFIDENCE).candidates(), **fields)
        else:
            record("intent_llm", query=query, decision=answer.route,
                   discourse_escalated=escalated, matched=True, confidence=LLM_CONFIDENCE,
                   candidates=single(answer.route, LLM_CONFIDENCE).candidates(), **fields)
        return answer

    async def _remember(self, query: str, route: str, context: ResolveContext) -> None:
        if context.discourse is not None:
            return  # the decision depends on the conversation, not just the words
        if self.decision_cache is not None:
            self.decision_cache.put(query, route, self.name, LLM_CONFIDENCE)
        if self.learned is not None:
            vector = context.embedding
            if vector is None and self.semantic is not None:
                vector = await self.semantic.embed(query)
            if vector is not None:
                self.learned.add(query, route, vector)

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        if context.unserved:
            return None
        answer = await self._consult(query, context, escalated=False)
        if answer is None:
            return None
        if answer.route is None:
            context.unserved = True
            context.default_reason = "no_match"
            return None
        await self._remember(query, answer.route, context)
        return Decision(answer.route, self.name, confidence=LLM_CONFIDENCE)

    async def escalate(
        self, query: str, context: ResolveContext, keyword_route: str
    ) -> Decision | None:
        """A keyword matched a discourse-dependent query: let the LLM (with context) decide."""
        answer = await self._consult(query, context, escalated=True)
        if answer is None or answer.route is None:
            return None  # the keyword's decision stands
        return Decision(answer.route, self.name, confidence=LLM_CONFIDENCE)
