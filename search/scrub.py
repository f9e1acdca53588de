"""Exception text made safe to show: configured secrets and URL credentials removed.

An exception's message is whatever the code that raised it put there: a driver quoting
the URL it dialled (`redis://:hunter2@cache`), an HTTP client quoting a request with its
`?apikey=`, a source echoing its token or its whole `Authorization` header. Such text
reaches the response, the explanation chain, the trace store and the server log; every
secret the config holds (each `SecretStr` value, each password inside a configured URL
and the Basic-auth encoding an HTTP client sends for that URL's credentials), every
`user:password@` in a URL and every `Basic`/`Bearer` credential is replaced by `***`
first. The text is then cut to a fixed length: a source's message is whatever its
backend sent, and a megabyte of it must not travel into every chain and stored trace.
"""

from __future__ import annotations

import base64
import binascii
import re
import traceback
from collections.abc import Iterable, Iterator
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, SecretStr

from search.terminal import escape_controls
from sources.http import SHOWN_CUT

MASK = "***"
# scheme://user:password@ or scheme://token@ (a URL's userinfo), up to the '@'. The
# scheme starts where a run of scheme characters starts (not at any `\b`), so a long run
# like `a.a.a.…` is scanned once, not once per position.
_URL_CREDENTIALS = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://)[^\s/?#@]+@")
# An HTTP credential quoted with its scheme, e.g. an echoed `Authorization` header.
_BASIC = re.compile(r"(?<![A-Za-z0-9])((?i:basic)\s+)([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])")
_BEARER = re.compile(r"(?<![A-Za-z0-9])((?i:bearer)\s+)([A-Za-z0-9._~+/-]{8,}=*)")
# A token has a digit, one of these marks or an inner dot (a JWT); an English word none.
_TOKEN_MARK = re.compile(r"[0-9_~+/-]|\.[A-Za-z0-9]")
MIN_SECRET_CHARS = 4  # shorter values would mask ordinary words
MAX_TEXT_CHARS: Final = 500  # a message, as the response, chain and trace store get it
MAX_LOG_CHARS: Final = 20_000  # an exception with its traceback, as the log gets it
CUT_MARK: Final = "…[cut]"
# How far past the shown part the credential patterns still look: a credential that
# starts in the shown part is masked whole, not cut off where the patterns stopped.
SCAN_MARGIN_CHARS: Final = 64 * 1024


def config_secrets(value: Any) -> Iterator[str]:
    """Every secret in a config tree: SecretStr values, and the credentials in URLs."""
    if isinstance(value, SecretStr):
        secret = value.get_secret_value()
        yield secret
        yield from _url_secrets(secret)
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
        yield from _url_secrets(str(value))  # e.g. an HttpUrl with user:password@


def _url_secrets(text: str) -> Iterator[str]:
    """A URL's password, as written and percent-decoded, and the Basic-auth encodings of
    its `user:password`: an HTTP client sends those, and a backend may echo them back."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return
    user, password = parts.username or "", parts.password or ""
    if not user and not password:
        return
    for form in {password, unquote(password)}:
        if form:
            yield form
    for userinfo in {f"{user}:{password}", f"{unquote(user)}:{unquote(password)}"}:
        yield from basic_encodings(userinfo)


def basic_encodings(userinfo: str) -> set[str]:
    """`user:password` as a Basic `Authorization` header carries it: standard base64 of
    its UTF-8 and the URL-safe variant, each padded and not (a server may drop the `=`)."""
    raw = userinfo.encode("utf-8")
    encoded = {base64.b64encode(raw).decode("ascii"), base64.urlsafe_b64encode(raw).decode("ascii")}
    return encoded | {e.rstrip("=") for e in encoded}


def _masked_basic(match: re.Match[str]) -> str:
    """`Basic <value>` masked when the value decodes to `user:password` (so `basic auth`
    or `Basic information` in ordinary text stays as it is)."""
    value = match.group(2)
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return match.group(0)
    return match.group(1) + MASK if b":" in decoded else match.group(0)


def _masked_bearer(match: re.Match[str]) -> str:
    """`Bearer <token>` masked when the value looks like a token, not a word."""
    if _TOKEN_MARK.search(match.group(2)) is None:
        return match.group(0)
    return match.group(1) + MASK


def cut(text: str, limit: int) -> str:
    """`text` kept to `limit` characters, marked where it was cut."""
    return text if len(text) <= limit else text[:limit] + CUT_MARK


class Scrubber:
    """Masks the given secrets, URL credentials and HTTP credentials in text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        unique = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        self._secrets = re.compile("|".join(map(re.escape, unique))) if unique else None
        self._unique = unique

    @classmethod
    def from_config(cls, config: BaseModel) -> Scrubber:
        return cls(config_secrets(config))

    def text(self, text: str) -> str:
        """A message, masked and cut to MAX_TEXT_CHARS."""
        return self._shown(text, MAX_TEXT_CHARS)

    def error(self, error: dict[str, Any] | None) -> dict[str, Any] | None:
        """A `{"type", "message"}` error with its message scrubbed (a new dict)."""
        if not error or not isinstance(error.get("message"), str):
            return error
        return {**error, "message": self.text(error["message"])}

    def exception(self, exc: BaseException) -> str:
        """The exception with its traceback, as the server log gets it (cut to
        MAX_LOG_CHARS: longer than a message, so the frames survive). A source's message
        is anyone's text: its control and bidi characters are written as escapes, so a
        terminal tailing the log shows them instead of obeying them."""
        shown = self._shown("".join(traceback.format_exception(exc)).rstrip(), MAX_LOG_CHARS)
        return escape_controls(shown, keep="\n\t")

    def _shown(self, text: str, limit: int) -> str:
        """`text` masked, then cut to `limit`. The configured secrets are masked in all of
        it before any cut (a cut could split one and leave its start unmasked); the
        patterns, which cost more, look at what can be shown and a wide margin only."""
        if self._secrets is not None:
            text = self._secrets.sub(MASK, text)
            text = self._cut_off(text)
        longer = len(text) > limit + SCAN_MARGIN_CHARS
        text = text[: limit + SCAN_MARGIN_CHARS]
        if "asic" in text or "ASIC" in text:
            text = _BASIC.sub(_masked_basic, text)
        if "earer" in text or "EARER" in text:
            text = _BEARER.sub(_masked_bearer, text)
        if "@" in text:
            text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + MASK + "@", text)
        return text[:limit] + CUT_MARK if longer else cut(text, limit)

    def _cut_off(self, text: str) -> str:
        """The start of a secret that a source cut its backend's text in (`http.shown`
        marks the cut with SHOWN_CUT) or that ends the text, masked: the whole secret is
        no longer there to be found, and most of it would go out."""
        cuts = [m.start() for m in re.finditer(SHOWN_CUT, text)]
        for end in reversed([*cuts, len(text)]):
            length = self._secret_start_before(text, end)
            if length:
                text = text[: end - length] + MASK + text[end:]
        return text

    def _secret_start_before(self, text: str, end: int) -> int:
        """How many characters before `end` begin a secret (at least MIN_SECRET_CHARS;
        0 when none do)."""
        for secret in self._unique:
            for length in range(min(len(secret) - 1, end), MIN_SECRET_CHARS - 1, -1):
                if text.startswith(secret[:length], end - length):
                    return length
        return 0

    def __repr__(self) -> str:
        return "Scrubber(<secrets>)"
