"""A question whose answer changes with time goes to a live source, not a snapshot.

An offline encyclopedia answers "who is the current mayor" with whoever it was when the
snapshot was taken, and confidently. When the intent stages route such a part to a
snapshot route (`routing.time_sensitive.from_routes`, kiwix) and a live source is
configured (`live_route`, web), the part goes there, with the snapshot as its fallback.
When that source is disabled the part is still routed there, like any part a stage
routes to it, and the snapshot answers after it; with no live source configured the
snapshot is the route. Then the chain says the snapshot's answer may be out of date.
Either way `time_sensitive` is recorded here, where the choice is made.

Only a question a stage judged encyclopedic is redirected: a part that ended at the
default (nothing judged it) keeps the default, a part the household labelled keeps the
route of its label (the household said where these words go), and a part any source
reads as a command ("turn the lights off now") keeps its route, so time words never move
a command.
"""

from __future__ import annotations

from dataclasses import dataclass

from routing.chain.events import record
from routing.chain.steps import Step
from routing.config import TimeSensitiveConfig
from routing.dispatch.dispatcher import Dispatcher
from routing.language.time_sensitive import time_cue

DEFAULT = "intent_default"  # the stage that decided nothing
KEPT_STAGES = frozenset({DEFAULT, "intent_label"})  # decisions a time word never moves


@dataclass(frozen=True, slots=True)
class Routed:
    """Where a part goes, and the routes whose chains follow if that fails."""

    route: str
    then: tuple[str, ...] = ()


class LiveRedirect:
    """Sends time-sensitive parts from a snapshot route to the live one."""

    def __init__(self, dispatcher: Dispatcher, config: TimeSensitiveConfig) -> None:
        self.dispatcher = dispatcher
        self.config = config
        self.from_routes = frozenset(config.from_routes)

    def _unavailable(self) -> str | None:
        """Why the live route cannot answer (None when it can)."""
        live = self.config.live_route
        if live in self.dispatcher.fusion:
            return None
        if live not in self.dispatcher.enabled:  # every configured source, enabled or not
            return "not_configured"
        if not self.dispatcher.enabled[live] or live not in self.dispatcher.sources:
            return "disabled"
        return None

    def route(self, text: str, route: str, stage: str) -> Routed:
        """The route `text` goes to, recording `time_sensitive` when its time words
        change it (or would, had a live source been enabled)."""
        if not self.config.enabled or route not in self.from_routes or stage in KEPT_STAGES:
            return Routed(route)
        cue = time_cue(text)
        if cue is None or self.dispatcher.is_command(text):
            return Routed(route)
        live = self.config.live_route
        why = self._unavailable()
        # A live source that is configured but disabled is still the part's route, as for
        # any part a stage routes there: the dispatcher skips it (recorded) and the
        # snapshot answers. Only a live route nobody configured is no route at all.
        to_route = route if why == "not_configured" else live
        extra = {} if why is None else {"reason": why}
        record(
            Step.TIME_SENSITIVE,
            query=text,
            cue=cue.cue,
            kind=cue.kind,
            from_route=route,
            to_route=to_route,
            live_route=live,
            **extra,
        )
        return Routed(route) if to_route == route else Routed(live, (route,))
