"""The terminal audit: each counter, and closing only when every one is zero."""

from __future__ import annotations

from turnkeeper.errors import FailedPrecondition
from turnkeeper.kernel import audit
from turnkeeper.kernel.audit import BlockerKind
from turnkeeper.kernel.model import NoFollowUpReason, VisionStatus
from turnkeeper.kernel.proposals import (
    AddMonitor,
    CloseGoal,
    CompleteTodo,
    OpenGate,
    RecordNoFollowUp,
    RecordReadback,
    RecordVisionCheckpoint,
    ResolveGate,
    RetireMonitor,
    SatisfyCriterion,
)

from .support import T0, add_todo, at, claim, evidence, new_goal

CLOSE = CloseGoal(reason=NoFollowUpReason.ACCEPTANCE_MET, summary="shipped and verified")


def test_fresh_goal_without_criteria_is_terminal() -> None:
    goal = new_goal(criteria=())
    report = audit(goal.s, T0)
    assert report.terminal
    assert report.blockers == []


def test_all_todos_ticked_is_not_enough() -> None:
    goal = new_goal(criteria=("tests_pass",), agents=("planner",))
    add_todo(goal, "t1", required_evidence=("pytest",))
    goal.apply(OpenGate(gate_id="release", title="release approval"))
    goal.apply(
        AddMonitor(
            monitor_id="ci", target="ci", cadence_seconds=60, required=True, freshness_seconds=300
        )
    )
    evidence(goal, "e1")
    report = audit(goal.s, T0)
    assert (
        report.open_todos,
        report.due_monitors,
        report.unresolved_blocking_gates,
        report.acceptance_gaps,
        report.stale_readbacks,
    ) == (1, 1, 1, 2, 1)

    # The gate scopes the whole goal, so it must be resolved before the work.
    goal.apply(ResolveGate(gate_id="release", by="lead", decision="approved"))
    fence = claim(goal, "t1")
    goal.apply(CompleteTodo(todo_id="t1", fence=fence, evidence_ids=["e1"]))
    # Ticking the only todo exhausted the frontier with acceptance unmet.
    report = audit(goal.s, at(1))
    assert report.open_todos == 0
    assert report.replan_obligations == 1
    assert not report.terminal
    goal.reject(CLOSE, FailedPrecondition, "goal_not_terminal", now=at(1))

    goal.apply(SatisfyCriterion(criterion_id="tests_pass", evidence_ids=["e1"]), at(2))
    (obligation,) = goal.s.open_obligations()
    goal.apply(
        RecordNoFollowUp(
            reason=NoFollowUpReason.ACCEPTANCE_MET, summary="met", discharges=[obligation.id]
        ),
        at(3),
    )
    goal.apply(RecordReadback(monitor_id="ci", value="green"), at(4))
    goal.apply(
        RecordVisionCheckpoint(agent="planner", status=VisionStatus.RETIRED, reason="met"), at(5)
    )
    report = audit(goal.s, at(5))
    assert report.terminal, report.blockers
    goal.apply(CLOSE, at(5))
    assert goal.s.is_closed


def test_due_monitor_and_stale_required_readback_count_against_now() -> None:
    goal = new_goal(criteria=())
    goal.apply(
        AddMonitor(
            monitor_id="m", target="pr", cadence_seconds=60, required=True, freshness_seconds=100
        )
    )
    goal.apply(RecordReadback(monitor_id="m", value=1), at(1))
    assert audit(goal.s, at(60)).terminal
    report = audit(goal.s, at(61))
    assert (report.due_monitors, report.stale_readbacks) == (1, 0)
    report = audit(goal.s, at(102))
    assert (report.due_monitors, report.stale_readbacks) == (1, 1)
    goal.apply(RetireMonitor(monitor_id="m", reason="pr merged"), at(102))
    assert audit(goal.s, at(500)).terminal


def test_non_blocking_gate_does_not_block_closure() -> None:
    goal = new_goal(criteria=())
    goal.apply(OpenGate(gate_id="fyi", title="note", blocking=False))
    assert audit(goal.s, T0).terminal


def test_blockers_name_their_subject() -> None:
    goal = new_goal(criteria=())
    add_todo(goal, "t1")
    evidence(goal, "e1", exit_code=1)
    report = audit(goal.s, T0)
    assert {(b.kind, b.subject) for b in report.blockers} == {
        (BlockerKind.OPEN_TODO, "t1"),
        (BlockerKind.RETRYABLE_POSTCONDITION, "pytest"),
    }
    assert report.retryable_postconditions == 1
