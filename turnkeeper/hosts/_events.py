"""A turn's event log in memory (bounded), and the splitting and parsing of host output
lines into events."""

from __future__ import annotations

import json
import threading
import unicodedata
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import NamedTuple

from turnkeeper.host_reports import ID_MAX_CHARS, HostEvent
from turnkeeper.hosts.base import TurnLimits
from turnkeeper.hosts.output_cap import TRUNCATED_KIND, OutputCap, carries_meaning
from turnkeeper.json_types import JsonDict, JsonValue


class EventLog:
    """Append-only, sequenced events that any number of readers can follow.

    Sequence numbers are assigned here (1, 2, 3, ...), not taken from the host, so
    the stream is contiguous whatever the host prints; a reader reattaches by
    passing the last sequence it acknowledged.

    What it stores is bounded by ``limits`` (an :class:`OutputCap`): an event over
    the cap is counted and digested, gets no sequence number and is not stored, so
    the stored events stay contiguous. :meth:`seal` (or :meth:`close`) appends the
    one ``output.truncated`` event that says what was dropped. ``meaningful``
    decides which events are still kept beyond the cap (within its small overflow
    allowance).
    """

    def __init__(
        self,
        limits: TurnLimits | None = None,
        *,
        meaningful: Callable[[str, JsonDict], bool] = carries_meaning,
    ) -> None:
        self._events: list[HostEvent] = []
        self._cap = OutputCap(limits or TurnLimits(), reserve_truncation=True)
        self._meaningful = meaningful
        self._sealed = False
        self._closed = False
        self._cond = threading.Condition()

    def append(self, kind: str, data: JsonDict) -> HostEvent | None:
        """The stored event, or None when it was over the cap (and only counted)."""
        with self._cond:
            if self._sealed:
                raise RuntimeError("event log is closed")
            if not self._cap.admit(kind, data, meaningful=self._meaningful(kind, data)):
                return None
            return self._store(kind, data)

    def _store(self, kind: str, data: JsonDict) -> HostEvent:
        # Stamped here, as the host's line is read: the journal takes events in
        # batches, and a batch's time is not when each of its events happened.
        event = HostEvent(seq=len(self._events) + 1, kind=kind, data=data, at=datetime.now(UTC))
        self._events.append(event)
        self._cond.notify_all()
        return event

    def seal(self) -> None:
        """No more appends; append ``output.truncated`` if anything was dropped. Idempotent."""
        with self._cond:
            if self._sealed:
                return
            self._sealed = True
            truncation = self._cap.truncation()
            if truncation is not None:
                self._store(TRUNCATED_KIND, truncation)

    def close(self) -> None:
        self.seal()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def last_seq(self) -> int:
        with self._cond:
            return len(self._events)

    @property
    def dropped_events(self) -> int:
        with self._cond:
            return self._cap.dropped_events

    def wait_after(self, after_seq: int, timeout: float | None) -> list[HostEvent] | None:
        """The events with ``seq > after_seq``, waiting at most ``timeout`` seconds
        (None: however long) for one to come: ``[]`` when none came in time, None once
        the log is closed and every event was read. For a reader that bounds its wait
        on its own thread, instead of following :meth:`iter` on one of its own."""
        index = max(after_seq, 0)  # seq n lives at index n - 1
        with self._cond:
            if index >= len(self._events) and not self._closed:
                self._cond.wait_for(
                    lambda: index < len(self._events) or self._closed, timeout=timeout
                )
            batch = self._events[index:]
            return None if not batch and self._closed else batch

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


class Line(NamedTuple):
    """A line of output, or a piece of one longer than the line limit.

    ``split``: the line was longer than the limit, so this is not all of it;
    ``continued``: an earlier piece of the same line was already handed out.
    """

    data: bytes
    split: bool = False
    continued: bool = False


class LineBuffer:
    """Splits a byte stream into lines, holding at most ``max_line_bytes`` (plus one
    chunk) of an unfinished line: a longer line is handed out in pieces."""

    def __init__(self, max_line_bytes: int) -> None:
        self._max = max_line_bytes
        self._pending = bytearray()
        self._continued = False  # the pending bytes continue a line already handed out

    def feed(self, chunk: bytes) -> Iterator[Line]:
        start = 0
        # Search only the new chunk for newlines: the work stays linear in the output
        # however long its lines are.
        while (end := chunk.find(b"\n", start)) != -1:
            self._pending += chunk[start:end]
            start = end + 1
            line = self._take(ends_line=True)
            if line.data or not line.continued:  # no empty tail after a split line
                yield line
        self._pending += chunk[start:]
        if len(self._pending) > self._max:
            yield self._take(ends_line=False)

    def flush(self) -> Line | None:
        """What is left at the end of the stream (a last line without its newline)."""
        return self._take(ends_line=True) if self._pending else None

    def _take(self, *, ends_line: bool) -> Line:
        data = bytes(self._pending)
        self._pending.clear()
        split = self._continued or not ends_line or len(data) > self._max
        line = Line(data, split=split, continued=self._continued)
        self._continued = not ends_line
        return line


class ProtocolError(ValueError):
    """A line in ``jsonl`` mode that is not an event."""


def parse_jsonl_line(line: bytes) -> tuple[str, JsonDict] | None:
    """Turn one output line into ``(kind, data)``; None for a blank line.

    Accepted shapes: ``{"kind": str, "data": {...}}`` (turnkeeper's own), or any
    object with a string ``type`` (Codex, Claude Code), which becomes
    ``kind=type`` with the whole object as data.
    """
    if not line.strip():
        return None
    try:
        obj: JsonValue = json.loads(line)  # what json.loads builds is JSON
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}; the line: {shown_line(line)}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(
            f"not a JSON object but {type(obj).__name__}; the line: {shown_line(line)}"
        )
    kind, data = obj.get("kind"), obj.get("data")
    if isinstance(kind, str) and isinstance(data, dict):
        return _recordable(kind), data
    type_ = obj.get("type")
    if isinstance(type_, str):
        return _recordable(type_), obj
    raise ProtocolError(
        f'object has neither "kind"+"data" nor a string "type"; the line: {shown_line(line)}'
    )


# How much of an offending line an error message quotes: enough to recognise it.
SHOWN_LINE_CHARS = 120


def shown_line(line: bytes) -> str:
    """An output line as an error message may quote it: decoded (bad bytes replaced),
    clipped to :data:`SHOWN_LINE_CHARS`, every control or format character escaped
    (``\\x1b``, ``\\u202e``) so a terminal shows the line rather than obeys it."""
    text = line.decode(errors="replace").rstrip("\r\n")
    clipped = text[:SHOWN_LINE_CHARS]
    escaped = "".join(_escaped(c) for c in clipped)
    more = len(text) - len(clipped)
    return f"'{escaped}'" + (f" (and {more} more characters)" if more > 0 else "")


def _escaped(char: str) -> str:
    if char == "\\":
        return "\\\\"  # so that an escape below is told from the line's own text
    if not unicodedata.category(char).startswith("C"):
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _recordable(kind: str) -> str:
    # The journal records a kind as an id: a host may not name one it would refuse.
    if not kind or len(kind) > ID_MAX_CHARS:
        raise ProtocolError(f"an event kind must have 1 to {ID_MAX_CHARS} characters")
    return kind


def dig(data: JsonDict, dotted: str) -> JsonValue:
    """``dig({"a": {"b": 1}}, "a.b") == 1``; None when any step is missing."""
    value: JsonValue = data
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
