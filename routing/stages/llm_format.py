"""How the LLM stage asks a server to constrain its answer to the routes, negotiated once.

A small model left free echoes the question or writes prose; constrained by a JSON schema
whose `enum` is the configured routes (plus "none"), it can only name a route. Servers
spell that constraint differently:

- `json_schema`: `{"type": "json_schema", "json_schema": {"name", "strict", "schema"}}`,
  the OpenAI form, also taken by vLLM, Ollama (0.5+) and llama.cpp's own `llama-server`;
- `json_object`: `{"type": "json_object", "schema": {...}}`, what llama-cpp-python's
  server takes (it refuses the first form: "Input should be 'text' or 'json_object'",
  with 422 in some releases and, in 0.3.36, with a 500 carrying that validation error);
- `prompt`: no `response_format` at all; the prompt alone asks for the JSON.

`FormMemory` tries them in that order. A 400, 422 or 500 whose body names `response_format`
means "not this form": the next one is tried at once, and the form that was accepted is
remembered per base URL, so the refusals are paid once per server per process (a restart
negotiates again, so a server upgraded to take the standard form gets it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

Form = Literal["json_schema", "json_object", "prompt"]
FORMS: tuple[Form, ...] = ("json_schema", "json_object", "prompt")
# 500 too: llama-cpp-python 0.3.36 reports request-validation errors as 500 (the body still
# names the field); a 500 that does not name `response_format` stays a failure.
REFUSAL_STATUSES = frozenset({400, 422, 500})


def answer_schema(names: Iterable[str]) -> dict[str, Any]:
    """The JSON schema of an answer: `{"source": <one of names>}` and nothing else."""
    return {
        "type": "object",
        "properties": {"source": {"type": "string", "enum": list(names)}},
        "required": ["source"],
        "additionalProperties": False,
    }


def response_format(form: Form, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The request's `response_format` for `form` (None: send none)."""
    if form == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": "route", "strict": True, "schema": schema},
        }
    if form == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


def is_form_refusal(status: int, body: str) -> bool:
    """Whether an error answer refuses the `response_format` (rather than failing)."""
    return status in REFUSAL_STATUSES and "response_format" in body


class FormMemory:
    """The form each server (by base URL) accepted; unknown servers start at the first."""

    def __init__(self) -> None:
        self._accepted: dict[str, Form] = {}

    def first(self, base_url: str) -> Form:
        """The form to try first for this server."""
        return self._accepted.get(base_url, FORMS[0])

    @staticmethod
    def after(form: Form) -> Form | None:
        """The form to try once `form` was refused (None after the last)."""
        index = FORMS.index(form)
        return FORMS[index + 1] if index + 1 < len(FORMS) else None

    def accepted(self, base_url: str, form: Form) -> None:
        self._accepted[base_url] = form

    def known(self, base_url: str) -> Form | None:
        """The remembered form, or None before the first answer from this server."""
        return self._accepted.get(base_url)
