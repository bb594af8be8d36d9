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
        # Where the writer's transaction begins: its BEGIN, or the pipeline that sends
        # BEGIN with the whole transaction (PostgreSQL).
        name = "pipelined_commit" if dialect.pipelines else "begin_write"
        real = getattr(dialect, name)
        first = [True]

        def begin(*args: Any) -> Any:
            if first[0]:
                first[0] = False
                self.entered.set()
                assert self.release.wait(30)
            return real(*args)

        monkeypatch.setattr(dialect, name, begin)


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
