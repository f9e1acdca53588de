"""The one interface every source implements, and the typed failures it may raise.

Modelled on httpx's transport interface: a source is a small object with a name, a
per-source timeout and one async method, `search`, which only ever reads. Everything else
(caching, timing, fallback, fusion, event recording) lives in `routing.dispatch.dispatcher`, so a
source never records events and never needs to know about the explanation chain.

Changing the world is a different operation: an `ActingSource` (Home Assistant) also
reads a `Command` out of a query and carries it out with `act`. Only the dispatcher's
control gate calls `act`, so there is one place that decides whether a command runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class Item:
    """One answer from a source: at least a title and a text, and a url when it has one."""

    title: str
    text: str
    url: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.url is None:
            return {"title": self.title, "text": self.text}
        return {"title": self.title, "text": self.text, "url": self.url}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Item:
        """An item back from its `to_dict` form (the shared result cache, a stored capture)."""
        url = data.get("url")
        return cls(str(data["title"]), str(data["text"]), None if url is None else str(url))


@dataclass(frozen=True, slots=True)
class Unchanged(Item):
    """An act's item about something it left as it was, and why (`reason`): "ambiguous"
    (the command could mean several devices; none was guessed), "no_change" (the device
    was called and reported no change). An act answering only these changed nothing."""

    reason: str = ""


class SourceError(Exception):
    """A source call failed in a way the fallback chain understands.

    `reason` is a stable, machine-readable code that ends up in `fallback` and
    `source_invoked` events; the message is for humans and must never contain secrets.
    """

    reason: ClassVar[str] = "error"


class SourceUnavailable(SourceError):
    """The source could not be reached (connection refused, DNS, reset)."""

    reason = "connection_refused"


class SourceTimeout(SourceError):
    """The source did not answer within its timeout."""

    reason = "timeout"


class SourceUnauthorized(SourceError):
    """The source rejected our credentials (401/403)."""

    reason = "unauthorized"


class SourceServerError(SourceError):
    """The source answered with a 5xx."""

    reason = "server_error"


class SourceBadResponse(SourceError):
    """The source answered, but the body was not what its wire format promises."""

    reason = "malformed_response"


class SourceRateLimited(SourceError):
    """The source answered 429: too many requests."""

    reason = "rate_limited"


class SourceDisabled(SourceError):
    """The source is configured but switched off (`enabled: false`)."""

    reason = "disabled"


class ControlNotAllowed(SourceError):
    """An acting source was asked to act while its config does not allow control."""

    reason = "not_allowed"


@dataclass(frozen=True, slots=True)
class Command:
    """A state change a query asks for, read from its words before anything is called.

    `action` is in the source's own vocabulary ("unlock", "on"); `target` is what the
    query aims it at, as worded; `query` is the text it was read from, which `act` parses
    again to find the devices. `recognized` is what the source's own understanding of the
    sentence made of it once the gate let it through (`ActingSource.recognize`), or None.
    """

    action: str
    target: str
    query: str
    recognized: dict[str, Any] | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, str]:
        return {"action": self.action, "target": self.target}

    def describe(self) -> str:
        """The command as it is said: "on"/"off" are particles ("turn on the bed light")."""
        verb = f"turn {self.action}" if self.action in ("on", "off") else self.action
        return f"{verb} {self.target}"


class Source(ABC):
    """A place that can answer a query. Subclasses implement `search`.

    `search` returns an empty list when the source answered but found nothing; it raises
    a `SourceError` for every failure it can name. Any other exception is treated as an
    error by the dispatcher as well, but loses its typed reason.
    """

    kind: ClassVar[str] = "source"

    def __init__(self, name: str, timeout_s: float = 5.0) -> None:
        self.name = name
        self.timeout_s = timeout_s

    @abstractmethod
    async def search(self, query: str) -> list[Item]:
        """Answer `query`; [] when nothing was found."""

    def command(self, query: str) -> Command | None:
        """The state change `query` asks of this source, or None for a question.

        Pure (reads the words, calls nothing), so a dry run, a replay or a withheld command
        can say what would have happened. A source that cannot act never has one.
        """
        return None

    async def start(self) -> None:
        """Open pooled clients or files. Called once, in the app's lifespan."""

    async def aclose(self) -> None:
        """Release what `start` opened. Called once on shutdown."""

    async def info(self) -> dict[str, Any]:
        """Facts for `/healthz` and `search doctor`: at least `type`; `version` when the
        service reports one; `error` (a `SourceError.reason`) when asking it failed.

        Cheap (one small request at most) and never raises for a source that is down.
        Must not contain secrets: it is served to anyone who can reach `/healthz`.
        """
        return {"type": self.kind}


class ActingSource(Source):
    """A source that can also change state. `search` still only reads; `act` acts.

    `allow_control` is the user's switch (config); the control gate checks it before
    calling `act`, and `act` refuses again on its own (`ControlNotAllowed`) should anything
    else ever reach it.
    """

    allow_control: bool = False

    @abstractmethod
    def command(self, query: str) -> Command | None:
        """The state change `query` asks for, or None."""

    async def recognize(self, command: Command) -> Command:
        """`command` with what the source itself understands of it (`recognized`), asked
        only after the control gate let it through, and read-only: nothing is carried out.
        Sources without their own understanding return it as it is."""
        return command

    async def unplaced(self, command: Command) -> tuple[str, ...]:
        """Words of the command's target that name none of the devices it would change
        ("seven" in "turn on the bed light at seven"), asked after `recognize` and as
        read-only. Any makes the gate withhold the command: a device matched on some of
        the words is a guess. Sources that match no names return ()."""
        return ()

    @abstractmethod
    async def act(self, command: Command) -> list[Item]:
        """Carry `command` out; an item per device it reached, saying what it did."""
