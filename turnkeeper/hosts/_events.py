"""A turn's event log in memory, and the parsing of host output lines into events."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from turnkeeper.hosts.base import HostEvent


class EventLog:
    """Append-only, sequenced events that any number of readers can follow.

    Sequence numbers are assigned here (1, 2, 3, ...), not taken from the host, so
    the stream is contiguous whatever the host prints; a reader reattaches by
    passing the last sequence it acknowledged.
    """

    def __init__(self) -> None:
        self._events: list[HostEvent] = []
        self._closed = False
        self._cond = threading.Condition()

    def append(self, kind: str, data: dict[str, Any]) -> HostEvent:
        with self._cond:
            if self._closed:
                raise RuntimeError("event log is closed")
            event = HostEvent(seq=len(self._events) + 1, kind=kind, data=data)
            self._events.append(event)
            self._cond.notify_all()
            return event

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def last_seq(self) -> int:
        with self._cond:
            return len(self._events)

    def iter(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        index = max(after_seq, 0)  # seq n lives at index n - 1
        while True:
            with self._cond:
                while follow and index >= len(self._events) and not self._closed:
                    self._cond.wait()
                batch = self._events[index:]
                closed = self._closed
            # Yield outside the lock: a slow consumer must not block the reader thread.
            yield from batch
            index += len(batch)
            if not batch and (closed or not follow):
                return


class ProtocolError(ValueError):
    """A line in ``jsonl`` mode that is not an event."""


def parse_jsonl_line(line: bytes) -> tuple[str, dict[str, Any]] | None:
    """Turn one output line into ``(kind, data)``; None for a blank line.

    Accepted shapes: ``{"kind": str, "data": {...}}`` (turnkeeper's own), or any
    object with a string ``type`` (Codex, Claude Code), which becomes
    ``kind=type`` with the whole object as data.
    """
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"not a JSON object but {type(obj).__name__}")
    kind, data = obj.get("kind"), obj.get("data")
    if isinstance(kind, str) and isinstance(data, dict):
        return kind, data
    type_ = obj.get("type")
    if isinstance(type_, str):
        return type_, obj
    raise ProtocolError('object has neither "kind"+"data" nor a string "type"')


def dig(data: dict[str, Any], dotted: str) -> Any:
    """``dig({"a": {"b": 1}}, "a.b") == 1``; None when any step is missing."""
    value: Any = data
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
