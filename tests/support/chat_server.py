"""A loopback server speaking the OpenAI chat-completions wire format, for the LLM stage.

No LLM runs on the test machine, so this server answers `POST /v1/chat/completions`
exactly as the OpenAI API reference documents it (and as Ollama, llama.cpp's server and
vLLM reproduce it): it validates the request body (`model`, a non-empty `messages` list of
`{role, content}`), checks `Authorization: Bearer <key>` when given a key, and answers
with a `chat.completion` object (`id`, `object`, `created`, `model`, `choices[].message`
with `role: assistant` and `content`, `finish_reason`, `usage`). Errors use OpenAI's
error body `{"error": {"message", "type", "param", "code"}}` with the documented statuses
(400 invalid request, 401 bad key, 500 server error).

`response_format` is checked against `accepts` (the `type`s this server takes; all of
them by default, as OpenAI and vLLM do). A `type` outside it is refused the way a real
server refuses it. While `json_object` is accepted, as llama-cpp-python's server does:
with `refusal_status` 500 (what 0.3.36 sends: its pydantic error inside an OpenAI error
body, `type: internal_server_error`) or 422 (FastAPI's own body, `{"detail": [{"loc":
["body", "response_format", "type"], "msg": "Input should be 'text' or 'json_object'"}]}`,
as other releases send). Otherwise with OpenAI's 400 (`param: "response_format"`), as a
server with no JSON mode answers.

What the "model" says is scripted: `reply` (a fixed string) or `responder` (a function of
the request's messages). To the LLM stage's content-free probes (the queries "N/A", ""
and "[MASK]") it says `content_free_reply`, by default `{"source": "none"}`, as a model
that reads the query does; a test sets it to a route to play a model with a habit. Faults (slow answers, HTTP errors, a body that is not JSON) come
from `WireServer`; every request body is kept in `bodies` for assertions.

Asked for `logprobs: true` (with `top_logprobs: k`), it answers as OpenAI documents:
`choices[0].logprobs = {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
"logprob", "bytes"}]}]}`, the tokens spelling the content exactly. The content is cut into
words and punctuation; the answer's route name into pieces of `name_piece` characters
(0: one token). At the name's first token the alternatives are `route_logprobs` (route ->
log-probability, each route spelt by its own first piece), the named route's own entry its
token's log-probability; by default the named route at log 0.9 and a token that spells no
route (` the`) at log 0.05. Every other token is near certain (log 0.999). `logprobs_mode`
plays other servers: "absent" sends `logprobs: null` although asked (a server without
them), "malformed" sends `{"content": "n/a"}`.

    with ChatServer(reply='{"source": "web"}', api_key="sk-test") as srv:
        ... LLMConfig(base_url=srv.base_url, model="test", api_key="sk-test") ...
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections.abc import Callable
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.wire_servers import WireServer

Responder = Callable[[list[dict[str, Any]]], str]
ALL_FORMATS = frozenset({"text", "json_object", "json_schema"})
CONTENT_FREE = frozenset({"N/A", "", "[MASK]"})
_IDS = itertools.count(1)


def openai_error(status: int, message: str, kind: str, code: str | None = None) -> JSONResponse:
    """An error body in the shape the OpenAI API documents."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


class ChatServer(WireServer):
    """`POST /v1/chat/completions` with a scripted assistant."""

    def __init__(
        self,
        reply: str = '{"source": "kiwix"}',
        *,
        responder: Responder | None = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__()
        self.reply = reply
        self.responder = responder
        self.api_key = api_key
        self.content_free_reply = '{"source": "none"}'
        self.accepts: set[str] = set(ALL_FORMATS)
        self.refusal_status = 500
        self.bodies: list[dict[str, Any]] = []  # accepted requests only
        self.refused: list[dict[str, Any]] = []  # requests refused for their response_format
        self.rejected = 0  # requests refused for a missing or wrong key
        self.logprobs_mode: Literal["tokens", "absent", "malformed"] = "tokens"
        self.route_logprobs: dict[str, float] | None = None
        self.name_piece = 0

    @property
    def base_url(self) -> str:
        """What a client configures as `base_url` (the API root, with its version)."""
        return f"{self.url}/v1"

    def routes(self) -> list[Route]:
        return [Route("/v1/chat/completions", self._completions, methods=["POST"])]

    def error_response(self, status: int) -> Response:
        kinds = {
            400: "invalid_request_error",
            401: "invalid_request_error",
            429: "rate_limit_error",
            503: "server_error",
        }
        return openai_error(
            status, f"The server had an error ({status}).", kinds.get(status, "server_error")
        )

    async def _completions(self, request: Request) -> Response:
        expected = f"Bearer {self.api_key}"
        if self.api_key is not None and request.headers.get("authorization") != expected:
            self.rejected += 1
            return openai_error(
                401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
            )
        try:
            body = json.loads(await request.body())
        except ValueError:
            return openai_error(
                400, "We could not parse the JSON body of your request.", "invalid_request_error"
            )
        problem = _invalid(body)
        if problem:
            return openai_error(400, problem, "invalid_request_error")
        refusal = self._refuse_format(body.get("response_format"))
        if refusal is not None:
            self.refused.append(body)
            return refusal
        self.bodies.append(body)

        def answer(_: Request, shape: Literal["ok", "empty", "wrong_shape"]) -> Response:
            if shape == "wrong_shape":
                return JSONResponse({"object": "chat.completion", "choices": "none"})
            content = "" if shape == "empty" else self._content(body["messages"])
            completion = _completion(body["model"], content)
            if body.get("logprobs") is True:
                completion["choices"][0]["logprobs"] = self._logprobs(
                    content, int(body.get("top_logprobs") or 0)
                )
            return JSONResponse(completion)

        return await self.serve(request, answer)

    def _refuse_format(self, value: Any) -> Response | None:
        """The refusal a real server sends for a `response_format` it does not take."""
        if value is None:
            return None
        kind = value.get("type") if isinstance(value, dict) else None
        if kind in self.accepts:
            return None
        if "json_object" in self.accepts:  # llama-cpp-python: a pydantic literal error
            allowed = " or ".join(f"'{k}'" for k in ("text", "json_object") if k in self.accepts)
            detail = {
                "type": "literal_error",
                "loc": ["body", "response_format", "type"],
                "msg": f"Input should be {allowed}",
                "input": kind,
                "ctx": {"expected": allowed},
            }
            if self.refusal_status == 422:
                return JSONResponse({"detail": [detail]}, status_code=422)
            message = (
                f'1 validation error:\n  {detail!r}\n\n  File "llama_cpp/server/'
                'app.py", line 376, in create_chat_completion\n    POST '
                "/v1/chat/completions"
            )
            return openai_error(self.refusal_status, message, "internal_server_error")
        body = {
            "error": {
                "message": f"Invalid value for 'response_format': {kind!r} is "
                "not supported with this model.",
                "type": "invalid_request_error",
                "param": "response_format",
                "code": None,
            }
        }
        return JSONResponse(body, status_code=400)

    def _content(self, messages: list[dict[str, Any]]) -> str:
        last = messages[-1].get("content", "")
        if isinstance(last, str) and last.rpartition("Query: ")[2] in CONTENT_FREE:
            return self.content_free_reply
        if self.responder is not None:
            return self.responder(messages)
        return self.reply

    def _logprobs(self, content: str, top: int) -> Any:
        """The `logprobs` of an answer, in the shape OpenAI documents (or a broken one)."""
        if self.logprobs_mode == "absent":
            return None
        if self.logprobs_mode == "malformed":
            return {"content": "n/a"}
        value = _VALUE.search(content)
        tokens: list[tuple[str, float, list[tuple[str, float]]]] = []
        if value is None:
            pieces = [(t, _SURE) for t in _WORDS.findall(content)]
            return {"content": [_entry(t, lp, [(t, lp)], top) for t, lp in pieces]}
        start, end = value.span(1)
        name = content[start:end]
        size = self.name_piece or max(1, len(name))
        name_tokens = [name[i : i + size] for i in range(0, len(name), size)]
        first = self.route_logprobs or {name: math.log(0.9), " the": math.log(0.05)}
        for word in _WORDS.findall(content[:start]):
            tokens.append((word, _SURE, [(word, _SURE)]))
        for index, piece in enumerate(name_tokens):
            if index == 0:
                alternatives = [
                    (route[:size] if route != " the" else route, lp) for route, lp in first.items()
                ]
                own = dict(alternatives).get(piece, math.log(0.9))
                tokens.append((piece, own, sorted(alternatives, key=lambda a: -a[1])))
            else:
                tokens.append((piece, _SURE, [(piece, _SURE), ("zz", math.log(0.001))]))
        for word in _WORDS.findall(content[end:]):
            tokens.append((word, _SURE, [(word, _SURE)]))
        return {"content": [_entry(t, lp, alts, top) for t, lp, alts in tokens]}


_SURE = math.log(0.999)
_WORDS = re.compile(r"\w+|\s+|[^\w\s]+")
_VALUE = re.compile(r'"source"\s*:\s*"([^"]*)"')


def _entry(
    token: str, logprob: float, alternatives: list[tuple[str, float]], top: int
) -> dict[str, Any]:
    def one(text: str, lp: float) -> dict[str, Any]:
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

    return {**one(token, logprob), "top_logprobs": [one(t, lp) for t, lp in alternatives[:top]]}


def _invalid(body: Any) -> str | None:
    """What is wrong with a request body, the way the API words it; None when valid."""
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in {
            "system",
            "user",
            "assistant",
            "developer",
            "tool",
        }:
            return f"Invalid value for 'messages[{index}].role'."
        if not isinstance(message.get("content"), str):
            return f"Invalid type for 'messages[{index}].content': expected a string."
    return None


def _completion(model: str, content: str) -> dict[str, Any]:
    prompt_tokens, completion_tokens = 42, max(1, len(content) // 4)
    return {
        "id": f"chatcmpl-{next(_IDS):06d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
