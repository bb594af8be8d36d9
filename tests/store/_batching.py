"""Helpers that line requests up behind a held commit, to test what one shared commit does."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from turnkeeper.errors import TurnkeeperError
from turnkeeper.store import SqlEventStore


class Gate:
    """Holds the first commit open so the next appends queue up behind it."""

    def __init__(self, store: SqlEventStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        dialect = store.writer._dialect
        real = dialect.begin_write
        first = [True]

        def begin(cursor: Any, durable: bool = True) -> None:
            if first[0]:
                first[0] = False
                self.entered.set()
                assert self.release.wait(30)
            real(cursor, durable)

        monkeypatch.setattr(dialect, "begin_write", begin)


def in_thread(fn: Callable[[], Any], out: dict[str, Any], key: str) -> threading.Thread:
    def run() -> None:
        try:
            out[key] = fn()
        except TurnkeeperError as exc:
            out[key] = exc

    t = threading.Thread(target=run)
    t.start()
    return t


def wait_queued(store: SqlEventStore, n: int) -> None:
    for _ in range(3000):
        with store.writer._lock:
            if len(store.writer._queue) >= n:
                return
        threading.Event().wait(0.001)
    raise AssertionError("requests did not queue")
