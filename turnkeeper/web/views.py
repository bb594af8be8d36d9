"""What each page shows, gathered from the same calls the JSON routes make.

Sessions come from ``/v1/status``'s function, a session from ``session_show``,
its turns from ``list_turns`` (what ``/v1/sessions/{id}/turns`` folds), snapshots
from ``list_snapshots``, a goal and its audit from the goal routes, an operation
from ``operation_show``, what an agent last said from ``recent_turn`` (the end of
its session's log, as the next turn's brief reads it) and gates from gates.py. What
is added here is layout only: the timeline puts the turns, reverts and restart
recoveries of a session in the order they happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, TypedDict

from turnkeeper.api import routes_goals, routes_sessions, routes_status
from turnkeeper.api.access import Access, share_refusal
from turnkeeper.api.access import Mode as AccessMode
from turnkeeper.api.access import Scope as AccessScope
from turnkeeper.api.routes_sessions import SessionAnswer
from turnkeeper.api.routes_status import GoalSummary
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel import GoalState, TerminalAudit
from turnkeeper.kernel.model import Evidence, Todo
from turnkeeper.kernel.session import SessionState
from turnkeeper.kernel.session import events as ev
from turnkeeper.kernel.session.operation_model import OperationFinished, OperationStarted
from turnkeeper.kernel.session.report import RecoveryReport
from turnkeeper.runtime.control.controller_view import ControllerView, state_controller
from turnkeeper.runtime.services.access import Principal
from turnkeeper.runtime.services.extension_states import ExtensionStatus
from turnkeeper.runtime.services.goal_pages import GoalPage as ShownPage
from turnkeeper.runtime.services.goal_pages import page_audit, page_of
from turnkeeper.runtime.services.sessions import SESSION_CODEC, SessionService, session_stream
from turnkeeper.runtime.services.snapshot_listing import list_snapshots
from turnkeeper.runtime.services.turn_listing import TurnInfo, list_turns, recent_turn
from turnkeeper.runtime.turn.run_progress import message_text
from turnkeeper.store.base import EventStore
from turnkeeper.web.gates import GateOrigins, GateRow, open_gates, rows_of

STATUSES: Final = ("ready", "running", "suspended", "crashed", "closed", "deleted")
_MARK_TYPES: Final = frozenset(
    {"operation.started", "operation.finished", "session.recovery_reported"}
)
_OPERATION_TYPES: Final = frozenset({"session.created", "operation.started", "operation.joined"})
# What an agent said, as a listing shows it (the whole of it, up to the 500 characters
# a run's display keeps, on hover).
SAID_CHARS: Final = 160
# The sessions page reads what the agent said for its newest sessions only: each is a
# read of the end of a session's log, every refresh.
MAX_SAID: Final = 100


def may(
    principal: Principal | None,
    mode: AccessMode,
    session_id: str | None,
    scope: AccessScope = "session",
) -> bool:
    """Whether ``principal`` may use a control that needs ``mode`` in ``scope`` (of
    session ``session_id``): the same rule the server applies when it is used."""
    if principal is None:
        return False
    if principal.share is None:
        return True
    return share_refusal(principal.share, Access(mode, scope), session_id) is None


def may_decide(principal: Principal | None) -> bool:
    """Whether ``principal`` may decide a gate: the rule of ``POST /gates/ID/resolve``,
    the API's (``update`` on the project: the admin; a share reaches one session)."""
    return may(principal, "update", None, "project")


@dataclass(frozen=True)
class Said:
    """The last thing an agent said in its session's latest turn."""

    text: str  # up to the 500 characters a run's display keeps
    turn_id: str
    at: datetime  # when its batch of host events was journaled

    @property
    def clipped(self) -> str:
        return self.text if len(self.text) <= SAID_CHARS else self.text[: SAID_CHARS - 1] + "…"


def latest_said(store: EventStore, state: SessionState) -> Said | None:
    """The last message host event of the session's latest turn (in flight or ended),
    read from the end of its log; None when that turn said nothing (yet)."""
    if state.in_flight is not None:
        turn_id = state.in_flight.envelope.turn_id
    elif state.last_turn_end is not None:
        turn_id = state.last_turn_end.turn_id
    else:
        return None
    turn = recent_turn(store, state.session_id, turn_id)
    for event in reversed(turn.events if turn is not None else []):
        text = message_text(event.kind, event.data)
        if text is not None:
            return Said(text, turn_id, event.at)
    return None


# --- the sessions page ----------------------------------------------------------------


class SessionsPage(TypedDict):
    """The sessions page's template context."""

    goals: list[GoalSummary]
    extensions: list[ExtensionStatus]
    sessions: list[SessionAnswer]
    said: dict[str, Said]
    gates: list[GateRow]
    counts: dict[str, int]
    total: int
    status: str | None
    statuses: tuple[str, ...]


def sessions_view(store: EventStore, status: str | None, origins: GateOrigins) -> SessionsPage:
    answer = routes_status.status(store)
    sessions = [s for s in answer.sessions if status is None or s.status == status]
    sessions.sort(key=lambda s: s.created_at, reverse=True)
    counts = {name: sum(1 for s in answer.sessions if s.status == name) for name in STATUSES}
    live = [s for s in sessions if s.status != "deleted"][:MAX_SAID]
    said = {s.session_id: found for s in live if (found := latest_said(store, s)) is not None}
    return {
        "goals": answer.goals,
        "extensions": answer.extensions,
        "sessions": sessions,
        "said": said,
        "gates": open_gates(store, origins),
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
    said: Said | None = None
    controls: dict[str, bool] = field(default_factory=dict)
    # Whether the controller its lease names still runs ("controller gone (pid N) ...").
    controller: ControllerView | None = None


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
            marks.append(
                Mark(event.at, f"{event.kind}-finished", _finished(event), event.request_id)
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


def _finished(event: OperationFinished) -> str:
    """``reverted``, ``deleted``, ``revert superseded by ...``: the outcome names the
    kind already (not "revert reverted")."""
    if event.outcome == "superseded":
        by = f" by {event.superseded_by}" if event.superseded_by else ""
        return f"{event.kind} superseded{by}"
    return event.outcome


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
    said = latest_said(store, state)
    last = turns[-1] if turns else None
    return SessionView(
        state, entries, snapshots, last, said, controls, controller=state_controller(state)
    )


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
    gates: list[GateRow]
    # One page of the todos and evidence records (the whole goal is ``state``, which
    # the page reads a dependency's status from); ``page`` says how many are past it.
    todos: list[Todo]
    evidence: list[Evidence]
    page: ShownPage


def goal_view(
    store: EventStore,
    goal_ref: str,
    origins: GateOrigins,
    principal: Principal | None,
    offset: int = 0,
) -> GoalPage:
    """A goal's page, its todos and evidence records from ``offset``; a share's (its
    session's goal) lists that session alone, not the goal's other sessions: a share
    reaches one session and names no other."""
    state = routes_goals.goal_state(goal_ref, store)
    shown, page = page_of(state, offset)
    audit = routes_goals.goal_audit(state.goal.id, store)
    blocked: dict[str, list[str]] = {}
    for blocker in audit.blockers:
        blocked.setdefault(blocker.subject, []).append(blocker.kind.value)
    share = principal.share if principal is not None else None
    sessions = [
        s
        for s in SessionService(store).list()
        if s.goal_id == state.goal.id and (share is None or s.session_id == share.session_id)
    ]
    # The page's window of the audit's blockers (one per open todo); counters whole.
    shown_audit, page = page_audit(audit, page)
    return {
        "state": state,
        "audit": shown_audit,
        "counters": audit.counters(),
        "blocked": blocked,
        "sessions": sessions,
        "gates": rows_of(store, origins, state),
        "todos": list(shown.todos.values()),
        "evidence": list(shown.evidence.values()),
        "page": page,
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
