"""A session's snapshots as ``session snapshots`` and ``GET /v1/sessions/{id}/snapshots``
list them: one per completed turn, oldest first, with whether git still keeps it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session.records import SnapshotRef
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.workspaces.snapshots import session_refs, snapshot_kept
from turnkeeper.store.base import EventStore


@dataclass(frozen=True)
class SnapshotRow:
    """One completed turn's snapshot, and what git keeps of it."""

    turn_id: str
    completed_at: datetime
    retained: bool  # its ref is still in the workspace's repository
    kept: str  # ``yes``, ``pruned``, ``failed`` or ``none`` (runtime/workspaces/snapshots.py)
    snapshot: SnapshotRef

    def as_json(self) -> JsonDict:
        # The snapshot's fields flat beside the row's, as the listing has always had them.
        return {
            "turn_id": self.turn_id,
            "completed_at": self.completed_at.isoformat(),
            "retained": self.retained,
            "kept": self.kept,
            **self.snapshot.model_dump(mode="json"),
        }


def snapshot_rows(store: EventStore, session_id: str) -> tuple[str, list[SnapshotRow]]:
    """``(full session id, rows)`` for the session ``session_id`` names (a prefix will do)."""
    sessions = SessionService(store)
    sid = sessions.resolve_id(session_id)
    state = sessions.load(sid)
    completed = sessions.completed_turns(sid)
    retained = {ref for ref, _ in session_refs(Path(state.workspace), sid)}
    rows = [
        SnapshotRow(
            turn_id=event.turn_id,
            completed_at=event.at,
            retained=event.snapshot.snapshot_ref in retained,
            kept=snapshot_kept(event.snapshot, retained),
            snapshot=event.snapshot,
        )
        for event in completed
    ]
    return sid, rows


def list_snapshots(store: EventStore, session_id: str) -> tuple[str, list[JsonDict]]:
    """:func:`snapshot_rows` as JSON, what the API and the web view show."""
    sid, rows = snapshot_rows(store, session_id)
    return sid, [row.as_json() for row in rows]
