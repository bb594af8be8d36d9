"""What counts as progress (kernel/progress.py) and the ``no_progress`` obligation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.kernel.support import T0, Goal, add_todo, at, claim, evidence, new_goal
from turnkeeper.errors import InvalidArgument
from turnkeeper.kernel import audit
from turnkeeper.kernel.model import NoFollowUpReason, ObligationStatus, ReplanTrigger
from turnkeeper.kernel.progress import made_progress
from turnkeeper.kernel.proposals import (
    CompleteTodo,
    Note,
    RecordNoFollowUp,
    RenewClaim,
    ReportNoProgress,
    parse_proposal,
)

SID = "6f1c9a52-3b7e-4d0a-9a43-0d4b8a1e2c11"


def test_surface_work_is_not_progress() -> None:
    goal = new_goal()
    add_todo(goal, "t1")
    fence = claim(goal, "t1")
    claimed = goal.events[-1:]
    renewed = goal.apply(
        RenewClaim(todo_id="t1", fence=fence, lease_expires_at=T0 + timedelta(seconds=120))
    )
    noted = goal.apply(Note(author="agent", text="still looking"))
    before = len(goal.events)
    evidence(goal, "ev-fail", exit_code=1)
    failing = goal.events[before:]
    for events in (claimed, renewed, noted, failing):
        assert not made_progress(events), events


def test_real_work_is_progress() -> None:
    goal = new_goal()
    assert made_progress(add_todo(goal, "t1"))
    fence = claim(goal, "t1")
    before = len(goal.events)
    evidence(goal, "ev-pass", exit_code=0)
    assert made_progress(goal.events[before:])
    assert made_progress(goal.apply(CompleteTodo(todo_id="t1", fence=fence)))


def _no_progress(goal: Goal, fingerprint: str, seconds: float = 0) -> list[object]:
    report = ReportNoProgress(session_id=SID, fingerprint=fingerprint, turns=3)
    return list(goal.apply(report, at(seconds)))


def test_a_report_raises_one_obligation_per_streak() -> None:
    goal = new_goal()
    add_todo(goal, "t1")
    (raised,) = _no_progress(goal, "turn-a")
    obligation = goal.s.obligations[raised.obligation_id]  # type: ignore[attr-defined]
    assert (obligation.trigger, obligation.subject) == (ReplanTrigger.NO_PROGRESS, SID)
    assert not audit(goal.s, at(1)).terminal
    # The same streak again, or another while it is open: nothing more.
    assert _no_progress(goal, "turn-a") == []
    assert _no_progress(goal, "turn-b") == []
    # Discharged by a structured no-follow-up; the same streak never raises again,
    # a new streak does.
    goal.apply(
        RecordNoFollowUp(
            reason=NoFollowUpReason.NO_ACTION_NEEDED,
            summary="the agent was waiting on CI",
            discharges=[obligation.id],
        )
    )
    assert goal.s.obligations[obligation.id].status is ObligationStatus.DISCHARGED
    assert _no_progress(goal, "turn-a") == []
    assert len(_no_progress(goal, "turn-c")) == 1


def test_a_malformed_report_is_refused() -> None:
    goal = new_goal()
    goal.reject(
        ReportNoProgress(session_id=SID, fingerprint="t", turns=0),
        InvalidArgument,
        "non_positive_value",
    )
    with pytest.raises(InvalidArgument) as refused:
        parse_proposal(
            {"kind": "report_no_progress", "session_id": " ", "fingerprint": "t", "turns": 3}
        )
    assert refused.value.reason == "invalid_id"


def test_the_same_green_check_again_is_not_progress() -> None:
    """An agent re-running a passing check that is already on record, fresh, on the
    same revision with the same output, is busy, not advancing; a new revision, a
    new output, or evidence that went stale again counts."""
    goal = new_goal()
    add_todo(goal, "t1")
    evidence(goal, "ev-1", revision="rev1")
    before = goal.s
    mark = len(goal.events)
    evidence(goal, "ev-2", revision="rev1", now=at(60))
    assert not made_progress(goal.events[mark:], before)
    assert made_progress(goal.events[mark:])  # without the earlier state, it counts

    before = goal.s
    mark = len(goal.events)
    evidence(goal, "ev-3", revision="rev2", now=at(120))
    assert made_progress(goal.events[mark:], before)

    before = goal.s
    mark = len(goal.events)
    evidence(goal, "ev-4", revision="rev2", now=at(120 + 601))  # the last one is stale now
    assert made_progress(goal.events[mark:], before)
