"""A named, bounded memo of facts that can change while the process runs.

A process-global memo is state, so each one says, where it is made, what it holds,
who may clear it and when an entry stops being true. docs/caches.md lists every memo
of the package with that rule; tests/architecture/test_caches.py keeps the list whole.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(Generic[K, V]):
    """Values by key, at most ``max_entries`` of them (the oldest goes first), safe to
    share between threads.

    ``invalidation`` names when an entry stops being true. A memo never checks that
    itself: its owner keys or checks each entry so that a stale one is never served,
    and :meth:`clear` is always safe (it only costs asking again).
    """

    __slots__ = ("_entries", "_lock", "invalidation", "max_entries", "name")

    def __init__(self, name: str, *, max_entries: int, invalidation: str) -> None:
        self.name = name
        self.max_entries = max_entries
        self.invalidation = invalidation
        self._entries: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value kept for ``key``, or None when there is none."""
        with self._lock:
            return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries.pop(key, None)  # a key put again counts as the newest
            self._entries[key] = value
            while len(self._entries) > self.max_entries:
                del self._entries[next(iter(self._entries))]

    def pop(self, key: K) -> None:
        """Forget ``key`` (nothing happens when it is not kept)."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries
