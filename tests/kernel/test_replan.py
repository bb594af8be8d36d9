"""Replan obligations: what raises them, what may discharge them, what may not."""

from __future__ import annotations

from turnkeeper.errors import FailedPrecondition, InvalidArgument, NotFound
from turnkeeper.kernel import audit
from turnkeeper.kernel.events import (
    EvidenceRecorded,
    NoFollowUpRecorded,
    ObligationDischarged,
    ObligationRaised,
    TodoAdded,
    TodoCompleted,
)
from turnkeeper.kernel.model import (
    Discharge,
    NoFollowUp,
    NoFollowUpReason,
    ObligationStatus,
    ReplanTrigger,
    VisionStatus,
)
from turnkeeper.kernel.proposals import (
    AddMonitor,
    AddTodo,
    CompleteTodo,
    CriterionSpec,
    Note,
    Reassess,
    RecordEvidence,
    RecordNoFollowUp,
    RecordReadback,
    RecordVisionCheckpoint,
    SatisfyCriterion,
    SupersedeTodo,
    TodoSpec,
    UpdateAcceptance,
)

from .support import GOAL, T0, Goal, add_todo, at, claim, evidence, new_goal


def _exhausted_goal() -> Goal:
    """A goal whose only todo is done while its criterion is unmet: obl-1 is open."""
    goal = new_goal()
    add_todo(goal, "t1")
    goal.apply(CompleteTodo(todo_id="t1", fence=claim(goal, "t1")))
    assert [o.trigger for o in goal.s.open_obligations()] == [ReplanTrigger.FRONTIER_EXHAUSTED]
    return goal


def _no_follow_up(*ids: str) -> RecordNoFollowUp:
    return RecordNoFollowUp(
        reason=NoFollowUpReason.NO_ACTION_NEEDED, summary="checked", discharges=list(ids)
    )


def test_frontier_exhausted_is_raised_by_the_proposal_that_exhausts_it() -> None:
    goal = new_goal()
    add_todo(goal, "t1")
    fence = claim(goal, "t1")
    events = goal.apply(CompleteTodo(todo_id="t1", fence=fence), at(1))
    assert events == [
        TodoCompleted(todo_id="t1", owner="a", epoch=1, evidence_ids=[], at=at(1)),
        ObligationRaised(
            obligation_id="obl-1",
            trigger=ReplanTrigger.FRONTIER_EXHAUSTED,
            subject=GOAL,
            fingerprint="todos=1,finished=1",
            detail="no runnable todo while criteria are unmet: c1",
            at=at(1),
        ),
    ]
    # Raising an obligation is a material refresh.
    assert goal.s.goal.refresh_seq == 1


def test_goal_without_todos_has_no_frontier_to_exhaust() -> None:
    goal = new_goal()
    assert goal.apply(Reassess()) == []


def test_no_duplicate_open_obligation() -> None:
    goal = _exhausted_goal()
    assert goal.apply(Reassess()) == []
    assert len(goal.s.obligations) == 1


def test_note_and_unchanged_vision_do_not_discharge() -> None:
    goal = _exhausted_goal()
    goal.reject(
        Note(author="a", text="re-assessed, continuing", discharges=["obl-1"]),
        FailedPrecondition,
        "replan_requires_delta",
    )
    for status in (VisionStatus.UNCHANGED, VisionStatus.NOT_NEEDED):
        goal.reject(
            RecordVisionCheckpoint(agent="p", status=status, reason="same", discharges=["obl-1"]),
            FailedPrecondition,
            "replan_requires_delta",
        )
    goal.apply(Note(author="a", text="re-assessed, continuing"))
    assert goal.s.obligations["obl-1"].status is ObligationStatus.OPEN


def test_add_todo_discharges_with_its_delta() -> None:
    goal = _exhausted_goal()
    events = goal.apply(
        AddTodo(todo=TodoSpec(todo_id="t2", title="next"), discharges=["obl-1"]), at(5)
    )
    assert events[1] == ObligationDischarged(
        obligation_id="obl-1", discharge=Discharge(by="add_todo", ref="t2", at=at(5)), at=at(5)
    )
    assert goal.s.obligations["obl-1"].status is ObligationStatus.DISCHARGED
    goal.reject(_no_follow_up("obl-1"), FailedPrecondition, "obligation_not_open")


def test_other_qualifying_deltas_discharge() -> None:
    goal = _exhausted_goal()
    goal.apply(UpdateAcceptance(criteria=[CriterionSpec(id="c2", text="y")], discharges=["obl-1"]))
    assert not goal.s.open_obligations()

    goal = _exhausted_goal()
    goal.apply(
        RecordVisionCheckpoint(
            agent="p", status=VisionStatus.PATCHED, vision_text="v", discharges=["obl-1"]
        )
    )
    assert not goal.s.open_obligations()

    goal = _exhausted_goal()
    events = goal.apply(_no_follow_up("obl-1"), at(2))
    assert events[0] == NoFollowUpRecorded(
        record=NoFollowUp(reason=NoFollowUpReason.NO_ACTION_NEEDED, summary="checked", at=at(2)),
        at=at(2),
    )
    assert not goal.s.open_obligations()
    # The same occurrence is not raised again once discharged.
    assert goal.apply(Reassess()) == []


def test_supersede_discharges() -> None:
    goal = new_goal()
    add_todo(goal, "t1")
    add_todo(goal, "t2")
    goal.apply(SupersedeTodo(todo_id="t1", reason="moot"))
    goal.apply(SupersedeTodo(todo_id="t2", reason="moot"))
    (obligation,) = goal.s.open_obligations()
    add_todo(goal, "t3")
    goal.apply(SupersedeTodo(todo_id="t3", reason="replaced", discharges=[obligation.id]))
    assert goal.s.obligations[obligation.id].status is ObligationStatus.DISCHARGED


def test_discharge_rejections() -> None:
    goal = _exhausted_goal()
    goal.reject(_no_follow_up(), InvalidArgument, "nothing_to_discharge")
    goal.reject(_no_follow_up("obl-9"), NotFound, "obligation_not_found")
    goal.reject(_no_follow_up("obl-1", "obl-1"), InvalidArgument, "duplicate_value")
    goal.reject(
        RecordNoFollowUp(reason=NoFollowUpReason.OUT_OF_SCOPE, summary="", discharges=["obl-1"]),
        InvalidArgument,
        "empty_text",
    )


def test_monitor_stall_raises_once_per_occurrence() -> None:
    goal = new_goal(criteria=())
    goal.apply(AddMonitor(monitor_id="m", target="pr", cadence_seconds=10, stall_limit=1))
    goal.apply(RecordReadback(monitor_id="m", value="pending"), at(1))
    assert goal.apply(RecordReadback(monitor_id="m", value="pending"), at(2))[1:] == []
    events = goal.apply(RecordReadback(monitor_id="m", value="pending"), at(3))
    assert isinstance(events[1], ObligationRaised)
    assert events[1].trigger is ReplanTrigger.MONITOR_STALLED
    assert events[1].subject == "m"
    goal.apply(_no_follow_up(events[1].obligation_id), at(4))
    # Same stall continues: no new obligation. A new stall after a change: a new one.
    assert goal.apply(RecordReadback(monitor_id="m", value="pending"), at(5))[1:] == []
    goal.apply(RecordReadback(monitor_id="m", value="merged"), at(6))
    goal.apply(RecordReadback(monitor_id="m", value="merged"), at(7))
    assert len(goal.apply(RecordReadback(monitor_id="m", value="merged"), at(8))) == 2


def test_evidence_contradicted_when_relied_key_now_fails() -> None:
    goal = new_goal(criteria=())
    add_todo(goal, "t1", required_evidence=("pytest",))
    evidence(goal, "e1")
    goal.apply(CompleteTodo(todo_id="t1", fence=claim(goal, "t1"), evidence_ids=["e1"]))
    events = goal.apply(
        RecordEvidence(evidence_id="e2", command="pytest", exit_code=1, freshness_seconds=60),
        at(1),
    )
    assert [type(e) for e in events] == [EvidenceRecorded, ObligationRaised]
    raised = events[1]
    assert isinstance(raised, ObligationRaised)
    assert (raised.trigger, raised.subject, raised.fingerprint) == (
        ReplanTrigger.EVIDENCE_CONTRADICTED,
        "pytest",
        "e2",
    )
    # Re-running the still-failing command is the same occurrence.
    evidence(goal, "e3", exit_code=1, now=at(2))
    assert len(goal.s.obligations) == 1
    assert audit(goal.s, at(2)).retryable_postconditions == 1


def test_failing_evidence_nobody_relied_on_is_only_a_retryable_postcondition() -> None:
    goal = new_goal(criteria=())
    evidence(goal, "e1", exit_code=2)
    assert not goal.s.obligations
    report = audit(goal.s, T0)
    assert report.retryable_postconditions == 1
    evidence(goal, "e2", now=at(1))
    assert audit(goal.s, at(1)).retryable_postconditions == 0


def test_evidence_stale_needs_reassess() -> None:
    goal = new_goal()
    evidence(goal, "e1", freshness=100)
    goal.apply(SatisfyCriterion(criterion_id="c1", evidence_ids=["e1"]))
    # Other proposals do not read the clock for triggers: only the note is emitted.
    assert [e.type for e in goal.apply(Note(author="a", text="later"), at(101))] == [
        "note_recorded"
    ]
    report = audit(goal.s, at(101))
    assert report.unraised_replan_triggers == 1
    assert not report.terminal
    events = goal.apply(Reassess(), at(101))
    assert len(events) == 1
    assert isinstance(events[0], ObligationRaised)
    assert events[0].trigger is ReplanTrigger.EVIDENCE_STALE
    assert audit(goal.s, at(101)).unraised_replan_triggers == 0
    assert audit(goal.s, at(101)).replan_obligations == 1


def test_successor_needed_is_raised_and_discharged_by_linking() -> None:
    goal = new_goal(criteria=())
    add_todo(goal, "t1", successor_required=True)
    events = goal.apply(CompleteTodo(todo_id="t1", fence=claim(goal, "t1")), at(1))
    raised = events[1]
    assert isinstance(raised, ObligationRaised)
    assert (raised.trigger, raised.subject) == (ReplanTrigger.SUCCESSOR_NEEDED, "t1")
    assert audit(goal.s, at(1)).pending_successors == 1
    events = goal.apply(
        AddTodo(todo=TodoSpec(todo_id="t2", title="follow-up"), successor_of="t1"), at(2)
    )
    assert events == [
        TodoAdded(
            todo_id="t2",
            title="follow-up",
            depends_on=[],
            required_evidence=[],
            successor_required=False,
            successor_of="t1",
            at=at(2),
        ),
        ObligationDischarged(
            obligation_id=raised.obligation_id,
            discharge=Discharge(by="add_todo", ref="t2", at=at(2)),
            at=at(2),
        ),
    ]
    assert audit(goal.s, at(2)).pending_successors == 0
