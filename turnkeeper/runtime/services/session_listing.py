"""Sessions as a listing shows them, read from their projections without decoding them.

``status`` and ``session list`` show every session. Decoding each projection into a
``SessionState`` — and importing the session kernel to do it — costs more than the
listing itself, so a listing reads the projection rows as every read does (the store
verifies each row's checksum: a damaged row is ``DATA_LOSS``, never skipped), parses
their JSON and takes the fields it shows. A projection is the JSON of its state
(``verify`` checks it against the fold of its stream), so the parsed JSON is also what
``--json`` prints: the same keys and values as the decoded state dumped as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

from turnkeeper.errors import DataLoss
from turnkeeper.json_types import JsonDict, JsonMapping, JsonValue

if TYPE_CHECKING:
    from turnkeeper.kernel.session.report import RecoveryReport
    from turnkeeper.store.base import EventStore
    from turnkeeper.store.records import Projection

# The session streams' kind in the store and the projection shape this code writes
# (``turnkeeper.runtime.services.sessions.SESSION_CODEC``'s; a test keeps them equal). A row of
# another shape is decoded instead of parsed, so that it lists with today's keys.
SESSION_KIND = "session"
SESSION_PROJECTION_VERSION = 1
# The statuses a session never leaves (a test keeps them the kernel's): ``status`` counts
# such sessions instead of drawing a row for each.
FINISHED_SESSION_STATUSES = frozenset({"closed", "deleted"})

T = TypeVar("T")


@dataclass(frozen=True)
class SessionSummary:
    """One session's listing fields, and its whole state as JSON values."""

    session_id: str
    goal_id: str
    host_kind: str
    status: str
    status_reason: str | None
    counters: Mapping[str, int]
    in_flight_turn_id: str | None
    turns_without_progress: int
    replans_without_progress: int
    consecutive_host_failures: int
    lease_owner: str | None
    lease_expires_at: str | None
    # The projection as parsed: the state ``session show --json`` prints, key for key.
    state: JsonDict

    @property
    def has_recovery_report(self) -> bool:
        return self.state.get("latest_recovery_report") is not None

    @property
    def host_config(self) -> JsonDict:
        """The session's host configuration as stored (empty when it has none)."""
        config = self.state.get("host_config")
        return config if isinstance(config, dict) else {}

    @property
    def snapshot_failed(self) -> JsonValue:
        """Why the last completed turn has no snapshot (git's message), if it says."""
        last = self.state.get("last_completed")
        snapshot = last.get("snapshot") if isinstance(last, dict) else None
        return snapshot.get("snapshot_failed") if isinstance(snapshot, dict) else None


def list_sessions(store: EventStore) -> list[SessionSummary]:
    """Every session, oldest first, as its projection row holds it."""
    return summaries(store.list_projections(SESSION_KIND))


def summaries(projections: Iterable[Projection]) -> list[SessionSummary]:
    """The summaries of session projections a caller listed itself (``status`` lists
    goals and sessions in one read: ``EventStore.list_projections_of``)."""
    return [
        summarize(p.stream_id, p.state)
        if p.schema_version == SESSION_PROJECTION_VERSION and not p.tail
        else _decoded(p)
        for p in projections
    ]


def _decoded(projection: Projection) -> SessionSummary:
    """A row written in another shape, or one its stream has run past (a tail: no
    session projection lags today, but a listing hands one over as any other),
    through the state model (its defaults filled, its tail folded in)."""
    from turnkeeper.runtime.services.sessions import SESSION_CODEC

    state = SESSION_CODEC.state_of(projection)
    return summarize(projection.stream_id, state.model_dump_json())


def _undecodable(stream_id: str, why: str) -> DataLoss:
    # The message and reason a decoded read gives for the same row.
    return DataLoss.undecodable_projection(stream_id, problem=why)


def _typed(stream_id: str, data: JsonMapping, key: str, kind: type[T]) -> T:
    value = data.get(key)
    # bool is an int to Python, never a count here.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _undecodable(stream_id, f"{key} is not {kind.__name__}")
    return value


def _optional(stream_id: str, data: JsonMapping, key: str, kind: type[T]) -> T | None:
    return None if data.get(key) is None else _typed(stream_id, data, key, kind)


def _object(stream_id: str, data: JsonMapping, key: str) -> JsonDict:
    value = data.get(key)
    if not isinstance(value, dict):
        raise _undecodable(stream_id, f"{key} is not dict")
    return value


def summarize(stream_id: str, text: str) -> SessionSummary:
    """A projection row's summary; ``DATA_LOSS`` when its JSON lacks what a listing shows."""
    try:
        data: JsonValue = json.loads(text)
    except ValueError:
        raise _undecodable(stream_id, "not JSON") from None
    if not isinstance(data, dict):
        raise _undecodable(stream_id, "not a JSON object")
    found = _object(stream_id, data, "counters")
    # JSON gives exact ints (never a subclass, and a bool is its own type), so one pass
    # checks every counter of the common row; a row that fails it is checked counter
    # by counter, for the message naming the first that is not a count.
    if all(type(value) is int for value in found.values()):
        counters = cast("dict[str, int]", dict(found))  # each value checked just now
    else:
        counters = {name: _typed(stream_id, found, name, int) for name in found}
    lease = _object(stream_id, data, "lease")
    in_flight = data.get("in_flight")
    turn_id = None
    if in_flight is not None:
        if not isinstance(in_flight, dict):
            raise _undecodable(stream_id, "in_flight is not an object")
        turn_id = _typed(stream_id, _object(stream_id, in_flight, "envelope"), "turn_id", str)
    return SessionSummary(
        session_id=_typed(stream_id, data, "session_id", str),
        goal_id=_typed(stream_id, data, "goal_id", str),
        host_kind=_typed(stream_id, data, "host_kind", str),
        status=_typed(stream_id, data, "status", str),
        status_reason=_optional(stream_id, data, "status_reason", str),
        counters=counters,
        in_flight_turn_id=turn_id,
        turns_without_progress=_typed(stream_id, data, "turns_without_progress", int),
        replans_without_progress=_typed(stream_id, data, "replans_without_progress", int),
        consecutive_host_failures=_typed(stream_id, data, "consecutive_host_failures", int),
        lease_owner=_optional(stream_id, lease, "owner", str),
        lease_expires_at=_optional(stream_id, lease, "expires_at", str),
        state=data,
    )


def recovery_report(summary: SessionSummary) -> RecoveryReport | None:
    """The session's latest recovery report, decoded (the session kernel is imported
    only for a session that has one to show)."""
    raw = summary.state.get("latest_recovery_report")
    if raw is None:
        return None
    from pydantic import ValidationError

    from turnkeeper.kernel.session.report import RecoveryReport

    try:
        return RecoveryReport.model_validate_json(json.dumps(raw))
    except ValidationError as exc:
        stream_id = f"session:{summary.session_id}"
        raise _undecodable(
            stream_id, f"latest_recovery_report: {exc.error_count()} errors"
        ) from exc
