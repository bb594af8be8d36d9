"""Goal-level transitions: create, acceptance, criteria, vision, notes, lifecycle guards."""

from __future__ import annotations

from datetime import datetime

import pytest

from turnkeeper.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from turnkeeper.kernel import decide_goal
from turnkeeper.kernel.events import (
    AcceptanceUpdated,
    CriterionSatisfied,
    GoalClosed,
    GoalCreated,
    NoteRecorded,
    VisionCheckpointRecorded,
)
from turnkeeper.kernel.model import Criterion, NoFollowUp, NoFollowUpReason, VisionStatus
from turnkeeper.kernel.proposals import (
    AddTodo,
    CloseGoal,
    CreateGoal,
    CriterionSpec,
    Note,
    Reassess,
    RecordVisionCheckpoint,
    SatisfyCriterion,
    TodoSpec,
    UpdateAcceptance,
)

from .support import GOAL, T0, Goal, at, evidence, new_goal


def _close() -> CloseGoal:
    return CloseGoal(reason=NoFollowUpReason.ACCEPTANCE_MET, summary="all done")


def test_create_goal_emits_goal_created() -> None:
    events = decide_goal(
        None,
        CreateGoal(goal_id=GOAL, title="t", criteria=[CriterionSpec(id="c1", text="x")]),
        T0,
    )
    assert events == [
        GoalCreated(
            goal_id=GOAL,
            title="t",
            objective="",
            criteria=[Criterion(id="c1", text="x")],
            agents_requiring_vision=[],
            at=T0,
        )
    ]


def test_create_goal_twice_is_already_exists() -> None:
    goal = new_goal()
    goal.reject(CreateGoal(goal_id=GOAL, title="again"), AlreadyExists, "goal_exists")


@pytest.mark.parametrize(
    "proposal",
    [
        CreateGoal(goal_id="", title="t"),
        CreateGoal(goal_id="g", title="  "),
        CreateGoal(goal_id="g", title="t", criteria=[CriterionSpec(id="c", text="")]),
    ],
)
def test_create_goal_rejects_empty_text(proposal: CreateGoal) -> None:
    Goal().reject(proposal, InvalidArgument, "empty_text")


def test_create_goal_rejects_duplicate_criterion_ids() -> None:
    specs = [CriterionSpec(id="c", text="a"), CriterionSpec(id="c", text="b")]
    Goal().reject(
        CreateGoal(goal_id="g", title="t", criteria=specs), InvalidArgument, "duplicate_value"
    )


def test_naive_now_is_rejected() -> None:
    Goal().reject(
        CreateGoal(goal_id="g", title="t"),
        InvalidArgument,
        "naive_datetime",
        now=datetime(2025, 1, 1),
    )


def test_proposal_on_missing_goal_is_not_found() -> None:
    Goal().reject(Reassess(), NotFound, "goal_not_found")


def test_any_proposal_on_a_closed_goal_is_goal_closed() -> None:
    goal = new_goal(criteria=())
    goal.apply(_close())
    assert goal.s.goal.closure == NoFollowUp(
        reason=NoFollowUpReason.ACCEPTANCE_MET, summary="all done", at=T0
    )
    goal.reject(AddTodo(todo=TodoSpec(todo_id="t", title="t")), FailedPrecondition, "goal_closed")
    goal.reject(CreateGoal(goal_id=GOAL, title="t"), FailedPrecondition, "goal_closed")
    goal.reject(_close(), FailedPrecondition, "goal_closed")


def test_close_goal_emits_goal_closed() -> None:
    goal = new_goal(criteria=())
    assert goal.apply(_close(), at(1)) == [
        GoalClosed(
            closure=NoFollowUp(
                reason=NoFollowUpReason.ACCEPTANCE_MET, summary="all done", at=at(1)
            ),
            at=at(1),
        )
    ]


def test_close_goal_requires_summary() -> None:
    goal = new_goal(criteria=())
    goal.reject(
        CloseGoal(reason=NoFollowUpReason.ACCEPTANCE_MET, summary=""), InvalidArgument, "empty_text"
    )


def test_close_goal_with_unmet_acceptance_is_refused_with_blockers() -> None:
    goal = new_goal()
    error = goal.reject(_close(), FailedPrecondition, "goal_not_terminal")
    assert error.details["blockers"] == [
        {"kind": "acceptance_gap", "subject": "c1", "text": "criterion unmet: c1 holds"}
    ]


# --- acceptance -----------------------------------------------------------------


def test_update_acceptance_add_appends_and_refreshes() -> None:
    goal = new_goal()
    events = goal.apply(UpdateAcceptance(criteria=[CriterionSpec(id="c2", text="more")]))
    assert events == [
        AcceptanceUpdated(
            criteria=[Criterion(id="c1", text="c1 holds"), Criterion(id="c2", text="more")],
            agents_requiring_vision=[],
            at=T0,
        )
    ]
    assert goal.s.goal.refresh_seq == 1


def test_update_acceptance_add_duplicate_is_already_exists() -> None:
    goal = new_goal()
    goal.reject(
        UpdateAcceptance(criteria=[CriterionSpec(id="c1", text="x")]),
        AlreadyExists,
        "criterion_exists",
    )


def test_update_acceptance_rejects_empty_list() -> None:
    goal = new_goal()
    goal.reject(UpdateAcceptance(mode="replace", criteria=[]), InvalidArgument, "empty_criteria")


def test_update_acceptance_replace_keeps_unchanged_met_criteria() -> None:
    goal = new_goal(criteria=("c1", "c2"))
    evidence(goal, "e1")
    goal.apply(SatisfyCriterion(criterion_id="c1", evidence_ids=["e1"]))
    goal.apply(SatisfyCriterion(criterion_id="c2", evidence_ids=["e1"]))
    goal.apply(
        UpdateAcceptance(
            mode="replace",
            criteria=[
                CriterionSpec(id="c1", text="c1 holds"),
                CriterionSpec(id="c2", text="changed"),
            ],
            agents_requiring_vision=["planner"],
        )
    )
    met = {c.id: c.met for c in goal.s.goal.criteria}
    assert met == {"c1": True, "c2": False}
    assert goal.s.goal.agents_requiring_vision == ["planner"]


def test_satisfy_criterion_with_passing_fresh_evidence() -> None:
    goal = new_goal()
    evidence(goal, "e1")
    events = goal.apply(SatisfyCriterion(criterion_id="c1", evidence_ids=["e1"]), at(5))
    assert events == [CriterionSatisfied(criterion_id="c1", evidence_ids=["e1"], at=at(5))]
    assert goal.s.goal.criteria[0].met


@pytest.mark.parametrize(
    ("exit_code", "now", "revision", "reason"),
    [
        (1, at(1), None, "evidence_failed"),
        (0, at(601), None, "evidence_stale"),
        (0, at(1), "rev2", "evidence_stale"),
    ],
)
def test_satisfy_criterion_rejects_unusable_evidence(
    exit_code: int, now: datetime, revision: str | None, reason: str
) -> None:
    goal = new_goal()
    evidence(goal, "e1", exit_code=exit_code)
    goal.reject(
        SatisfyCriterion(criterion_id="c1", evidence_ids=["e1"], current_revision=revision),
        FailedPrecondition,
        reason,
        now=now,
    )


def test_satisfy_criterion_unknown_ids_and_empty_evidence() -> None:
    goal = new_goal()
    goal.reject(
        SatisfyCriterion(criterion_id="nope", evidence_ids=[]), NotFound, "criterion_not_found"
    )
    goal.reject(
        SatisfyCriterion(criterion_id="c1", evidence_ids=["e9"]), NotFound, "evidence_not_found"
    )
    goal.reject(
        SatisfyCriterion(criterion_id="c1", evidence_ids=[]), FailedPrecondition, "evidence_missing"
    )


# --- vision checkpoints ---------------------------------------------------------


def test_vision_checkpoint_required_from_creation_and_after_refresh() -> None:
    goal = new_goal(criteria=(), agents=("planner",))
    goal.reject(_close(), FailedPrecondition, "goal_not_terminal")
    events = goal.apply(
        RecordVisionCheckpoint(agent="planner", status=VisionStatus.UNCHANGED, reason="still right")
    )
    assert isinstance(events[0], VisionCheckpointRecorded)
    assert events[0].checkpoint.refresh_seq == 0
    # A material refresh makes the checkpoint stale again.
    goal.apply(UpdateAcceptance(criteria=[CriterionSpec(id="c", text="x")]))
    evidence(goal, "e1")
    goal.apply(SatisfyCriterion(criterion_id="c", evidence_ids=["e1"]))
    error = goal.reject(_close(), FailedPrecondition, "goal_not_terminal")
    blockers = error.details["blockers"]
    assert isinstance(blockers, list)
    assert {
        "kind": "acceptance_gap",
        "subject": "planner",
        "text": "vision_checkpoint_missing:planner",
    } in blockers
    goal.apply(
        RecordVisionCheckpoint(agent="planner", status=VisionStatus.PATCHED, vision_text="v2")
    )
    goal.apply(_close())


def test_vision_checkpoint_unchanged_needs_reason_and_patched_needs_text() -> None:
    goal = new_goal()
    goal.reject(
        RecordVisionCheckpoint(agent="p", status=VisionStatus.UNCHANGED),
        InvalidArgument,
        "empty_text",
    )
    goal.reject(
        RecordVisionCheckpoint(agent="p", status=VisionStatus.PATCHED),
        InvalidArgument,
        "empty_text",
    )
    goal.reject(
        RecordVisionCheckpoint(agent="", status=VisionStatus.NOT_NEEDED),
        InvalidArgument,
        "empty_text",
    )


def test_note_is_recorded() -> None:
    goal = new_goal()
    assert goal.apply(Note(author="a", text="re-assessed, continuing")) == [
        NoteRecorded(author="a", text="re-assessed, continuing", at=T0)
    ]
    assert goal.s.notes[0].text == "re-assessed, continuing"
    goal.reject(Note(author="a", text=""), InvalidArgument, "empty_text")


def test_reassess_with_nothing_to_raise_emits_nothing() -> None:
    goal = new_goal()
    assert goal.apply(Reassess()) == []
