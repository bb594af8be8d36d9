"""Per-turn output caps: which of a turn's events are kept, and an account of the rest.

One :class:`OutputCap` per turn, used the same way by a host's event log (so a
host's memory stays bounded while it streams) and by the turn driver (so the
journal stays bounded whatever a host does with ``TurnRequest.limits``).

Events are kept in order until the turn reaches :attr:`TurnLimits.max_events` or
:attr:`TurnLimits.max_output_bytes`; from then on the output is *over the cap*
and ordinary events are dropped: counted, their bytes added to a sha256, never
stored. The journal is therefore always a prefix of the output, plus the events
that carry meaning for the turn (its host session handle, its result, a fatal
error: see :func:`carries_meaning`), which are still kept beyond the cap within a
small overflow allowance of their own, so a host that prints nothing but such
events cannot bypass the cap. :meth:`OutputCap.truncation` is then the data of
the one ``output.truncated`` event that ends the turn's events.

An event's size is the compact JSON of ``{"kind": ..., "data": ...}``; the digest
is the sha256 of the dropped events in that encoding, each followed by a newline
(the dropped output as JSON lines).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from turnkeeper.hosts.base import TurnLimits
from turnkeeper.json_types import JsonDict

TRUNCATED_KIND = "output.truncated"
# Events that carry meaning may exceed the cap by at most this many events, and by
# at most one result's worth of bytes plus this slack (a handle, an error message).
OVERFLOW_EVENTS = 32
OVERFLOW_SLACK_BYTES = 64 * 1024
# What a host's own log holds back from the overflow allowance for the truncation
# event it appends, so that everything a host kept also fits the driver's cap.
TRUNCATION_RESERVE_BYTES = 1024


# Compact JSON, for measuring. default=str: measuring must never fail on a value the
# host put in (an in-process callable may emit any object); the journal validates it
# later. One encoder for every call: ``json.dumps`` with options builds one per call
# (every event, every turn's result); an encoder keeps no state between calls.
_MEASURE_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def encode_event(kind: str, data: Mapping[str, object]) -> bytes:
    """The bytes an event is measured (and digested) by."""
    return _MEASURE_JSON.encode({"kind": kind, "data": data}).encode()


def result_size(result: Mapping[str, object]) -> int:
    """The size of a host's result in the receipt, as compact JSON."""
    return len(_MEASURE_JSON.encode(result).encode())


def oversized_result(result: Mapping[str, object], limits: TurnLimits) -> str | None:
    """Why ``result`` may not go into the receipt (too large), or None when it may."""
    size = result_size(result)
    if size <= limits.max_result_bytes:
        return None
    return (
        f"the host's result is {size} bytes, more than the limit of "
        f"{limits.max_result_bytes} bytes (max_result_bytes); it is not recorded"
    )


def carries_meaning(kind: str, data: Mapping[str, object]) -> bool:
    """The events a turn cannot do without: the host session handle, the result,
    a fatal error, and a host's own account of what it cut."""
    if kind in ("session.bound", "result", TRUNCATED_KIND):
        return True
    return kind == "error" and data.get("fatal") is True


class OutputCap:
    """Decides, event by event in output order, what of one turn's output is kept.

    ``reserve_truncation`` (a host's log): hold back room in the overflow
    allowance for the ``output.truncated`` event the log appends itself.
    """

    def __init__(self, limits: TurnLimits, *, reserve_truncation: bool = False) -> None:
        self.limits = limits
        reserve = reserve_truncation
        self._overflow_event_room = OVERFLOW_EVENTS - (1 if reserve else 0)
        self._overflow_byte_room = (
            limits.max_result_bytes
            + OVERFLOW_SLACK_BYTES
            - (TRUNCATION_RESERVE_BYTES if reserve else 0)
        )
        self._kept_events = 0
        self._kept_bytes = 0
        self._overflow_events = 0
        self._overflow_bytes = 0
        self._reached: str | None = None  # which cap the output reached first
        self.dropped_events = 0
        self.dropped_bytes = 0
        # Made at the first event dropped: most turns drop none, and a hash object per
        # turn cost about what a stat does.
        self._digest: hashlib._Hash | None = None

    @property
    def over(self) -> bool:
        return self._reached is not None

    def admit(self, kind: str, data: Mapping[str, object], *, meaningful: bool) -> bool:
        """True: keep this event. False: it was dropped (and counted)."""
        encoded = encode_event(kind, data)
        size = len(encoded)
        if self._reached is None:
            if self._kept_events >= self.limits.max_events:
                self._reached = "max_events"
            elif self._kept_bytes + size > self.limits.max_output_bytes:
                self._reached = "max_output_bytes"
            else:
                self._kept_events += 1
                self._kept_bytes += size
                return True
        if (
            meaningful
            and self._overflow_events < self._overflow_event_room
            and self._overflow_bytes + size <= self._overflow_byte_room
        ):
            self._overflow_events += 1
            self._overflow_bytes += size
            return True
        self.dropped_events += 1
        self.dropped_bytes += size
        if self._digest is None:
            self._digest = hashlib.sha256()
        self._digest.update(encoded)
        self._digest.update(b"\n")
        return False

    def truncation(self) -> JsonDict | None:
        """The data of the ``output.truncated`` event, or None when nothing was dropped."""
        if not self.dropped_events or self._digest is None:
            return None
        return {
            "dropped_events": self.dropped_events,
            "dropped_bytes": self.dropped_bytes,
            "sha256": self._digest.hexdigest(),
            "limit": {
                "reached": self._reached,
                "max_events": self.limits.max_events,
                "max_output_bytes": self.limits.max_output_bytes,
            },
        }
