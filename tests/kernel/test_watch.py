"""Gates, monitors and evidence transitions."""

from __future__ import annotations

from datetime import datetime

from turnkeeper.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from turnkeeper.kernel.events import (
    EvidenceRecorded,
    GateOpened,
    GateResolved,
    MonitorAdded,
    MonitorRetired,
    ReadbackRecorded,
)
from turnkeeper.kernel.model import GateResolution, GateStatus, Readback
from turnkeeper.kernel.proposals import (
    AddMonitor,
    OpenGate,
    RecordEvidence,
    RecordReadback,
    ResolveGate,
    RetireMonitor,
)

from .support import T0, Goal, add_todo, at, new_goal

# --- gates ----------------------------------------------------------------------


def test_open_and_resolve_gate() -> None:
    goal = new_goal(criteria=())
    add_todo(goal, "t1")
    assert goal.apply(OpenGate(gate_id="g", title="deploy?", scope=["t1"])) == [
        GateOpened(gate_id="g", title="deploy?", blocking=True, scope=["t1"], at=T0)
    ]
    events = goal.apply(
        ResolveGate(gate_id="g", by="ops", decision="approved", payload={"ticket": 7}), at(5)
    )
    resolution = GateResolution(by="ops", decision="approved", payload={"ticket": 7}, at=at(5))
    assert events == [GateResolved(gate_id="g", resolution=resolution, at=at(5))]
    assert goal.s.gates["g"].status is GateStatus.RESOLVED
    goal.reject(
        ResolveGate(gate_id="g", by="ops", decision="rejected"),
        FailedPrecondition,
        "gate_already_resolved",
    )


def test_gate_rejections() -> None:
    goal = new_goal(criteria=())
    goal.reject(OpenGate(gate_id="g", title="x", scope=["zz"]), NotFound, "todo_not_found")
    goal.reject(OpenGate(gate_id="g", title=""), InvalidArgument, "empty_text")
    goal.apply(OpenGate(gate_id="g", title="x"))
    goal.reject(OpenGate(gate_id="g", title="x"), AlreadyExists, "gate_exists")
    goal.reject(ResolveGate(gate_id="zz", by="a", decision="approved"), NotFound, "gate_not_found")
    goal.reject(ResolveGate(gate_id="g", by="a", decision=""), InvalidArgument, "empty_text")


# --- monitors -------------------------------------------------------------------


def _with_monitor(goal: Goal, stall_limit: int = 3) -> None:
    goal.apply(AddMonitor(monitor_id="m", target="ci", cadence_seconds=60, stall_limit=stall_limit))


def test_add_monitor_is_due_at_once() -> None:
    goal = new_goal(criteria=())
    events = goal.apply(
        AddMonitor(
            monitor_id="m", target="pr#1", cadence_seconds=30, required=True, freshness_seconds=120
        )
    )
    assert events == [
        MonitorAdded(
            monitor_id="m",
            target="pr#1",
            cadence_seconds=30,
            stall_limit=3,
            required=True,
            freshness_seconds=120,
            next_due=T0,
            at=T0,
        )
    ]


def test_add_monitor_rejections() -> None:
    goal = new_goal(criteria=())
    goal.reject(
        AddMonitor(monitor_id="m", target="x", cadence_seconds=0),
        InvalidArgument,
        "non_positive_value",
    )
    goal.reject(
        AddMonitor(monitor_id="m", target="x", cadence_seconds=-5),
        InvalidArgument,
        "non_positive_value",
    )
    goal.reject(
        AddMonitor(monitor_id="m", target="", cadence_seconds=5), InvalidArgument, "empty_text"
    )
    goal.reject(
        AddMonitor(monitor_id="m", target="x", cadence_seconds=5, stall_limit=-1),
        InvalidArgument,
        "negative_value",
    )
    goal.reject(
        AddMonitor(monitor_id="m", target="x", cadence_seconds=5, required=True),
        InvalidArgument,
        "freshness_required",
    )
    _with_monitor(goal)
    goal.reject(
        AddMonitor(monitor_id="m", target="x", cadence_seconds=5), AlreadyExists, "monitor_exists"
    )


def test_readback_streak_and_next_due() -> None:
    goal = new_goal(criteria=())
    _with_monitor(goal, stall_limit=5)
    assert goal.apply(RecordReadback(monitor_id="m", value={"state": "pending"}), at(10)) == [
        ReadbackRecorded(monitor_id="m", value={"state": "pending"}, observed_at=at(10), at=at(10))
    ]
    goal.apply(RecordReadback(monitor_id="m", value={"state": "pending"}, at=at(15)), at(20))
    monitor = goal.s.monitors["m"]
    assert monitor.no_change_streak == 1
    assert monitor.next_due == at(75)
    assert monitor.last_readback == Readback(value={"state": "pending"}, at=at(15))
    goal.apply(RecordReadback(monitor_id="m", value={"state": "green"}), at(30))
    assert goal.s.monitors["m"].no_change_streak == 0


def test_readback_rejections() -> None:
    goal = new_goal(criteria=())
    _with_monitor(goal)
    goal.reject(RecordReadback(monitor_id="zz", value=1), NotFound, "monitor_not_found")
    goal.reject(
        RecordReadback(monitor_id="m", value=1, at=at(5)), InvalidArgument, "time_in_future"
    )
    goal.reject(
        RecordReadback(monitor_id="m", value=1, at=datetime(2025, 1, 1)),
        InvalidArgument,
        "naive_datetime",
    )
    goal.apply(RecordReadback(monitor_id="m", value=1), at(10))
    goal.reject(
        RecordReadback(monitor_id="m", value=1, at=at(5)),
        FailedPrecondition,
        "readback_out_of_order",
        now=at(11),
    )
    assert goal.apply(RetireMonitor(monitor_id="m", reason="merged"), at(12)) == [
        MonitorRetired(monitor_id="m", reason="merged", at=at(12))
    ]
    goal.reject(
        RecordReadback(monitor_id="m", value=1), FailedPrecondition, "monitor_retired", now=at(13)
    )
    goal.reject(
        RetireMonitor(monitor_id="m", reason="again"), FailedPrecondition, "monitor_retired"
    )
    goal.reject(RetireMonitor(monitor_id="zz", reason="x"), NotFound, "monitor_not_found")


# --- evidence -------------------------------------------------------------------


def test_record_evidence_key_defaults_to_command() -> None:
    goal = new_goal(criteria=())
    events = goal.apply(
        RecordEvidence(
            evidence_id="e1",
            command="pytest -q",
            revision="abc",
            exit_code=0,
            output_digest="sha256:1",
            recorded_at=at(-5),
            freshness_seconds=300,
        ),
        at(1),
    )
    assert events == [
        EvidenceRecorded(
            evidence_id="e1",
            key="pytest -q",
            command="pytest -q",
            revision="abc",
            exit_code=0,
            output_digest="sha256:1",
            recorded_at=at(-5),
            freshness_seconds=300,
            at=at(1),
        )
    ]
    assert goal.s.evidence["e1"].is_fresh(at(295))
    assert not goal.s.evidence["e1"].is_fresh(at(296))


def test_record_evidence_rejections() -> None:
    goal = new_goal(criteria=())
    base = {"evidence_id": "e1", "command": "pytest", "exit_code": 0, "freshness_seconds": 60}
    goal.reject(
        RecordEvidence.model_validate({**base, "command": ""}), InvalidArgument, "empty_text"
    )
    goal.reject(
        RecordEvidence.model_validate({**base, "freshness_seconds": 0}),
        InvalidArgument,
        "non_positive_value",
    )
    goal.reject(
        RecordEvidence.model_validate({**base, "recorded_at": at(9)}),
        InvalidArgument,
        "time_in_future",
    )
    goal.apply(RecordEvidence.model_validate(base))
    goal.reject(RecordEvidence.model_validate(base), AlreadyExists, "evidence_exists")
