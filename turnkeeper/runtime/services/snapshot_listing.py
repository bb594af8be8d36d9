"""A session's snapshots as ``session snapshots`` and ``GET /v1/sessions/{id}/snapshots``
list them: one per completed turn, oldest first, with whether git still keeps it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.workspaces.snapshots import session_refs, snapshot_kept
from turnkeeper.store.base import EventStore


def list_snapshots(store: EventStore, session_id: str) -> tuple[str, list[dict[str, Any]]]:
    """``(full session id, rows)`` for the session ``session_id`` names (a prefix will do)."""
    sessions = SessionService(store)
    sid = sessions.resolve_id(session_id)
    state = sessions.load(sid)
    completed = sessions.completed_turns(sid)
    retained = {ref for ref, _ in session_refs(Path(state.workspace), sid)}
    rows = [
        {
            "turn_id": event.turn_id,
            "completed_at": event.at.isoformat(),
            "retained": event.snapshot.snapshot_ref in retained,
            "kept": snapshot_kept(event.snapshot, retained),
            **event.snapshot.model_dump(mode="json"),
        }
        for event in completed
    ]
    return sid, rows
