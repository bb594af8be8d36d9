"""Sessions, their turns and snapshots, and the operations on them.

Each route calls the service the matching command calls (``session create`` ->
``create_session``, ``session stop`` -> ``OperatorActions.stop``, ``session revert``
-> ``Operations.revert``, ...), so a behaviour — a refusal, a retry that joins — is
the same over HTTP as from a shell. Create, revert and delete run under the client
request id of the ``Idempotency-Key`` header, exactly as ``--request-id``.
"""

from __future__ import annotations

import uuid
from pathlib import Path as FsPath
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field, JsonValue

from turnkeeper.api.access import access
from turnkeeper.api.deps import (
    LINE_PATTERN,
    Body,
    IdempotencyKey,
    IdField,
    IdPath,
    JsonObject,
    OptionalIdempotencyKey,
    Reason,
    SessionPath,
    root_of,
    store_of,
)
from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session import SessionState
from turnkeeper.runtime.control.controller_view import state_controller
from turnkeeper.runtime.control.operations import OperationResult, Operations
from turnkeeper.runtime.control.operator import OperatorActions, OperatorResult, recover_turn
from turnkeeper.runtime.services.session_admission import create_session
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.services.snapshot_listing import list_snapshots
from turnkeeper.runtime.services.turn_listing import TURN_PREFIX, TurnInfo, list_turns
from turnkeeper.store.base import EventStore

router = APIRouter(prefix="/v1", tags=["sessions"])
Store = Annotated[EventStore, Depends(store_of)]
Root = Annotated[FsPath, Depends(root_of)]


class Controller(BaseModel):
    """The controller a session's lease names, and whether it still runs
    (``runtime.services.session_listing.controller_of``)."""

    owner: str
    alive: bool | None = Field(
        description="false: provably gone (same machine); true: runs; null: unknown "
        "(another machine) — then only the lease's expiry tells."
    )
    pid: int | None
    lease_expires_at: str | None


class SessionAnswer(SessionState):
    """A session as the API answers it: its state, and its lease's controller (null
    when no lease is held)."""

    controller: Controller | None = None


def session_answer(state: SessionState) -> SessionAnswer:
    found = state_controller(state)
    shown = None if found is None else Controller.model_validate(found.as_json())
    return SessionAnswer.model_validate({**dict(state), "controller": shown})


class SessionList(BaseModel):
    sessions: list[SessionAnswer]


class SessionCreate(Body):
    goal_id: IdField
    host: IdField = Field(description="A host kind (subprocess, python, codex, ...).")
    host_config: dict[str, JsonValue] = Field(default_factory=dict)
    workspace: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        pattern=LINE_PATTERN,
        description="The workspace (default: the project root; relative to it when relative).",
    )
    snapshots: bool = True
    site: IdField | None = None


class SessionCreated(BaseModel):
    request_id: str
    session: SessionState


class ReasonBody(Body):
    reason: Reason | None = None


class OperatorAnswer(BaseModel):
    session: SessionState
    taken_from: str | None = None
    ended_turn: str | None = None
    killed_pids: list[int] = Field(default_factory=list)
    released_todos: list[str] = Field(default_factory=list)


class OperationAnswer(BaseModel):
    request_id: str
    result: Literal["reverted", "deleted", "unchanged", "superseded", "pending"]
    operation: JsonObject | None
    preserved: JsonObject | None
    session: SessionState


class TurnList(BaseModel):
    session_id: str
    turns: list[JsonObject]


class SnapshotList(BaseModel):
    session_id: str
    snapshots: list[JsonObject]


def resolve_session(store: EventStore, ref: str) -> str:
    # A share's id was matched in full by the access check; the admin may give a prefix.
    return SessionService(store).resolve_id(ref)


def _operator(result: OperatorResult) -> OperatorAnswer:
    return OperatorAnswer(
        session=result.state,
        taken_from=result.taken_from,
        ended_turn=result.ended_turn,
        killed_pids=result.killed_pids,
        released_todos=result.released_todos,
    )


def _operation(done: OperationResult) -> OperationAnswer:
    return OperationAnswer.model_validate(done.as_json())


def turn_of(store: EventStore, sid: str, ref: str) -> TurnInfo:
    """The session's turn ``ref`` names, in full or by a prefix unique *within this
    session* (another session's turns are never looked at: a share sees its own)."""
    wanted = ref if ref.startswith(TURN_PREFIX) else TURN_PREFIX + ref
    turns = list_turns(store, sid, with_events=True)
    exact = [t for t in turns if t.turn_id == ref]
    found = exact or [t for t in turns if t.turn_id.startswith(wanted)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFound(f"turn {ref!r} not found in session {sid}", reason="turn_not_found")
    raise InvalidArgument(
        f"turn prefix {ref!r} is ambiguous in this session",
        reason="ambiguous_id",
        details={"candidates": sorted(t.turn_id for t in found)[:10]},
    )


@router.get("/sessions", response_model=SessionList)
@access("read")
def sessions_list(store: Store) -> SessionList:
    """Every session."""
    return SessionList(sessions=[session_answer(s) for s in SessionService(store).list()])


@router.post("/sessions", response_model=SessionCreated)
@access("update")
def session_create(
    body: SessionCreate, store: Store, root: Root, request_id: OptionalIdempotencyKey = None
) -> SessionCreated:
    """Bind a host to a goal and a workspace (``session create``); a retry with the same
    ``Idempotency-Key`` and body returns the same session."""
    rid = request_id if request_id is not None else str(uuid.uuid4())
    workspace = root / body.workspace if body.workspace is not None else root
    from turnkeeper.runtime.services.goals import GoalService

    gid = GoalService(store).resolve("goal", body.goal_id)
    state = create_session(
        store,
        gid,
        workspace,
        body.host,
        dict(body.host_config),
        request_id=rid,
        snapshots=body.snapshots,
        site=body.site,
    )
    return SessionCreated(request_id=rid, session=state)


@router.get("/sessions/{session_id}", response_model=SessionAnswer)
@access("read", "session")
def session_show(session_id: SessionPath, store: Store) -> SessionAnswer:
    """A session: status, lease and whether its controller runs, turn in flight,
    counters, latest recovery report."""
    sessions = SessionService(store)
    return session_answer(sessions.load(resolve_session(store, session_id)))


@router.get("/sessions/{session_id}/turns", response_model=TurnList)
@access("read", "session")
def turns_list(session_id: SessionPath, store: Store) -> TurnList:
    """The session's turns, oldest first (``turn list``)."""
    sid = resolve_session(store, session_id)
    now = SessionService(store).now()
    return TurnList(session_id=sid, turns=[t.summary_json(now) for t in list_turns(store, sid)])


@router.get("/sessions/{session_id}/turns/{turn_id}", response_model=JsonObject)
@access("read", "session")
def turn_show(
    session_id: SessionPath,
    turn_id: IdPath,
    store: Store,
    events: Annotated[int, Query(ge=0, le=1_000_000, description="The last N host events.")] = 20,
) -> JsonDict:
    """One turn: envelope, phases with times, receipt, host events, effects, snapshot."""
    sid = resolve_session(store, session_id)
    turn = turn_of(store, sid, turn_id)
    return turn.detail_json(SessionService(store).now(), events)


@router.post("/sessions/{session_id}/turns/{turn_id}/recover", response_model=SessionState)
@access("update", "session")
def turn_recover(session_id: SessionPath, turn_id: IdPath, store: Store) -> SessionState:
    """Validate a failed turn's host recovery record and resume the session (``recover``)."""
    sid = resolve_session(store, session_id)
    return recover_turn(store, turn_of(store, sid, turn_id).turn_id)


@router.get("/sessions/{session_id}/snapshots", response_model=SnapshotList)
@access("read", "session")
def snapshots_list(session_id: SessionPath, store: Store) -> SnapshotList:
    """One snapshot per completed turn, oldest first (``session snapshots``)."""
    sid, rows = list_snapshots(store, resolve_session(store, session_id))
    return SnapshotList(session_id=sid, snapshots=rows)


@router.post("/sessions/{session_id}/stop", response_model=OperatorAnswer)
@access("update", "session")
def session_stop(
    session_id: SessionPath, store: Store, body: ReasonBody | None = None
) -> OperatorAnswer:
    """End the running host, abandon the turn, suspend the session, free its todos."""
    reason = body.reason if body and body.reason else "stopped by operator"
    return _operator(OperatorActions(store).stop(resolve_session(store, session_id), reason))


@router.post("/sessions/{session_id}/resume", response_model=OperatorAnswer)
@access("update", "session")
def session_resume(
    session_id: SessionPath, store: Store, body: ReasonBody | None = None
) -> OperatorAnswer:
    """Back to ready after a stop, a suspension, a crash or a revert."""
    reason = body.reason if body and body.reason else "resumed by operator"
    return _operator(OperatorActions(store).resume(resolve_session(store, session_id), reason))


@router.post("/sessions/{session_id}/crash", response_model=OperatorAnswer)
@access("update", "session")
def session_crash(
    session_id: SessionPath, store: Store, body: ReasonBody | None = None
) -> OperatorAnswer:
    """Mark the session crashed (an operator's call), so that it can be reverted."""
    reason = body.reason if body and body.reason else "marked crashed by operator"
    return _operator(OperatorActions(store).crash(resolve_session(store, session_id), reason))


@router.post("/sessions/{session_id}/revert", response_model=OperationAnswer)
@access("update", "session")
def session_revert(
    session_id: SessionPath, request_id: IdempotencyKey, store: Store
) -> OperationAnswer:
    """Revert a crashed session to its last completed snapshot; a retry with the same
    ``Idempotency-Key`` joins the same operation."""
    return _operation(Operations(store).revert(resolve_session(store, session_id), request_id))


@router.delete("/sessions/{session_id}", response_model=OperationAnswer)
@access("delete", "session")
def session_delete(
    session_id: SessionPath, request_id: IdempotencyKey, store: Store
) -> OperationAnswer:
    """Delete the session (closed or not, superseding a pending revert) and its snapshots."""
    return _operation(Operations(store).delete(resolve_session(store, session_id), request_id))


@router.get("/operations/{request_id}", response_model=JsonObject)
@access("read")
def operation_show(request_id: IdPath, store: Store) -> JsonDict:
    """A create, revert or delete by its request id (``operation show``)."""
    return Operations(store).show(request_id).as_json()
