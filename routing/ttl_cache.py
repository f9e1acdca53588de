"""A bounded LRU with per-entry time-to-live: the shape of every cache in the router.

Used for source results, routing decisions and sessions. Single-threaded use from the
event loop; `now` is injectable so expiry can be tested without sleeping.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """At most `max_entries` entries, each forgotten `ttl_s` seconds after it was set."""

    def __init__(
        self, max_entries: int, ttl_s: float, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._now = now
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        expires, value = entry
        if expires <= self._now():
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def holds(self, key: K) -> bool:
        """Whether `get(key)` would answer now, without touching the entry's recency."""
        entry = self._data.get(key)
        return entry is not None and entry[0] > self._now()

    def set(self, key: K, value: V, ttl_s: float | None = None) -> None:
        """Store `value`; `ttl_s` overrides the cache's lifetime for this entry."""
        ttl = self.ttl_s if ttl_s is None else ttl_s
        if self.max_entries <= 0 or ttl <= 0:
            return
        self._data[key] = (self._now() + ttl, value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    def discard_where(self, stale: Callable[[K], bool]) -> int:
        """Forget every entry whose key `stale` picks; how many were dropped."""
        keys = [key for key in self._data if stale(key)]
        for key in keys:
            del self._data[key]
        return len(keys)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
