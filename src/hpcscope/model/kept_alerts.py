"""What is derived from one alert, kept once per alert: the newest version replaces the older.

An alert is immutable, but each write of it (a repeat firing, a state change) makes a new
version under the same deduplication key, several a second at 128 nodes. Caches keyed by the
whole alert (``functools.lru_cache``) kept one entry per *version* until their bound pushed
the oldest out, so they grew with the writes, not with the alerts. :class:`KeptPerAlert` keys
by what names the alert (its deduplication key, and whatever else the derived value depends
on) and holds the version it was derived from: a newer version is derived again and replaces
it. At most ``max_entries`` entries, least recently used out first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class KeptPerAlert(Generic[V]):
    """One value per ``key`` (an alert's identity), derived from ``version`` (the alert, or
    its stored row): kept while the same version is asked for again."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[object, V]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, version: object, derive: Callable[[], V]) -> V:
        """The value kept for ``key`` if it was derived from ``version`` (the same object, or
        an equal one), else ``derive()``, kept in its place."""
        with self._lock:
            kept = self._entries.get(key)
            if kept is not None and (kept[0] is version or kept[0] == version):
                self._entries.move_to_end(key)
                self.hits += 1
                return kept[1]
        value = derive()
        with self._lock:
            self.misses += 1
            self._entries[key] = (version, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        """Forget every entry and the counts (as ``lru_cache``'s ``cache_clear``)."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def info(self) -> dict[str, int]:
        """Hits, misses, entries and bound (as ``lru_cache``'s ``cache_info`` names them)."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "maxsize": self.max_entries,
            "currsize": len(self._entries),
        }
