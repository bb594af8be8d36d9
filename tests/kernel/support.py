"""Small helpers for kernel tests: a clock, a goal builder and rejection asserts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from turnkeeper.errors import TurnkeeperError
from turnkeeper.kernel import (
    GoalEvent,
    GoalProposal,
    GoalState,
    decide_goal,
    evolve_goal,
    fold_goal,
)
from turnkeeper.kernel.proposals import (
    AddTodo,
    ClaimTodo,
    CreateGoal,
    CriterionSpec,
    Fence,
    RecordEvidence,
    TodoSpec,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
GOAL = "g1"


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds``: tests speak in offsets, never the real clock."""
    return T0 + timedelta(seconds=seconds)


class Goal:
    """A goal stream under test: applies proposals, keeps events and state in step."""

    def __init__(self, state: GoalState | None = None) -> None:
        self.state = state
        self.events: list[GoalEvent] = []

    @property
    def s(self) -> GoalState:
        assert self.state is not None
        return self.state

    def apply(self, proposal: GoalProposal, now: datetime = T0) -> list[GoalEvent]:
        events = decide_goal(self.state, proposal, now)
        for event in events:
            self.state = evolve_goal(self.state, event)
        self.events += events
        assert fold_goal(self.events) == self.state
        return events

    def reject(
        self,
        proposal: GoalProposal,
        error: type[TurnkeeperError],
        reason: str,
        now: datetime = T0,
    ) -> TurnkeeperError:
        """Assert ``proposal`` is refused with ``error``/``reason`` and changes nothing."""
        before = self.state
        with pytest.raises(error) as info:
            decide_goal(self.state, proposal, now)
        assert type(info.value) is error
        assert info.value.reason == reason, info.value.to_dict()
        assert self.state == before
        return info.value


def new_goal(
    criteria: tuple[str, ...] = ("c1",),
    agents: tuple[str, ...] = (),
) -> Goal:
    goal = Goal()
    goal.apply(
        CreateGoal(
            goal_id=GOAL,
            title="ship it",
            objective="the feature works",
            criteria=[CriterionSpec(id=c, text=f"{c} holds") for c in criteria],
            agents_requiring_vision=list(agents),
        )
    )
    return goal


def add_todo(
    goal: Goal,
    todo_id: str,
    now: datetime = T0,
    *,
    depends_on: tuple[str, ...] = (),
    required_evidence: tuple[str, ...] = (),
    successor_required: bool = False,
) -> list[GoalEvent]:
    spec = TodoSpec(
        todo_id=todo_id,
        title=f"do {todo_id}",
        depends_on=list(depends_on),
        required_evidence=list(required_evidence),
        successor_required=successor_required,
    )
    return goal.apply(AddTodo(todo=spec), now)


def claim(
    goal: Goal, todo_id: str, owner: str = "a", now: datetime = T0, lease: float = 60
) -> Fence:
    goal.apply(
        ClaimTodo(todo_id=todo_id, owner=owner, lease_expires_at=now + timedelta(seconds=lease)),
        now,
    )
    c = goal.s.todos[todo_id].claim
    assert c is not None
    return Fence(owner=c.owner, epoch=c.epoch)


def evidence(
    goal: Goal,
    evidence_id: str,
    *,
    key: str = "pytest",
    exit_code: int = 0,
    now: datetime = T0,
    freshness: int = 600,
    revision: str | None = "rev1",
) -> None:
    goal.apply(
        RecordEvidence(
            evidence_id=evidence_id,
            command=key,
            revision=revision,
            exit_code=exit_code,
            output_digest="sha256:0",
            freshness_seconds=freshness,
        ),
        now,
    )
