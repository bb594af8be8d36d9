"""Builders shared by the session kernel tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from turnkeeper.errors import TurnkeeperError
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.kernel.session import (
    AcceptTurn,
    AcquireLease,
    CompleteTurn,
    CreateSession,
    HostRecoveryRecord,
    InteractionContract,
    LeaseToken,
    NextTurn,
    ReceiptFailure,
    ReceiptSuccess,
    RecordHostStarted,
    RecordReceipt,
    RecordWriteBack,
    RecoveryBinding,
    SessionCommand,
    SessionEvent,
    SessionState,
    SnapshotRef,
    TurnEnvelope,
    decide_session,
    evolve_session,
)
from turnkeeper.vocabulary import HostErrorKind

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SID = "6f1c9a52-3b7e-4d0a-9a43-0d4b8a1e2c11"
OTHER_SID = "1d2e3f40-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
GOAL = "goal-1"
OWNER = "worker-a"
HOST = "codex"
HANDLE = "thread-1"
CONTRACT = InteractionContract(stop_condition="stop when the todo's tests pass")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Harness:
    """Applies commands through decide + evolve and keeps the stream, like the runtime."""

    def __init__(self) -> None:
        self.state: SessionState | None = None
        self.events: list[SessionEvent] = []
        self.now = T0

    @property
    def s(self) -> SessionState:
        assert self.state is not None
        return self.state

    @property
    def token(self) -> LeaseToken:
        lease = self.s.lease
        assert lease.owner is not None
        return LeaseToken(owner=lease.owner, epoch=lease.epoch)

    def run(self, command: SessionCommand, now: datetime | None = None) -> list[SessionEvent]:
        events = decide_session(self.state, command, now or self.now)
        for event in events:
            self.state = evolve_session(self.state, event)
        self.events.extend(events)
        return events

    def rejects(
        self,
        command: SessionCommand,
        error: type[TurnkeeperError],
        reason: str,
        now: datetime | None = None,
    ) -> TurnkeeperError:
        before = self.state
        with pytest.raises(error) as info:
            decide_session(self.state, command, now or self.now)
        assert info.value.reason == reason, info.value.to_dict()
        assert self.state == before
        return info.value


def new_session(*, lease_seconds: float = 3600) -> Harness:
    h = Harness()
    h.run(CreateSession(session_id=SID, goal_id=GOAL, workspace="/ws", host_kind=HOST))
    h.run(AcquireLease(owner=OWNER, expires_at=at(lease_seconds)))
    return h


def spec(
    *,
    kind: str = "start",
    todo_id: str | None = "todo-1",
    attempt: int = 1,
    resume: bool = False,
    recovers: str | None = None,
    note: str | None = None,
) -> NextTurn:
    return NextTurn.model_validate(
        {
            "kind": kind,
            "todo_id": todo_id,
            "attempt": attempt,
            "instructions": f"do {todo_id}",
            "resume_host_session": resume,
            "reconcile_note": note,
            "recovers_turn_id": recovers,
        }
    )


def envelope(h: Harness, turn_id: str, next_turn: NextTurn | None = None) -> TurnEnvelope:
    return TurnEnvelope.create(
        turn_id=turn_id,
        session_id=h.s.session_id,
        generation=h.s.generation,
        goal_id=h.s.goal_id,
        spec=next_turn or spec(),
        contract=CONTRACT,
    )


def proc(pid: int = 4242) -> ProcessIdentity:
    return ProcessIdentity(pid=pid, start_time=pid, boot_id=f"boot-{pid}", marker=f"tk-{pid}")


def accept(h: Harness, turn_id: str, next_turn: NextTurn | None = None) -> list[SessionEvent]:
    return h.run(AcceptTurn(lease=h.token, envelope=envelope(h, turn_id, next_turn)))


def start_host(h: Harness, turn_id: str, handle: str | None = HANDLE) -> list[SessionEvent]:
    return h.run(
        RecordHostStarted(
            lease=h.token,
            turn_id=turn_id,
            host_kind=HOST,
            process=proc(),
            host_session_handle=handle,
        )
    )


def binding(h: Harness, turn_id: str, attempt: int = 1, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "session_id": h.s.session_id,
        "generation": h.s.generation,
        "host_kind": h.s.host_kind,
        "host_session_handle": h.s.host_session_handle,
        "turn_id": turn_id,
        "attempt": attempt,
    }
    data.update(overrides)
    return data


def record(h: Harness, turn_id: str, attempt: int = 1, **overrides: Any) -> dict[str, Any]:
    return {
        "schema_version": "turnkeeper.host_recovery.v1",
        "kind": "resume_session",
        "failed_phase": "host_execute",
        "binding": binding(h, turn_id, attempt, **overrides),
    }


def failure(
    h: Harness, turn_id: str, attempt: int = 1, error_kind: HostErrorKind = HostErrorKind.SIGNAL
) -> ReceiptFailure:
    rec = HostRecoveryRecord(binding=RecoveryBinding.model_validate(binding(h, turn_id, attempt)))
    return ReceiptFailure(error_kind=error_kind, signal=9, message="killed", host_recovery=rec)


def success() -> ReceiptSuccess:
    return ReceiptSuccess(result={"summary": "done", "proposals": ["p1"]})


def snapshot(seq: int = 7) -> SnapshotRef:
    return SnapshotRef(kernel_seq=seq, workspace_revision="abc123", host_artifact_digest="sha:1")


def finish(h: Harness, turn_id: str) -> None:
    """Receipt, write-back and completion of a started turn."""
    h.run(RecordReceipt(lease=h.token, turn_id=turn_id, receipt=success()))
    h.run(RecordWriteBack(lease=h.token, turn_id=turn_id))
    h.run(CompleteTurn(lease=h.token, turn_id=turn_id, snapshot=snapshot()))


def complete_turn(h: Harness, turn_id: str, next_turn: NextTurn | None = None) -> None:
    accept(h, turn_id, next_turn)
    start_host(h, turn_id)
    finish(h, turn_id)


def fail_turn(
    h: Harness,
    turn_id: str,
    next_turn: NextTurn | None = None,
    error_kind: HostErrorKind = HostErrorKind.SIGNAL,
) -> None:
    accept(h, turn_id, next_turn)
    start_host(h, turn_id)
    attempt = (next_turn or spec()).attempt
    h.run(
        RecordReceipt(
            lease=h.token, turn_id=turn_id, receipt=failure(h, turn_id, attempt, error_kind)
        )
    )
