"""The turn driver: one turn through the transaction of DESIGN.md, each step durable in order.

1. claim the todo, then ``turn.accepted`` (fsync'd)
2. host started — process identity (a cheap commit: recovery finds the process by marker)
3. host events, journaled in batches by host sequence number (cheap commits)
4. receipt (fsync'd): success with the result, or failure with a host recovery record
5. write-back through the goal kernel, then ``turn.written_back``
6. effects the result requested: intent, readback, apply, outcome (runtime/effects.py)
7. ``turn.completed`` with the snapshot reference

A crash point sits after each step, so tests can SIGKILL the real process there.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from turnkeeper.effects import ProviderLoader, load_provider, split_host_config
from turnkeeper.errors import TurnkeeperError
from turnkeeper.hosts import (
    Host,
    HostErrorKind,
    HostEvent,
    HostOutcome,
    HostRun,
    HostSpawnFailed,
    HostStatus,
    TurnRequest,
    load_host,
)
from turnkeeper.hosts import ProcessIdentity as HostProcess
from turnkeeper.kernel.proposals import ClaimTodo
from turnkeeper.kernel.session import HostEvent as JournaledEvent
from turnkeeper.kernel.session import (
    HostRecoveryRecord,
    InteractionContract,
    LeaseToken,
    NextTurn,
    RecordHostEvents,
    RecordHostStarted,
    RecordReceipt,
    RenewLease,
    SessionState,
    TurnEnvelope,
    plan_effects,
)
from turnkeeper.kernel.session import ProcessIdentity as JournaledProcess
from turnkeeper.kernel.session.records import (
    ReceiptFailure,
    ReceiptSuccess,
    RecoveryBinding,
)
from turnkeeper.runtime.commits import TurnCommits
from turnkeeper.runtime.crashpoints import crash_point
from turnkeeper.runtime.effects import EffectRunner, EffectsSummary
from turnkeeper.runtime.goals import GoalService
from turnkeeper.runtime.lease_keeper import LeaseKeeper
from turnkeeper.runtime.sessions import SessionService
from turnkeeper.runtime.writeback import claim_owner, needs_outside_work, prepare_write_back

EVENT_BATCH = 100
DEFAULT_CONTRACT = InteractionContract(
    stop_condition="Stop when the todo is done or you need a human decision; report what you did."
)


HostLoader = Callable[[str, dict[str, Any]], Host]


@dataclass
class DriverConfig:
    lease_seconds: float = 120.0
    host_timeout_seconds: int = 3600
    # How a host kind becomes a Host: entry points by default; tests may inject.
    host_loader: HostLoader = load_host
    # How an effect provider kind becomes a provider (entry points by default).
    provider_loader: ProviderLoader = load_provider
    # Snapshots kept per session (None: TURNKEEPER_SNAPSHOT_RETAIN or 20).
    snapshot_retain: int | None = None


@dataclass(frozen=True)
class TurnResult:
    turn_id: str
    succeeded: bool
    outcome: HostOutcome


def to_journaled(identity: HostProcess) -> JournaledProcess:
    return JournaledProcess(
        pid=identity.pid, start_fingerprint=identity.fingerprint, marker=identity.marker
    )


def _spawn_failure(error: TurnkeeperError) -> HostOutcome:
    return HostOutcome(
        status=HostStatus.FAILED,
        error_kind=HostErrorKind.SPAWN,
        message=f"host not started: {error.code.value} ({error.reason}): {error.message}",
    )


def _artifact_digest(result: dict[str, Any]) -> str | None:
    """The digest of the host session artifact (an agent CLI's session file) the host
    reported, recorded in the turn's snapshot so a later revert can check its copy."""
    artifact = result.get("host_artifact")
    digest = artifact.get("sha256") if isinstance(artifact, dict) else None
    return digest if isinstance(digest, str) else None


def _artifact_path(result: dict[str, Any]) -> str | None:
    artifact = result.get("host_artifact")
    path = artifact.get("path") if isinstance(artifact, dict) else None
    return path if isinstance(path, str) else None


def new_turn_id() -> str:
    return f"turn-{uuid.uuid4().hex[:16]}"


class TurnDriver:
    def __init__(
        self,
        sessions: SessionService,
        goals: GoalService,
        token: Callable[[str], LeaseToken],
        config: DriverConfig | None = None,
    ):
        self._sessions = sessions
        self._goals = goals
        self._token = token  # the lease this controller holds on a session
        self._config = config or DriverConfig()
        self._effects = EffectRunner(sessions, goals, token, self._config.provider_loader)
        self._commits = TurnCommits(
            sessions.store, sessions.now, token, retain=self._config.snapshot_retain
        )
        self._lease_keeper = LeaseKeeper(self._renew_lease, self._config.lease_seconds / 3)

    # --- one turn -------------------------------------------------------------------

    def run_turn(self, session: SessionState, spec: NextTurn) -> TurnResult:
        sid = session.session_id
        envelope = TurnEnvelope.create(
            turn_id=new_turn_id(),
            session_id=sid,
            generation=session.generation,
            goal_id=session.goal_id,
            spec=spec,
            contract=DEFAULT_CONTRACT,
        )
        claim, todo_title = self._claim(session, envelope)
        self._commits.intent(session, envelope, claim)
        crash_point("turn.accepted")
        request = self._request(session, envelope, todo_title)
        try:
            # The "effects" section is turnkeeper's (runtime/effects.py), not the host's.
            host_config = split_host_config(session.host_config)
            host = self._config.host_loader(session.host_kind, host_config)
            run = host.start(request)
        except HostSpawnFailed as failed:
            return self._finish(session, envelope, failed.outcome)
        except TurnkeeperError as error:
            # The host cannot be loaded or rejects its config (an unknown kind, a plugin
            # since uninstalled): nothing started. Raising would leave the accepted turn
            # in flight, lost on every restart and accepted again without end; a spawn
            # failure puts the turn under the bounded recovery policy instead.
            return self._finish(session, envelope, _spawn_failure(error))
        crash_point("host.spawned")
        self._sessions.execute(
            sid,
            RecordHostStarted(
                lease=self._token(sid),
                turn_id=envelope.turn_id,
                host_kind=session.host_kind,
                process=to_journaled(run.identity),
            ),
            durable=False,  # the recovery table finds the process by marker if this is lost
        )
        crash_point("host.started")
        outcome = self._pump(session, envelope, run)
        return self._finish(session, envelope, outcome)

    def _claim(
        self, session: SessionState, envelope: TurnEnvelope
    ) -> tuple[ClaimTodo | None, str | None]:
        """The claim to commit with the turn's intent (None: nothing to claim), and the title."""
        if envelope.todo_id is None:
            return None, None
        until = self._sessions.now() + timedelta(
            seconds=self._config.host_timeout_seconds + self._config.lease_seconds
        )
        owner = claim_owner(session.session_id)
        todo = self._goals.load(session.goal_id).todos.get(envelope.todo_id)
        title = todo.title if todo is not None else None
        if todo is not None and todo.claim is not None and todo.claim.owner == owner:
            return None, title  # our own live claim from the turn this one continues
        return ClaimTodo(todo_id=envelope.todo_id, owner=owner, lease_expires_at=until), title

    def _request(
        self, session: SessionState, envelope: TurnEnvelope, todo_title: str | None
    ) -> TurnRequest:
        instructions = envelope.instructions
        if envelope.reconcile_note:
            instructions = f"{instructions}\n\n{envelope.reconcile_note}"
        return TurnRequest(
            turn_id=envelope.turn_id,
            session_id=session.session_id,
            generation=session.generation,
            attempt=envelope.attempt,
            kind=envelope.kind,
            instructions=instructions,
            workspace=Path(session.workspace),
            host_session_handle=session.host_session_handle
            if envelope.resume_host_session
            else None,
            todo_id=envelope.todo_id,
            todo_title=todo_title,
            timeout_seconds=self._config.host_timeout_seconds,
        )

    def _pump(self, session: SessionState, envelope: TurnEnvelope, run: HostRun) -> HostOutcome:
        """Journal the host's events in order while it runs, renewing our lease meanwhile."""
        sid = session.session_id
        with self._lease_keeper.keeping(sid):
            batch: list[HostEvent] = []
            for event in run.events(after_seq=0):
                batch.append(event)
                if len(batch) >= EVENT_BATCH or event.kind in ("session.bound", "result"):
                    self._journal(sid, envelope.turn_id, batch)
                    batch = []
            if batch:
                self._journal(sid, envelope.turn_id, batch)
            return run.wait(timeout=None)

    def _journal(self, sid: str, turn_id: str, batch: list[HostEvent]) -> None:
        handle = next(
            (
                str(e.data["handle"])
                for e in batch
                if e.kind == "session.bound" and isinstance(e.data.get("handle"), str)
            ),
            None,
        )
        events = tuple(JournaledEvent(seq=e.seq, kind=e.kind, data=e.data) for e in batch)
        command = RecordHostEvents(
            lease=self._token(sid), turn_id=turn_id, events=events, host_session_handle=handle
        )
        self._sessions.execute(sid, command, durable=False)
        crash_point("host.events")

    def _renew_lease(self, sid: str) -> bool:
        until = self._sessions.now() + timedelta(seconds=self._config.lease_seconds)
        try:
            self._sessions.execute(sid, RenewLease(lease=self._token(sid), expires_at=until))
        except (TurnkeeperError, KeyError):
            return False  # fenced off, store gone, lease given up: the turn's writes say so
        return True

    # --- receipt, write-back, completion ------------------------------------------------

    def _finish(
        self, session: SessionState, envelope: TurnEnvelope, outcome: HostOutcome
    ) -> TurnResult:
        sid = session.session_id
        token = self._token(sid)
        if outcome.status.value == "succeeded":
            result = dict(outcome.result or {})
            receipt: ReceiptSuccess | ReceiptFailure = ReceiptSuccess(
                result=result, host_artifact_digest=_artifact_digest(result)
            )
        else:
            current = self._sessions.load(sid)
            receipt = ReceiptFailure(
                error_kind=(outcome.error_kind.value if outcome.error_kind else "exit_code"),
                exit_code=outcome.exit_code,
                signal=outcome.signal,
                message=(outcome.message or "")[:2000],
                host_recovery=HostRecoveryRecord(
                    binding=RecoveryBinding(
                        session_id=sid,
                        generation=current.generation,
                        host_kind=current.host_kind,
                        host_session_handle=current.host_session_handle,
                        turn_id=envelope.turn_id,
                        attempt=envelope.attempt,
                    )
                ),
            )
        if isinstance(receipt, ReceiptSuccess) and not needs_outside_work(receipt.result):
            # Nothing runs outside the database: receipt, write-back and completion
            # are one atomic commit, the second and last fsync of the turn.
            prepared = prepare_write_back(
                self._goals.load(session.goal_id), envelope, Path(session.workspace), receipt.result
            )
            self._commits.outcome(
                session,
                envelope,
                prepared,
                receipt=receipt,
                complete=True,
                artifact_digest=receipt.host_artifact_digest,
                artifact_path=_artifact_path(receipt.result),
            )
            crash_point("completed")
        else:
            self._sessions.execute(
                sid, RecordReceipt(lease=token, turn_id=envelope.turn_id, receipt=receipt)
            )
            crash_point("receipt")
            if isinstance(receipt, ReceiptSuccess):
                self.complete_from_receipt(self._sessions.load(sid), envelope, receipt)
        return TurnResult(
            turn_id=envelope.turn_id, succeeded=isinstance(receipt, ReceiptSuccess), outcome=outcome
        )

    def complete_from_receipt(
        self, session: SessionState, envelope: TurnEnvelope, receipt: ReceiptSuccess
    ) -> EffectsSummary:
        """Steps 5-7 from a durable receipt: also what recovery runs after a crash."""
        sid = session.session_id
        workspace = Path(session.workspace)
        in_flight = session.in_flight
        if in_flight is not None and in_flight.phase == "receipt":
            goal = self._goals.load(session.goal_id)
            prepared = prepare_write_back(goal, envelope, workspace, receipt.result)
            self._commits.outcome(
                session, envelope, prepared, receipt=None, complete=False, artifact_digest=None
            )
            crash_point("written_back")
        effects = EffectsSummary()
        if plan_effects(receipt.result, envelope.idempotency_key):
            with self._lease_keeper.keeping(sid):  # a provider may be slow to answer
                effects = self._effects.settle(sid, envelope.turn_id)
        self._commits.complete(
            session, envelope, receipt.host_artifact_digest, _artifact_path(receipt.result)
        )
        crash_point("completed")
        return effects
