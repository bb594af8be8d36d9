"""Durable session operations: revert and delete, each under a request id.
(``create`` is ``SessionService.create`` under a request id; ``operation show`` reads
all three, see runtime/services/operation_log.py.)

Revert runs in three steps:

1. **observe** — the session's generation, status and pending operation, and its
   runtime: the workspace repository, the snapshot commit, the host artifact copy.
   A missing or replaced runtime is ``FAILED_PRECONDITION``, never a crash.
2. **admit** — one ``BeginOperation`` under the session lease: generation check, no
   snapshot in progress, the interrupted turn failed with a crash note, REVERT started.
3. **execute** — bring HEAD back to where the snapshot was taken when the agent
   committed since (runtime/workspaces/workspace_head.py), restore the worktree and the host
   artifact in place — moving aside what the restore replaces, named in the result
   as ``preserved`` (runtime/workspaces/workspace_restore.py) — record the restore (so a retry
   never restores twice), finish with the same generation back: the session is
   ``suspended`` at its snapshot.

A failure anywhere keeps the operation pending; the retry (same or another request
id) joins it and completes it. A session that is not crashed comes back unchanged,
which is also what a retry sees after a revert whose answer was lost. Delete
supersedes a pending revert and removes the session's snapshot refs and copies (and
the refs reverts kept); a closed session can be deleted too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from turnkeeper.crashpoints import crash_point
from turnkeeper.errors import AlreadyExists, FailedPrecondition
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session import SessionState
from turnkeeper.kernel.session.commands import (
    BeginOperation,
    FinishOperation,
    LeaseToken,
    RecordOperationStep,
)
from turnkeeper.kernel.session.operation_model import OperationKind, PendingOperation
from turnkeeper.kernel.session.operations import NO_TURN_COMPLETED
from turnkeeper.runtime.control.controller_identity import controller_owner, owner_is_dead
from turnkeeper.runtime.control.run_config import LEASE_SECONDS
from turnkeeper.runtime.control.session_leases import SessionLeases
from turnkeeper.runtime.control.settlement import require_settled
from turnkeeper.runtime.log.request_ids import OPERATION_KIND, check_request_id
from turnkeeper.runtime.services.operation_log import OperationRecord, read_operation
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.workspaces.snapshots import (
    commit_exists,
    is_repository,
    remove_all,
    restore_artifact,
    sha256_file,
)
from turnkeeper.runtime.workspaces.workspace_head import remove_reverted, restore_head
from turnkeeper.runtime.workspaces.workspace_restore import (
    ARTIFACT_DIR,
    Preserver,
    preserve_root,
    read_preserved,
    restore_workspace,
)
from turnkeeper.store.base import EventStore

__all__ = ["OperationRecord", "OperationResult", "Operations", "payload_digest"]

REVERT_NOTE = (
    "session crashed; the turn in flight failed and the session is reverted to its last "
    "completed snapshot"
)
# Called at each revert step with its crash point name; tests inject failures here.
FaultHook = Callable[[str], None]
Result = Literal["reverted", "deleted", "unchanged", "superseded", "pending"]


@dataclass
class OperationResult:
    request_id: str
    result: Result
    session: SessionState
    operation: OperationRecord | None = None

    def as_json(self) -> JsonDict:
        preserved = self.operation.preserved if self.operation else None
        return {
            "request_id": self.request_id,
            "result": self.result,
            "operation": self.operation.as_json() if self.operation else None,
            "preserved": preserved,
            "session": self.session.model_dump(mode="json"),
        }


def payload_digest(kind: str, session_id: str) -> str:
    return hashlib.sha256(f"{kind}\0{session_id}".encode()).hexdigest()[:32]


class Operations:
    def __init__(
        self,
        store: EventStore,
        owner: str | None = None,
        fault: FaultHook | None = None,
    ):
        """``owner``: the executor this process is (by default its controller identity)."""
        self._sessions = SessionService(store)
        self._leases = SessionLeases(self._sessions, owner or controller_owner(), LEASE_SECONDS)
        self._store = store
        self._fault = fault or (lambda _name: None)

    @property
    def sessions(self) -> SessionService:
        return self._sessions

    def _point(self, name: str) -> None:
        crash_point(name)
        self._fault(name)

    # --- reading ------------------------------------------------------------------------

    def show(self, request_id: str) -> OperationRecord:
        """The operation, with what a revert moved aside (``preserved``) when it did."""
        record = read_operation(self._store, request_id)
        if record.kind == "revert":
            workspace = Path(self._sessions.load(record.session_id).workspace)
            if is_repository(workspace):
                root = preserve_root(workspace, record.session_id, record.root_request_id)
                found = read_preserved(root)
                record.preserved = found.as_json() if found is not None else None
        return record

    def _known(self, request_id: str, kind: str, sid: str) -> OperationRecord | None:
        """The operation ``request_id`` already names, or None for a new request.
        Same id with another payload (kind or session): ALREADY_EXISTS."""
        found = self._store.lookup(request_id)
        if found is None:
            return None
        record = self.show(request_id) if found[1] == OPERATION_KIND else None
        if record is None or record.session_id != sid or record.kind != kind:
            raise AlreadyExists(
                f"request id {request_id!r} was used for another request",
                reason="request_id_reused",
            )
        return record

    # --- revert -------------------------------------------------------------------------

    def revert(self, session_id: str, request_id: str) -> OperationResult:
        check_request_id(request_id)
        sid = self._sessions.resolve_id(session_id)
        known = self._known(request_id, "revert", sid)
        if known is not None and known.status == "finished":
            result: Result = "superseded" if known.outcome == "superseded" else "reverted"
            return OperationResult(request_id, result, self._sessions.load(sid), known)
        # 1. observe
        state = self._sessions.load(sid)
        if state.status == "deleted":
            raise FailedPrecondition("the session was deleted", reason="session_deleted")
        if not state.snapshots:
            raise FailedPrecondition(
                "the session was created with --no-snapshots: there is no snapshot to revert to",
                reason="snapshots_disabled",
                details={"session_id": sid},
            )
        if state.operation is None and state.status != "crashed":
            return OperationResult(request_id, "unchanged", state)
        self._observe_runtime(state)
        # Nothing of the crashed session may run on into the restored workspace.
        require_settled(sid)
        self._point("revert.observed")
        with self._lease(state) as token:
            # 2. admit (or join the pending revert)
            op = self._begin(token, state, request_id, "revert", REVERT_NOTE)
            self._point("revert.admitted")
            # 3. execute
            owner = self._leases.owner
            if "restored" not in op.steps:
                self._restore(self._sessions.load(sid), op)
                step = RecordOperationStep(
                    lease=token, request_id=op.request_id, executor=owner, step="restored"
                )
                self._sessions.execute(sid, step)
            self._point("revert.restored")
            self._finish(token, sid, op)
        return self._result(request_id, "reverted", sid)

    def _observe_runtime(self, state: SessionState) -> None:
        """The runtime a revert needs is there and is the one recorded."""
        last = state.last_completed
        if last is None:
            raise FailedPrecondition(NO_TURN_COMPLETED, reason="no_snapshot")
        if last.snapshot.workspace_tree is None:
            raise FailedPrecondition(
                f"the last completed turn, {last.turn_id}, has no snapshot to revert to "
                "(snapshots are off for this session, or taking it failed: "
                "`session snapshots` lists what there is)",
                reason="no_snapshot",
            )
        snap = last.snapshot
        workspace = Path(state.workspace)
        if not is_repository(workspace):
            raise FailedPrecondition(
                f"the workspace {workspace} is gone or is no repository", reason="runtime_missing"
            )
        if snap.workspace_commit is None or not commit_exists(workspace, snap.workspace_commit):
            raise FailedPrecondition(
                "the snapshot commit is not in the workspace repository (replaced?)",
                reason="runtime_replaced",
            )
        if snap.host_artifact_copy is not None:
            copy = Path(snap.host_artifact_copy)
            if not copy.is_file() or sha256_file(copy) != snap.host_artifact_digest:
                raise FailedPrecondition(
                    f"the snapshot's host artifact copy {copy} is missing or corrupt",
                    reason="artifact_copy_missing",
                )

    def _restore(self, state: SessionState, op: PendingOperation) -> None:
        """Everything here is idempotent: a retry after a crash anywhere in it runs it
        all again, and only the durable ``restored`` step ends it."""
        assert state.last_completed is not None
        snap = state.last_completed.snapshot
        assert snap.workspace_tree is not None
        assert snap.workspace_commit is not None
        workspace = Path(state.workspace)
        sid = state.session_id
        # Named by the operation, not this request: every joined retry keeps (and
        # finds) the agent's later commits under the same private ref, and what the
        # restore moved aside under the same directory.
        restore_head(workspace, sid, op.request_id, snap.workspace_commit, self._point)
        preserver = Preserver(workspace, preserve_root(workspace, sid, op.request_id))
        since = state.last_completed.completed_at  # ignored rules newer: the undone turns'
        restore_workspace(workspace, snap.workspace_tree, preserver, sid, since=since)
        self._point("revert.restoring")
        if snap.host_artifact_copy is not None and snap.host_artifact_path is not None:
            copy, live = Path(snap.host_artifact_copy), Path(snap.host_artifact_path)
            if live.is_file() and sha256_file(live) != snap.host_artifact_digest:
                # The crashed turn's transcript: the snapshot's copy cannot bring it back.
                preserver.move_file(live, f"{ARTIFACT_DIR}/{live.name}")
            restore_artifact(copy, live, snap.host_artifact_digest)

    # --- delete -------------------------------------------------------------------------

    def delete(self, session_id: str, request_id: str) -> OperationResult:
        check_request_id(request_id)
        sid = self._sessions.resolve_id(session_id)
        known = self._known(request_id, "delete", sid)
        if known is not None and known.status == "finished":
            return OperationResult(request_id, "deleted", self._sessions.load(sid), known)
        state = self._sessions.load(sid)
        if state.status == "deleted":
            return OperationResult(request_id, "unchanged", state)
        with self._lease(state) as token:
            op = self._begin(token, state, request_id, "delete", "")
            self._point("delete.admitted")
            # Before the session is marked deleted: a crash here leaves the delete
            # pending and the retry removes whatever is left.
            remove_all(Path(state.workspace), sid)
            remove_reverted(Path(state.workspace), sid)
            self._finish(token, sid, op)
        return self._result(request_id, "deleted", sid)

    # --- shared -------------------------------------------------------------------------

    @contextmanager
    def _lease(self, state: SessionState) -> Iterator[LeaseToken]:
        """The session lease for one operation, given back at the end (a closed session
        grants one only to delete it)."""
        sid = state.session_id
        token = self._leases.acquire(sid, "delete" if state.status == "closed" else "work")
        try:
            yield token
        finally:
            # Fenced off, or the session deleted: release ignores what is gone.
            self._leases.release(sid)

    def _begin(
        self,
        token: LeaseToken,
        state: SessionState,
        request_id: str,
        kind: OperationKind,
        note: str,
    ) -> PendingOperation:
        """Start or join ``kind`` (one transaction); the pending operation it left."""
        owner = self._leases.owner
        pending = state.operation
        # An executor SIGKILLed mid-operation is proven dead by its pid's start time,
        # so a retry on this machine takes over at once instead of waiting for expiry.
        takeover = None
        if pending is not None and pending.executor != owner:
            takeover = pending.executor if owner_is_dead(pending.executor) else None
        expires = self._sessions.now() + timedelta(seconds=self._leases.lease_seconds)
        begun = self._sessions.execute(
            state.session_id,
            BeginOperation(
                lease=token,
                request_id=request_id,
                kind=kind,
                payload_digest=payload_digest(kind, state.session_id),
                executor=owner,
                lease_expires_at=expires,
                expected_generation=state.generation,
                crash_note=note,
                takeover_from=takeover,
            ),
        ).state
        if begun is None or begun.operation is None:
            raise FailedPrecondition("the operation did not start", reason="operation_not_pending")
        return begun.operation

    def _finish(self, token: LeaseToken, sid: str, op: PendingOperation) -> None:
        finish = FinishOperation(
            lease=token,
            request_id=op.request_id,
            executor=self._leases.owner,
            generation=op.generation,
        )
        self._sessions.execute(sid, finish)

    def _result(self, request_id: str, result: Result, sid: str) -> OperationResult:
        return OperationResult(request_id, result, self._sessions.load(sid), self.show(request_id))
