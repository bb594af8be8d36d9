"""Event and proposal serialisation, schema versions, and folding guards."""

from __future__ import annotations

import pytest

from turnkeeper.errors import DataLoss, InvalidArgument
from turnkeeper.kernel import (
    EVENT_SCHEMA_VERSIONS,
    GOAL_EVENT_ADAPTER,
    GOAL_EVENT_LIST_ADAPTER,
    evolve_goal,
    fold_goal,
    parse_proposal,
)
from turnkeeper.kernel.events import GoalCreated, TodoClaimed
from turnkeeper.kernel.proposals import ClaimTodo, CreateGoal

from .support import T0, at, new_goal


def test_every_event_type_has_a_supported_version() -> None:
    assert len(EVENT_SCHEMA_VERSIONS) == 23
    assert all(versions == frozenset({1}) for versions in EVENT_SCHEMA_VERSIONS.values())


def test_event_json_round_trip() -> None:
    goal = new_goal()
    for event in goal.events:
        text = GOAL_EVENT_ADAPTER.dump_json(event)
        assert GOAL_EVENT_ADAPTER.validate_json(text) == event
    assert (
        GOAL_EVENT_LIST_ADAPTER.validate_json(GOAL_EVENT_LIST_ADAPTER.dump_json(goal.events))
        == goal.events
    )


def test_unknown_schema_version_and_extra_fields_fail_closed() -> None:
    created = GoalCreated(
        goal_id="g", title="t", objective="", criteria=[], agents_requiring_vision=[], at=T0
    )
    data = created.model_dump(mode="json")
    with pytest.raises(ValueError, match="schema_version"):
        GOAL_EVENT_ADAPTER.validate_python({**data, "schema_version": 2})
    with pytest.raises(ValueError, match="extra"):
        GOAL_EVENT_ADAPTER.validate_python({**data, "surprise": 1})


def test_parse_proposal() -> None:
    proposal = parse_proposal(
        '{"kind": "claim_todo", "todo_id": "t", "owner": "a",'
        ' "lease_expires_at": "2025-01-01T00:01:00Z"}'
    )
    assert proposal == ClaimTodo(todo_id="t", owner="a", lease_expires_at=at(60))
    assert parse_proposal({"kind": "create_goal", "goal_id": "g", "title": "t"}) == CreateGoal(
        goal_id="g", title="t"
    )
    with pytest.raises(InvalidArgument) as info:
        parse_proposal({"kind": "create_goal", "goal_id": "g"})
    assert info.value.reason == "malformed_proposal"


def test_fold_rejects_streams_it_cannot_have_written() -> None:
    goal = new_goal()
    with pytest.raises(DataLoss):
        fold_goal([])
    with pytest.raises(DataLoss):
        evolve_goal(goal.s, goal.events[0])
    claimed = TodoClaimed(
        todo_id="zz", owner="a", epoch=1, lease_expires_at=at(5), taken_over_from=None, at=T0
    )
    with pytest.raises(DataLoss):
        evolve_goal(goal.s, claimed)
    with pytest.raises(DataLoss):
        evolve_goal(None, claimed)


def test_state_version_counts_events() -> None:
    goal = new_goal()
    assert goal.s.version == len(goal.events) == 1
