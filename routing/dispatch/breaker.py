"""A circuit breaker per source: stop calling a source that keeps failing, then probe it.

Closed: calls go through; N consecutive failures open it. Open: calls are skipped (the
dispatcher records `source_skipped` with the time left and moves down the fallback chain)
until the cool-down ends. Half-open: one probe call goes through; success closes the
circuit, failure opens it for another cool-down. A probe that never reports back (its
request was cancelled at the deadline) is given up after one cool-down, so the circuit
cannot stay stuck half-open.

With `cache.redis_url` the same state lives in Redis, shared by every worker
(`routing.shared_state.SharedBreaker`); this local breaker is then its fallback.
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
        self._probe_at: float | None = None  # when the current probe was let through

    def reset(self) -> None:
        """Closed, with no failures counted: as new."""
        self.failures = 0
        self.opened_at = None
        self._probe_at = None

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self._now() - self.opened_at >= self.cooldown_s:
            return "half_open"
        return "open"

    def admit(self) -> Admission:
        """Whether a call may go through now (a half-open circuit admits one probe)."""
        admission = self.would_admit()
        if admission.probe:
            self._probe_at = self._now()
        return admission

    def would_admit(self) -> Admission:
        """What `admit` would answer now, without letting a probe through (a dry run)."""
        if self.failure_threshold <= 0 or self.opened_at is None:
            return Admission(True)
        now = self._now()
        elapsed = now - self.opened_at
        if elapsed < self.cooldown_s:
            return Admission(False, time_left_s=round(self.cooldown_s - elapsed, 3))
        if self._probe_at is not None and now - self._probe_at < self.cooldown_s:
            return Admission(False, time_left_s=0.0)  # another call is probing
        return Admission(True, probe=True)

    def succeeded(self) -> None:
        self.failures = 0
        self.opened_at = None
        self._probe_at = None

    def failed(self) -> None:
        self.failures += 1
        self._probe_at = None
        if self.opened_at is not None or self.failures >= self.failure_threshold:
            self.opened_at = self._now()
