"""The LLM stage: ask a chat model which source should answer, when nothing cheaper knew.

Speaks the OpenAI-compatible chat-completions API (`POST {base_url}/chat/completions`),
which Ollama, llama.cpp's server, vLLM and OpenAI all serve; `base_url` includes the
version prefix (`http://127.0.0.1:11434/v1`). One pooled httpx client, opened in
`start()`, and one deadline (`timeout_s`) around each decision, negotiation included.

The answer is constrained where the server can: a JSON schema whose enum is the configured
routes plus "none", in whichever `response_format` spelling the server takes (negotiated
once per server, `routing.stages.llm_format`); the event says which (`response_format`). The
instructions go in the user message, not a system message: some chat templates (Gemma's,
as llama-cpp-python applies it) drop the system message, and the model would never see
the routes. The answer is still validated against the routes (a server may ignore the
constraint); JSON wrapped in prose or a code fence is tolerated.

A small model may name one route whatever it is asked. With `bias_check` (the default),
the first decision against a server also asks queries with no content (`CONTENT_FREE`);
a route named for them is a habit, and an answer naming it is declined (`llm_unusable`):
such a model then leaves routing as it was without it, instead of making it worse.

How sure the model is comes from the answer's token log-probabilities, asked for with
each decision (`logprobs`, not for the probes): the probability of the route it named,
calibrated for the model (routing/stages/llm_confidence.py). Below `min_confidence` the
stage declines like the others (`outcome: "declined"`, the model's `answer`) and the part
goes on; a server that sends no logprobs gets a stated, uncalibrated value, said so.

What went wrong decides the default's reason: `llm_failed` (connection error, timeout,
HTTP error) or `llm_unusable` (no JSON, no source, an unknown source, a habit). An answer
of "none" ends the part unserved (`intent_default`, `reason: "unserved"`) with the model's
confidence and candidates. A call the request's deadline cuts off is still recorded
(`intent_llm`, `outcome: "timeout"`, `reason: "cancelled"`) before the cancel goes on. A fresh
decision is handed to the `DecisionMemory` it was given (routing/stages/memory.py), which
keeps it exactly and for paraphrases unless the query leans on the conversation; the
conversation's last turn comes from the `recall` it was given. The stage holds no other
stage's state.

The prompt and raw answer go into events only with `trace.capture_prompts: true`: they
can carry personal data. The API key is only ever in the Authorization header.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import httpx

from routing.chain.events import record
from routing.chain.steps import Step
from routing.stages.confidence import CANDIDATES_SHOWN, declined, load_model
from routing.stages.llm_confidence import Calibration, Stated, calibration_for, state
from routing.stages.llm_format import (
    Form,
    FormMemory,
    answer_schema,
    is_form_refusal,
    response_format,
)
from routing.types import Decision, ResolveContext
from sources.base import SourceError
from sources.http import read_prefix

if TYPE_CHECKING:
    from routing.config import LLMConfig
    from routing.stages.memory import DecisionMemory
    from routing.stages.sessions import Turn

Recall = Callable[[str | None], Awaitable["Turn | None"]]

NONE = "none"
# Enough for `{"source": "<name>"}` even wrapped in a sentence or a code fence; a model that
# rambles past it is cut off instead of spending the whole deadline.
MAX_TOKENS = 100
# The alternatives shown at each answer token (OpenAI allows up to 20): enough to see the
# other routes where the answer's name parts from them.
TOP_LOGPROBS = 10
# Queries with no content (as in "contextual calibration", Zhao et al. 2021): a route a
# model names for them is its bias, and the same name for a real query says nothing.
CONTENT_FREE = ("N/A", "", "[MASK]")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
# An answer is a route's name in a small object: more than this is no answer.
MAX_ANSWER_BYTES = 256 * 1024
MAX_OBJECT_STARTS = 16


class DuplicateKey(ValueError):
    """A JSON object of the answer names a key twice ({"source": "web", "source": "ha"})."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise DuplicateKey("a key named twice")
    return dict(pairs)


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


class LLMFailure(Exception):
    """The LLM gave no usable decision; `reason` is the default's reason code."""

    def __init__(
        self, reason: str, detail: str, raw: str | None = None, form: Form | None = None
    ) -> None:
        super().__init__(detail)
        self.reason = reason  # llm_failed | llm_unusable
        self.detail = detail
        self.raw = raw
        self.form = form  # the response_format of the last attempt, if one was made


@dataclass(frozen=True, slots=True)
class LLMAnswer:
    route: str | None  # None: the model said no source fits
    raw: str
    elapsed_ms: float
    form: Form = "prompt"  # how the answer was constrained
    usage: dict[str, Any] = field(default_factory=dict)  # what the server reported of itself
    logprobs: Any = None  # the choice's `logprobs` as the server sent it (None: none)


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text`, even inside prose or a ```json fence; looked for
    at the first MAX_OBJECT_STARTS braces only (each try may read to the text's end).
    `DuplicateKey` when the object names a key twice."""
    position = text.find("{")
    for _ in range(MAX_OBJECT_STARTS):
        if position < 0:
            break
        try:
            value, _ = _DECODER.raw_decode(text, position)
        except (json.JSONDecodeError, RecursionError):
            value = None
        if isinstance(value, dict):
            return value
        position = text.find("{", position + 1)
    return None


def build_messages(
    routes: dict[str, str], query: str, previous: tuple[str, str] | None = None
) -> list[dict[str, str]]:
    """The chat messages asking for one route; `previous` is (query, route) of the last turn.

    One user message holding the instructions and the query: a system message is not
    kept by every chat template, a user message is.
    """
    lines = [f"- {name}: {description or name}" for name, description in routes.items()]
    lines.append(
        f"- {NONE}: none of the above can answer it (alarms, timers, music, messages, "
        "calendars, small talk, arithmetic)."
    )
    names = ", ".join([*routes, NONE])
    instructions = (
        "You route search queries. Choose the ONE source below that can best answer the "
        "query.\n\nSources:\n" + "\n".join(lines) + "\n\n"
        'Reply with a JSON object and nothing else: {"source": "<name>"}, where <name> is '
        f"one of: {names}."
    )
    if previous is not None:
        query_lines = (
            f"Previous query (answered by {previous[1]}): {previous[0]}\n"
            f"Query (it may refer to the previous one): {query}"
        )
    else:
        query_lines = f"Query: {query}"
    return [{"role": "user", "content": instructions + "\n\n" + query_lines}]


def parse_answer(raw: str, routes: dict[str, str]) -> str | None:
    """The route the answer names (None for "none"); LLMFailure(llm_unusable) otherwise."""
    try:
        data = extract_json_object(raw)
    except DuplicateKey:  # which one it meant, and which one its logprobs measure, is unknown
        raise LLMFailure("llm_unusable", "the answer names a key twice", raw) from None
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


def server_usage(payload: Any) -> dict[str, Any]:
    """What the server said of its own work: `prompt_tokens` (OpenAI `usage`) and
    `server_ms` (llama.cpp's `timings`), where it said so."""
    found: dict[str, Any] = {}
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        found["prompt_tokens"] = usage["prompt_tokens"]
    timings = payload.get("timings") if isinstance(payload, dict) else None
    if isinstance(timings, dict):
        parts = [timings.get("prompt_ms"), timings.get("predicted_ms")]
        numbers = [p for p in parts if isinstance(p, int | float)]
        if len(numbers) == len(parts):
            found["server_ms"] = round(float(sum(numbers)), 3)
    return found


class LLMStage:
    """Fresh routing decisions from a chat model."""

    name = "intent_llm"

    def __init__(
        self,
        config: LLMConfig,
        routes: dict[str, str],
        *,
        capture_prompts: bool = False,
        memory: DecisionMemory | None = None,
        recall: Recall | None = None,
        min_confidence: float | None = None,
        calibration: Calibration | None | Literal["fitted"] = "fitted",
    ) -> None:
        """`memory`: where a fresh decision is kept (none: it is not); `recall`: a
        session's last turn, for a query that leans on it (none: asked on its own);
        `min_confidence`: below it the stage passes on (default: the fitted artefact's);
        `calibration`: the map of the raw probability (default: the model's fitted one)."""
        self.min_confidence = (
            load_model().min_confidence if min_confidence is None else min_confidence
        )
        self.calibration = calibration_for(config.model) if calibration == "fitted" else calibration
        self.config = config
        self.routes = routes
        self.capture_prompts = capture_prompts
        self.memory = memory
        self.recall = recall
        self.base_url = config.base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.forms = FormMemory()
        # base URL -> {content-free query: the route the model named (None: "none")}
        self._probes: dict[str, dict[str, str | None]] = {}
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

    def request_body(
        self,
        messages: list[dict[str, str]],
        form: Form,
        schema: dict[str, Any],
        *,
        logprobs: bool = True,
    ) -> dict[str, Any]:
        """The chat-completion body `ask` posts in `form` (`schema`: the answer's, from
        `answer_schema`); one place, so what measures the stage sends what it sends."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": MAX_TOKENS,
        }
        if logprobs and self.config.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = TOP_LOGPROBS
        constraint = response_format(form, schema)
        if constraint is not None:
            body["response_format"] = constraint
        return body

    async def ask(
        self,
        messages: list[dict[str, str]],
        deadline: float | None = None,
        *,
        logprobs: bool = True,
    ) -> LLMAnswer:
        """One chat completion -> the named route; LLMFailure on anything unusable.
        `logprobs`: ask for them (when configured); a probe, whose answer is only a name,
        does not pay for them.

        Asks in the form this server accepted before (the first form for a new server);
        a refused form is recorded (`llm_format_refused`) and the next one tried at once,
        all before `deadline` (loop time; default `timeout_s` from now).
        """
        await self.start()
        assert self._client is not None
        schema = answer_schema([*self.routes, NONE])
        form = self.forms.first(self.base_url)
        started = time.perf_counter()
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + self.config.timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    body = self.request_body(messages, form, schema, logprobs=logprobs)
                    async with self._client.stream("POST", self.url, json=body) as response:
                        content = await read_prefix(
                            response, "the LLM server", MAX_ANSWER_BYTES + 1
                        )
                    following = self.forms.after(form)
                    if (
                        following is None
                        or response.status_code == 200
                        or not is_form_refusal(
                            response.status_code, content[:4000].decode("utf-8", "replace")
                        )
                    ):
                        break
                    record(
                        Step.LLM_FORMAT_REFUSED,
                        response_format=form,
                        status=response.status_code,
                        next=following,
                    )
                    form = following
        except (TimeoutError, httpx.TimeoutException):
            raise LLMFailure(
                "llm_failed", f"no answer within {self.config.timeout_s:g}s", form=form
            ) from None
        except (httpx.HTTPError, SourceError) as exc:
            raise LLMFailure(
                "llm_failed", f"request failed: {type(exc).__name__}", form=form
            ) from None
        elapsed_ms = round((time.perf_counter() - started) * 1000.0, 3)
        if response.status_code != 200:
            raise LLMFailure(
                "llm_failed", f"HTTP {response.status_code} from the LLM server", form=form
            )
        self.forms.accepted(self.base_url, form)
        if len(content) > MAX_ANSWER_BYTES:  # read no further: a route's name is a few bytes
            raise LLMFailure(
                "llm_unusable", f"the answer is over {MAX_ANSWER_BYTES:,} bytes", form=form
            )
        try:
            payload = json.loads(content)
            raw = payload["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):
            raise LLMFailure("llm_unusable", "not a chat-completions response", form=form) from None
        if not isinstance(raw, str):
            raise LLMFailure("llm_unusable", "the answer has no text content", form=form)
        try:
            route = parse_answer(raw, self.routes)
        except LLMFailure as failure:
            failure.form = form
            raise
        choice = payload["choices"][0]
        sent = choice.get("logprobs") if isinstance(choice, dict) else None
        return LLMAnswer(route, raw, elapsed_ms, form, server_usage(payload), sent)

    async def _previous(self, context: ResolveContext) -> tuple[str, str] | None:
        if context.discourse is None or self.recall is None:
            return None
        turn = await self.recall(context.session_id)
        return (turn.query, turn.route) if turn is not None else None

    async def _habits(self, deadline: float) -> frozenset[str]:
        """The routes this model names for queries with no content, asked once per server
        (empty for a model that answers "none" to them, as one that reads the query does).
        A route named for "N/A" is the model's habit, not a reading of the query. Each
        answer is kept as it arrives, so a slow model's probes finish over several
        decisions rather than starting again in each."""
        answered = self._probes.setdefault(self.base_url, {})
        for query in CONTENT_FREE:
            if query in answered:
                continue
            try:
                answer = await self.ask(
                    build_messages(self.routes, query), deadline, logprobs=False
                )
            except LLMFailure as failure:
                if failure.reason != "llm_unusable":
                    raise  # no answer (timeout, HTTP error): asked again next time
                # An answer that names no route shows no habit either.
                record(
                    Step.LLM_BIAS_PROBE,
                    probe=query,
                    answer=None,
                    detail=failure.detail,
                    response_format=failure.form,
                )
                answered[query] = None
                continue
            record(
                Step.LLM_BIAS_PROBE,
                probe=query,
                answer=answer.route or NONE,
                response_format=answer.form,
            )
            answered[query] = answer.route
        return frozenset(route for route in answered.values() if route is not None)

    async def _consult(
        self, query: str, context: ResolveContext, escalated: bool
    ) -> tuple[LLMAnswer, Stated] | None:
        """Ask, recording the outcome; None when the LLM failed or was unsure (event
        recorded)."""
        messages = build_messages(self.routes, query, await self._previous(context))
        started = time.perf_counter()
        # One deadline for the whole decision, the first request's probes included.
        deadline = asyncio.get_running_loop().time() + self.config.timeout_s
        habits: frozenset[str] = frozenset()
        try:
            if self.config.bias_check:
                habits = await self._habits(deadline)
            answer = await self.ask(messages, deadline)
        except asyncio.CancelledError:
            # The request ended around the call (its deadline passed): the chain still
            # shows the call that was cut off, and for how long it had run.
            self._record_cut_off(query, escalated, started)
            raise
        except LLMFailure as failure:
            fields: dict[str, Any] = {}
            if failure.form is not None:
                fields["response_format"] = failure.form
            if self.capture_prompts:
                fields.update(prompt=messages, raw_answer=failure.raw)
            record(
                Step.LLM_ERROR,
                query=query,
                reason=failure.reason,
                detail=failure.detail,
                discourse_escalated=escalated,
                **fields,
            )
            context.default_reason = failure.reason
            return None
        elapsed_ms = round((time.perf_counter() - started) * 1000.0, 3)
        fields = {
            "model": self.config.model,
            "elapsed_ms": elapsed_ms,
            "response_format": answer.form,
            **answer.usage,
        }
        if self.capture_prompts:
            fields.update(prompt=messages, raw_answer=answer.raw)
        if answer.route is not None and answer.route in habits:
            record(
                Step.LLM_ERROR,
                query=query,
                reason="llm_unusable",
                detail=f"the model names {answer.route} even for a query with no "
                "content: that answer says nothing about this query",
                discourse_escalated=escalated,
                answer=answer.route,
                habits=sorted(habits),
                **fields,
            )
            context.default_reason = "llm_unusable"
            return None
        named = answer.route or NONE
        stated = state(answer.logprobs, named, [*self.routes, NONE], self.calibration)
        if stated.confidence < self.min_confidence:
            # The model named it, but not surely enough: the stages after it (or the
            # default) decide, as after any unsure stage.
            record(
                Step.INTENT_LLM,
                query=query,
                decision=None,
                discourse_escalated=escalated,
                matched=False,
                outcome="declined",
                answer=named,
                declined=declined("llm", stated.ranked, self.min_confidence),
                **stated.fields(),
                **fields,
            )
            context.ranked = stated.ranked
            context.default_reason = "low_confidence"
            return None
        unserved = {"outcome": "no_source"} if answer.route is None else {}
        record(
            Step.INTENT_LLM,
            query=query,
            decision=answer.route,
            discourse_escalated=escalated,
            matched=answer.route is not None,
            **unserved,
            **stated.fields(),
            **fields,
        )
        return answer, stated

    def _record_cut_off(self, query: str, escalated: bool, started: float) -> None:
        """`intent_llm` for a call the request's end cancelled, as the dispatcher records
        a source call cut off (`outcome: "timeout"`, `reason: "cancelled"`). The model
        stated nothing: confidence 0 and no candidates, said so (`confidence_source`)."""
        record(
            Step.INTENT_LLM,
            query=query,
            decision=None,
            discourse_escalated=escalated,
            matched=False,
            outcome="timeout",
            reason="cancelled",
            message="the LLM had not answered when the request ended",
            confidence=0.0,
            candidates=[],
            confidence_source="none",
            calibrated=False,
            confidence_detail="no answer: the request ended first",
            model=self.config.model,
            elapsed_ms=round((time.perf_counter() - started) * 1000.0, 3),
        )

    async def decide(self, query: str, context: ResolveContext) -> Decision | None:
        if context.unserved:
            return None
        consulted = await self._consult(query, context, escalated=False)
        if consulted is None:
            return None
        answer, stated = consulted
        if answer.route is None:
            # The default says so with the LLM's statement ("none" at its confidence, and
            # what it beat), not the figures of a stage that declined before it.
            context.unserved = True
            context.ranked = stated.ranked
            context.default_reason = "no_match"
            return None
        if self.memory is not None:
            await self.memory.keep(
                query,
                answer.route,
                self.name,
                stated.confidence,
                context,
                stated.ranked.routes[:CANDIDATES_SHOWN],
            )
        return self._decision(answer, stated)

    def _decision(self, answer: LLMAnswer, stated: Stated) -> Decision:
        """The LLM's decision; not `confident` when its logprobs measured nothing (the
        confidence is then a stated value): the route still answers a question, but no
        command is carried out on it."""
        return Decision(
            answer.route,
            self.name,
            confidence=stated.confidence,
            ranked=stated.ranked,
            confident=stated.source != "none",
        )

    async def escalate(
        self, query: str, context: ResolveContext, keyword_route: str
    ) -> Decision | None:
        """A keyword matched a discourse-dependent query: let the LLM (with context) decide;
        when it fails, is unsure or names no source, the keyword's decision stands."""
        consulted = await self._consult(query, context, escalated=True)
        if consulted is None or consulted[0].route is None:
            return None
        answer, stated = consulted
        return self._decision(answer, stated)
