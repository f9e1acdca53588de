"""Exception text made safe to show: configured secrets and URL credentials removed.

An exception's message is whatever the code that raised it put there: a driver quoting
the URL it dialled (`redis://:hunter2@cache`), an HTTP client quoting a request with its
`?apikey=`, a source echoing its token. Such text reaches the response, the explanation
chain, the trace store and the server log; every secret the config holds (each
`SecretStr` value, each password inside a configured URL) and every `user:password@` in
a URL is replaced by `***` first.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, SecretStr

MASK = "***"
# scheme://user:password@ or scheme://token@ (a URL's userinfo), up to the '@'.
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@]+@")
MIN_SECRET_CHARS = 4  # shorter values would mask ordinary words


def config_secrets(value: Any) -> Iterator[str]:
    """Every secret in a config tree: SecretStr values and passwords inside URLs."""
    if isinstance(value, SecretStr):
        secret = value.get_secret_value()
        yield secret
        yield from _url_password(secret)
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from config_secrets(getattr(value, name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from config_secrets(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from config_secrets(item)
    elif value is not None and "://" in str(value) and "@" in str(value):
        yield from _url_password(str(value))  # e.g. an HttpUrl with user:password@


def _url_password(text: str) -> Iterator[str]:
    try:
        parts = urlsplit(text)
    except ValueError:
        return
    if parts.password:
        yield parts.password


class Scrubber:
    """Masks the given secrets and any URL credentials in text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        unique = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        self._secrets = re.compile("|".join(map(re.escape, unique))) if unique else None

    @classmethod
    def from_config(cls, config: BaseModel) -> Scrubber:
        return cls(config_secrets(config))

    def text(self, text: str) -> str:
        if self._secrets is not None:
            text = self._secrets.sub(MASK, text)
        if "@" in text:
            text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + MASK + "@", text)
        return text

    def error(self, error: dict[str, Any] | None) -> dict[str, Any] | None:
        """A `{"type", "message"}` error with its message scrubbed (a new dict)."""
        if not error or not isinstance(error.get("message"), str):
            return error
        return {**error, "message": self.text(error["message"])}

    def exception(self, exc: BaseException) -> str:
        """The exception with its traceback, as the server log gets it."""
        return self.text("".join(traceback.format_exception(exc)).rstrip())

    def __repr__(self) -> str:
        return "Scrubber(<secrets>)"
