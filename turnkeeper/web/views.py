"""What each page shows, gathered from the same calls the JSON routes make.

Sessions come from ``/v1/status``'s function, a session from ``session_show``,
its turns from ``list_turns`` (what ``/v1/sessions/{id}/turns`` folds), snapshots
from ``list_snapshots``, a goal and its audit from the goal routes, an operation
from ``operation_show``. What is added here is layout only: the timeline puts the
turns, reverts and restart recoveries of a session in the order they happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, TypedDict

from turnkeeper.api import routes_goals, routes_sessions, routes_status
from turnkeeper.api.access import Access, share_refusal
from turnkeeper.api.access import Mode as AccessMode
from turnkeeper.api.routes_status import GoalSummary
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel import GoalState, TerminalAudit
from turnkeeper.kernel.session import SessionState
from turnkeeper.kernel.session import events as ev
from turnkeeper.kernel.session.operation_model import OperationFinished, OperationStarted
from turnkeeper.kernel.session.report import RecoveryReport
from turnkeeper.runtime.services.access import Principal
from turnkeeper.runtime.services.extension_states import ExtensionStatus
from turnkeeper.runtime.services.sessions import SESSION_CODEC, SessionService, session_stream
from turnkeeper.runtime.services.snapshot_listing import list_snapshots
from turnkeeper.runtime.services.turn_listing import TurnInfo, list_turns
from turnkeeper.store.base import EventStore

STATUSES: Final = ("ready", "running", "suspended", "crashed", "closed", "deleted")
_MARK_TYPES: Final = frozenset(
    {"operation.started", "operation.finished", "session.recovery_reported"}
)
_OPERATION_TYPES: Final = frozenset({"session.created", "operation.started", "operation.joined"})


def may(principal: Principal | None, mode: AccessMode, session_id: str) -> bool:
    """Whether ``principal`` may use a control of session ``session_id`` that needs
    ``mode``: the same rule the server applies when the control is used."""
    if principal is None:
        return False
    if principal.share is None:
        return True
    return share_refusal(principal.share, Access(mode, "session"), session_id) is None


# --- the sessions page ----------------------------------------------------------------


class SessionsPage(TypedDict):
    """The sessions page's template context."""

    goals: list[GoalSummary]
    extensions: list[ExtensionStatus]
    sessions: list[SessionState]
    counts: dict[str, int]
    total: int
    status: str | None
    statuses: tuple[str, ...]


def sessions_view(store: EventStore, status: str | None) -> SessionsPage:
    answer = routes_status.status(store)
    sessions = [s for s in answer.sessions if status is None or s.status == status]
    counts = {name: sum(1 for s in answer.sessions if s.status == name) for name in STATUSES}
    return {
        "goals": answer.goals,
        "extensions": answer.extensions,
        "sessions": sorted(sessions, key=lambda s: s.created_at, reverse=True),
        "counts": counts,
        "total": len(answer.sessions),
        "status": status,
        "statuses": STATUSES,
    }


# --- a session's page -----------------------------------------------------------------


@dataclass
class Mark:
    """Something on the timeline that is not a turn: a revert, a delete, a restart's
    recovery."""

    at: datetime
    kind: str  # revert / delete (started or finished), recovery
    title: str
    request_id: str | None = None
    detail: str = ""
    report: RecoveryReport | None = None


@dataclass
class Entry:
    at: datetime
    turn: TurnInfo | None = None
    mark: Mark | None = None


@dataclass
class SessionView:
    state: SessionState
    timeline: list[Entry]
    snapshots: list[JsonDict]
    last_turn: TurnInfo | None
    controls: dict[str, bool] = field(default_factory=dict)


def _marks(store: EventStore, sid: str) -> list[Mark]:
    marks: list[Mark] = []
    for record in store.read_stream(session_stream(sid)):
        if record.type not in _MARK_TYPES:
            continue
        event = SESSION_CODEC.decode_event(record)
        if isinstance(event, OperationStarted):
            detail = (
                f"restoring the snapshot of {event.snapshot_turn_id}"
                if (event.snapshot_turn_id)
                else ""
            )
            if event.failed_turn_id:
                detail += f"; turn {event.failed_turn_id} failed: {event.crash_note}"
            marks.append(
                Mark(
                    event.at,
                    f"{event.kind}-started",
                    f"{event.kind} started",
                    event.request_id,
                    detail.strip("; "),
                )
            )
        elif isinstance(event, OperationFinished):
            by = f" by {event.superseded_by}" if event.superseded_by else ""
            marks.append(
                Mark(
                    event.at,
                    f"{event.kind}-finished",
                    f"{event.kind} {event.outcome}{by}",
                    event.request_id,
                )
            )
        elif isinstance(event, ev.RecoveryReported):
            report = event.report
            acted = [a.kind for a in report.actions if a.kind != "nothing_to_do"]
            # Every start of a control plane reports; one that found nothing stays quiet.
            kind, title = (
                ("recovery", "restart recovery")
                if acted
                else ("recovery-none", "control plane started: nothing to recover")
            )
            marks.append(Mark(report.finished_at, kind, title, None, ", ".join(acted), report))
    return marks


# The controls of a session, the mode each needs, and the statuses it applies in.
CONTROLS: Final[dict[str, tuple[AccessMode, frozenset[str]]]] = {
    "stop": ("update", frozenset({"ready", "running"})),
    "resume": ("update", frozenset({"suspended", "crashed"})),
    "crash": ("update", frozenset({"ready", "running", "suspended"})),
    "revert": ("update", frozenset({"crashed"})),
    "delete": ("delete", frozenset({"ready", "suspended", "crashed", "closed"})),
}


def session_view(store: EventStore, session_ref: str, principal: Principal | None) -> SessionView:
    state: SessionState = routes_sessions.session_show(session_ref, store)
    sid = state.session_id
    turns = list_turns(store, sid)
    entries = [Entry(t.started, turn=t) for t in turns]
    entries += [Entry(m.at, mark=m) for m in _marks(store, sid)]
    entries.sort(key=lambda e: e.at)
    snapshots = list_snapshots(store, sid)[1] if state.status != "deleted" else []
    controls = {
        name: state.status in statuses and may(principal, mode, session_ref)
        for name, (mode, statuses) in CONTROLS.items()
    }
    if not state.snapshots:
        controls["revert"] = False
    return SessionView(state, entries, snapshots, turns[-1] if turns else None, controls)


def phase_rows(turn: TurnInfo) -> list[tuple[str, datetime, float]]:
    """Each step of a turn with its time and the seconds since acceptance."""
    start = turn.started
    return [(name, at, (at - start).total_seconds()) for name, at in turn.phases.items()]


# --- a goal's page ----------------------------------------------------------------------


class GoalPage(TypedDict):
    """A goal page's template context."""

    state: GoalState
    audit: TerminalAudit
    counters: dict[str, int]
    blocked: dict[str, list[str]]
    sessions: list[SessionState]


def goal_view(store: EventStore, goal_ref: str) -> GoalPage:
    state = routes_goals.goal_show(goal_ref, store)
    audit = routes_goals.goal_audit(state.goal.id, store)
    blocked: dict[str, list[str]] = {}
    for blocker in audit.blockers:
        blocked.setdefault(blocker.subject, []).append(blocker.kind.value)
    sessions = [s for s in SessionService(store).list() if s.goal_id == state.goal.id]
    return {
        "state": state,
        "audit": audit,
        "counters": audit.counters(),
        "blocked": blocked,
        "sessions": sessions,
    }


# --- operations -------------------------------------------------------------------------


def operations_view(store: EventStore) -> list[JsonDict]:
    """Every create, revert and delete of every session, newest first."""
    request_ids: list[str] = []
    for state in SessionService(store).list():
        for record in store.read_stream(session_stream(state.session_id)):
            if record.type not in _OPERATION_TYPES:
                continue
            event = SESSION_CODEC.decode_event(record)
            rid = getattr(event, "request_id", None)
            if isinstance(rid, str) and rid not in request_ids:
                request_ids.append(rid)
    rows = [routes_sessions.operation_show(rid, store) for rid in request_ids]
    return sorted(rows, key=lambda r: str(r.get("started_at") or ""), reverse=True)
