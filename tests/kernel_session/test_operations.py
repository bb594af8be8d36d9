"""The kernel's durable operations (delete, revert): pure decide + evolve.

Join of a pending operation of the same kind; conflict with another kind, except
delete superseding revert; the executor lease (contention, takeover of an expired or
proven-dead executor); generation compare-and-swap; request id reuse; revert admission
rules and the crash note; only the executor finishes; the old SnapshotRef still decodes.
"""

from __future__ import annotations

import pytest

from tests.kernel_session.helpers import (
    OWNER,
    Harness,
    accept,
    at,
    complete_turn,
    envelope,
    new_session,
)
from turnkeeper.errors import Aborted, AlreadyExists, FailedPrecondition
from turnkeeper.kernel.session import SetStatus
from turnkeeper.kernel.session.commands import (
    AcceptTurn,
    BeginOperation,
    FinishOperation,
    RecordOperationStep,
)
from turnkeeper.kernel.session.operation_model import OperationKind
from turnkeeper.kernel.session.operations import CRASH_NOTE_CODE
from turnkeeper.kernel.session.records import SnapshotRef

OTHER = "ctl:other:2:2"


def begin(
    h: Harness,
    request_id: str,
    kind: OperationKind = "revert",
    *,
    executor: str = OWNER,
    digest: str = "d",
    generation: int | None = None,
    expires: float = 600,
    takeover_from: str | None = None,
) -> BeginOperation:
    return BeginOperation(
        lease=h.token,
        request_id=request_id,
        kind=kind,
        payload_digest=f"{kind}-{digest}",
        executor=executor,
        lease_expires_at=at(expires),
        expected_generation=h.s.generation if generation is None else generation,
        crash_note="crashed here",
        takeover_from=takeover_from,
    )


def crashed(*, in_flight: bool = False) -> Harness:
    h = new_session()
    complete_turn(h, "t1")
    if in_flight:
        accept(h, "t2")
    h.run(SetStatus(lease=h.token, action="mark_crashed", reason="test"))
    return h


def test_revert_admission_fails_the_interrupted_turn_with_a_crash_note() -> None:
    h = crashed(in_flight=True)
    h.run(begin(h, "r1"))
    state = h.s
    assert state.in_flight is None
    assert state.last_turn_end is not None
    assert (state.last_turn_end.turn_id, state.last_turn_end.outcome) == ("t2", "failed")
    assert state.last_diagnostic is not None
    assert (state.last_diagnostic.code, state.last_diagnostic.message) == (
        CRASH_NOTE_CODE,
        "crashed here",
    )
    assert state.operation is not None and state.operation.snapshot_turn_id == "t1"
    h.rejects(
        FinishOperation(lease=h.token, request_id="r1", executor=OWNER, generation=1),
        FailedPrecondition,
        "not_restored",
    )
    step = RecordOperationStep(lease=h.token, request_id="r1", executor=OWNER, step="restored")
    h.run(step)
    assert h.run(step) == []  # a retried step is a no-op
    h.rejects(
        FinishOperation(lease=h.token, request_id="r1", executor=OTHER, generation=1),
        Aborted,
        "not_executor",
    )
    h.run(FinishOperation(lease=h.token, request_id="r1", executor=OWNER, generation=1))
    assert (h.s.status, h.s.operation) == ("suspended", None)


def test_revert_admission_rules() -> None:
    h = new_session()
    complete_turn(h, "t1")
    h.rejects(begin(h, "r1"), FailedPrecondition, "not_crashed")
    fresh = new_session()
    fresh.run(SetStatus(lease=fresh.token, action="mark_crashed"))
    fresh.rejects(begin(fresh, "r1"), FailedPrecondition, "no_snapshot")
    c = crashed()
    c.rejects(begin(c, "r1", generation=2), Aborted, "stale_generation")


def test_join_conflict_lease_and_request_id_reuse() -> None:
    h = crashed()
    h.run(begin(h, "r1"))
    h.rejects(begin(h, "r1", digest="other"), AlreadyExists, "request_id_reused")
    joined = h.run(begin(h, "r2"))  # a retried request joins
    assert [e.type for e in joined] == ["operation.joined"]
    h.rejects(begin(h, "r3", executor=OTHER), Aborted, "operation_leased")
    # Expired, or proven dead: the caller takes the operation over.
    h.run(begin(h, "r3", executor=OTHER, takeover_from=OWNER))
    assert h.s.operation is not None and h.s.operation.executor == OTHER
    h.run(begin(h, "r4", executor=OWNER), now=at(601))
    assert h.s.operation is not None and h.s.operation.executor == OWNER


def test_delete_supersedes_revert_but_not_the_other_way() -> None:
    h = crashed()
    h.run(begin(h, "r1"))
    events = h.run(begin(h, "d1", "delete"))
    assert [e.type for e in events] == ["operation.finished", "operation.started"]
    h.rejects(begin(h, "r2"), Aborted, "operation_conflict")
    h.run(FinishOperation(lease=h.token, request_id="d1", executor=OWNER, generation=1))
    assert h.s.status == "deleted"
    h.rejects(begin(h, "r3"), FailedPrecondition, "session_deleted")
    with pytest.raises(FailedPrecondition):
        h.run(SetStatus(lease=h.token, action="resume"))


def test_accept_is_refused_while_deleted() -> None:
    h = new_session()
    h.run(begin(h, "d1", "delete"))
    h.run(FinishOperation(lease=h.token, request_id="d1", executor=OWNER, generation=1))
    envelope_less = h.state
    with pytest.raises(FailedPrecondition):
        h.run(AcceptTurn(lease=h.token, envelope=envelope(h, "t9")))
    assert h.state == envelope_less


def test_old_snapshot_refs_still_decode() -> None:
    old = '{"kernel_seq": 3, "workspace_revision": null, "host_artifact_digest": null}'
    ref = SnapshotRef.model_validate_json(old)
    assert ref.workspace_tree is None and ref.snapshot_ref is None
