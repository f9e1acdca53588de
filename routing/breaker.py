"""A circuit breaker per source: stop calling a source that keeps failing, then probe it.

Closed: calls go through; N consecutive failures open it. Open: calls are skipped (the
dispatcher records `source_skipped` with the time left and moves down the fallback chain)
until the cool-down ends. Half-open: one probe call goes through; success closes the
circuit, failure opens it for another cool-down.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    probe: bool = False
    time_left_s: float = 0.0


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int = 5,
        cooldown_s: float = 30.0,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._now = now
        self.failures = 0
        self.opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self._now() - self.opened_at >= self.cooldown_s:
            return "half_open"
        return "open"

    def admit(self) -> Admission:
        """Whether a call may go through now (a half-open circuit admits one probe)."""
        if self.failure_threshold <= 0 or self.opened_at is None:
            return Admission(True)
        elapsed = self._now() - self.opened_at
        if elapsed < self.cooldown_s:
            return Admission(False, time_left_s=round(self.cooldown_s - elapsed, 3))
        if self._probing:
            return Admission(False, time_left_s=0.0)
        self._probing = True
        return Admission(True, probe=True)

    def succeeded(self) -> None:
        self.failures = 0
        self.opened_at = None
        self._probing = False

    def failed(self) -> None:
        self.failures += 1
        self._probing = False
        if self.opened_at is not None or self.failures >= self.failure_threshold:
            self.opened_at = self._now()
