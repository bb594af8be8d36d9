"""The turn's durable commits, each one atomic across the goal and session streams.

A turn's floor is two fsyncs: its intent before the host runs and its receipt
after. Steps that touch both streams share one commit (``append_many``):

* **intent** — the todo claim (goal) and ``turn.accepted`` (session);
* **outcome**, when writing back needs no outside work — the receipt, the goal's
  write-back events, ``turn.written_back`` and ``turn.completed``, all at once;
* otherwise the receipt commits alone (so a crash while checks or effects run
  keeps the host's result), then the goal's write-back together with
  ``turn.written_back``, then (after any effects) ``turn.completed``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from turnkeeper.errors import NotFound, TurnkeeperError
from turnkeeper.kernel import GoalEvent, GoalProposal, GoalState, decide_goal
from turnkeeper.kernel.limits import fit_title
from turnkeeper.kernel.session import (
    AcceptTurn,
    CompleteTurn,
    LeaseToken,
    RecordReceipt,
    RecordWriteBack,
    SessionCommand,
    SessionEvent,
    SessionState,
    TurnEnvelope,
    decide_session,
    evolve_session,
)
from turnkeeper.kernel.session.records import ReceiptSuccess, SnapshotRef
from turnkeeper.runtime.log.streams import (
    Folded,
    StreamPlan,
    decide_and_append_many,
    peek_stream,
)
from turnkeeper.runtime.services.goals import GOAL_CODEC, goal_stream, index_entries
from turnkeeper.runtime.services.sessions import SESSION_CODEC, session_index, session_stream
from turnkeeper.runtime.turn.writeback import (
    PreparedWriteBack,
    WriteBackResult,
    decide_write_back,
)
from turnkeeper.runtime.workspaces.snapshots import SnapshotClaims, artifact_path, capture
from turnkeeper.runtime.workspaces.workspace import git_revision, workspace_path
from turnkeeper.store.base import EventStore


@dataclass
class _WriteBackNote:
    """What the goal plan decided, for the session plan decided right after it."""

    result: WriteBackResult = field(default_factory=WriteBackResult)
    goal_head: int = 0


class TurnCommits:
    def __init__(
        self,
        store: EventStore,
        clock: Callable[[], datetime],
        token: Callable[[str], LeaseToken],
        retain: int | None = None,
    ):
        self._store = store
        self._clock = clock
        self._token = token
        self._retain = retain  # snapshots kept per session (None: the default)
        # Told of each write-back once it is durable (``run`` shows its refusals).
        self.written_back: Callable[[SessionState, TurnEnvelope, WriteBackResult], None] | None
        self.written_back = None

    def intent(
        self, session: SessionState, envelope: TurnEnvelope, claim: GoalProposal | None
    ) -> None:
        """Claim the todo (when given) and accept the turn, in one durable commit."""
        sid = session.session_id
        plans: list[StreamPlan[GoalState, GoalEvent] | StreamPlan[SessionState, SessionEvent]]
        plans = []
        if claim is not None:
            plans.append(
                self._goal_plan(session.goal_id, lambda s, now: decide_goal(s, claim, now))
            )
        accept = AcceptTurn(lease=self._token(sid), envelope=envelope)
        plans.append(self._session_plan(sid, lambda: [accept]))
        decide_and_append_many(self._store, plans)

    def outcome(
        self,
        session: SessionState,
        envelope: TurnEnvelope,
        prepared: PreparedWriteBack,
        *,
        receipt: ReceiptSuccess | None,
        complete: bool,
        artifact_digest: str | None,
        artifact_path: str | None = None,
        started: Sequence[SessionCommand] = (),
    ) -> WriteBackResult:
        """Write back (goal) and record it (session), with the receipt first when given
        and the completion last when ``complete``: one atomic, durable commit. The
        host's start, when no earlier write took it (``started``), goes before all."""
        sid = session.session_id
        note = _WriteBackNote()
        # The snapshot is taken before the commit that completes the turn: taking it
        # inside the plan would redo git work on every optimistic retry.
        snap = self._snapshot(sid, envelope, artifact_path) if complete else None

        def goal_events(state: GoalState, now: datetime) -> list[GoalEvent]:
            events, note.result = decide_write_back(state, prepared, envelope, now)
            note.goal_head = state.version + len(events)
            return events

        def session_commands() -> list[SessionCommand]:
            token = self._token(sid)
            commands: list[SessionCommand] = list(started)
            if receipt is not None:
                commands.append(
                    RecordReceipt(lease=token, turn_id=envelope.turn_id, receipt=receipt)
                )
            commands.append(
                RecordWriteBack(
                    lease=token,
                    turn_id=envelope.turn_id,
                    accepted=tuple(note.result.accepted),
                    rejected=tuple(note.result.rejected),
                    progress=note.result.progress,
                )
            )
            if snap is not None:
                snapshot = snap.model_copy(
                    update={
                        "kernel_seq": note.goal_head,
                        "host_artifact_digest": snap.host_artifact_digest or artifact_digest,
                    }
                )
                commands.append(
                    CompleteTurn(lease=token, turn_id=envelope.turn_id, snapshot=snapshot)
                )
            return commands

        decide_and_append_many(
            self._store,
            [
                self._goal_plan(session.goal_id, goal_events),
                self._session_plan(sid, session_commands),
            ],
        )
        if self.written_back is not None:
            self.written_back(session, envelope, note.result)
        return note.result

    def session(
        self, sid: str, commands: Sequence[SessionCommand], *, durable: bool = True
    ) -> None:
        """``commands`` in one commit of the session stream, each decided on the state
        the one before it left (a host's start with its first events, say)."""
        decide_and_append_many(
            self._store, [self._session_plan(sid, lambda: commands)], durable=durable
        )

    def complete(
        self,
        session: SessionState,
        envelope: TurnEnvelope,
        digest: str | None,
        artifact_path: str | None = None,
    ) -> None:
        """``turn.completed`` alone, after effects settled."""
        sid = session.session_id
        snap = self._snapshot(sid, envelope, artifact_path)
        snapshot = snap.model_copy(
            update={
                "kernel_seq": self._store.head(goal_stream(session.goal_id)),
                "host_artifact_digest": snap.host_artifact_digest or digest,
            }
        )
        done = CompleteTurn(lease=self._token(sid), turn_id=envelope.turn_id, snapshot=snapshot)
        decide_and_append_many(self._store, [self._session_plan(sid, lambda: [done])])

    def _snapshot(
        self, sid: str, envelope: TurnEnvelope, reported_artifact: str | None
    ) -> SnapshotRef:
        """Capture the workspace and host artifact for the turn about to complete.

        The session is read as this process last wrote it: every field read here moves
        only with a fenced command, so no other writer changes it while we hold the
        lease (and a commit after losing it is refused anyway)."""
        state, _ = peek_stream(self._store, SESSION_CODEC, session_stream(sid))
        if state is None:
            raise NotFound(f"session {sid!r} not found", reason="session_not_found")
        workspace = workspace_path(state.workspace)
        base = SnapshotRef(kernel_seq=0, workspace_revision=None, host_artifact_digest=None)
        if not state.snapshots:
            # Created with snapshots off (``session create --no-snapshots``): the turn
            # completes with a reference that holds no snapshot, and a revert is refused.
            return base.model_copy(update={"workspace_revision": git_revision(workspace)})
        in_flight = state.in_flight
        handle = (in_flight.host_session_handle if in_flight else None) or (
            state.host_session_handle
        )
        artifact = artifact_path(
            state.host_kind, state.host_config, handle, workspace, reported_artifact
        )
        # The goal's head as last seen here: every goal commit is durable, so the log
        # holds at least that much (a lower bound is all a claim needs).
        _, goal_seq = peek_stream(self._store, GOAL_CODEC, goal_stream(state.goal_id))
        claims = SnapshotClaims(turns_accepted=state.counters.turns_accepted, goal_seq=goal_seq)
        try:
            snap = capture(
                workspace,
                sid,
                envelope.turn_id,
                state.counters.turns_completed + 1,
                artifact,
                retain=self._retain,
                claims=claims,
            )
        except (TurnkeeperError, OSError) as exc:
            # A workspace git cannot snapshot (locked, corrupt) must not lose the turn's
            # completion: the turn completes with the failure recorded (status and
            # `session show` say so), the next turn tries again, and a revert to this
            # one is refused rather than restoring something else.
            failed = exc.message if isinstance(exc, TurnkeeperError) else f"{exc}"
            return self._unsnapshotted(base, workspace, failed)
        if snap is None:
            failed = f"the workspace {workspace} is no longer the top of a git repository"
            return self._unsnapshotted(base, workspace, failed)
        return base.model_copy(
            update={
                "workspace_revision": snap.parent,
                "snapshot_ref": snap.ref,
                "workspace_commit": snap.commit,
                "workspace_tree": snap.tree,
                "host_artifact_path": snap.artifact_path,
                "host_artifact_copy": snap.artifact_copy,
                "host_artifact_digest": snap.artifact_digest,
            }
        )

    @staticmethod
    def _unsnapshotted(base: SnapshotRef, workspace: Path, why: str) -> SnapshotRef:
        return base.model_copy(
            update={
                "workspace_revision": git_revision(workspace),
                "snapshot_failed": fit_title(f"snapshot failed: {why}"),
            }
        )

    # --- plans -------------------------------------------------------------------------

    def _goal_plan(
        self, goal_id: str, decide_goal: Callable[[GoalState, datetime], Sequence[GoalEvent]]
    ) -> StreamPlan[GoalState, GoalEvent]:
        def plan(state: GoalState | None) -> Sequence[GoalEvent]:
            if state is None:
                raise NotFound(f"goal {goal_id!r} not found", reason="goal_not_found")
            return decide_goal(state, self._clock())

        return StreamPlan(GOAL_CODEC, goal_stream(goal_id), plan, index_entries)

    def _session_plan(
        self, sid: str, commands: Callable[[], Sequence[SessionCommand]]
    ) -> StreamPlan[SessionState, SessionEvent]:
        def plan(state: SessionState | None) -> Folded[SessionState, SessionEvent]:
            now = self._clock()
            events: list[SessionEvent] = []
            for command in commands():
                decided = decide_session(state, command, now)
                for event in decided:
                    state = evolve_session(state, event)
                events.extend(decided)
            # Each command is decided on the state the last one left, so the events are
            # folded here already: handed on, the append does not fold them again.
            return Folded(events=events, after=state)

        return StreamPlan(SESSION_CODEC, session_stream(sid), plan, session_index)
