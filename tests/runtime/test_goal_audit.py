"""Auditing goals a caller listed already: ``GoalService.audit_of`` and ``status``'s
light read path (runtime/services/goal_reads.py) give the audit of the goal read
again, and decode the states the goal service decodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnkeeper.errors import DataLoss
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.runtime.services import goal_reads
from turnkeeper.runtime.services.goals import GOAL_CODEC, GoalService
from turnkeeper.store import open_store
from turnkeeper.store.records import Projection


def test_the_audit_of_a_listed_state_is_the_goals_audit(tmp_path: Path) -> None:
    with open_store(tmp_path / "audit.db") as store:
        goals = GoalService(store)
        goals.create(CreateGoal(goal_id="g1", title="a goal"))
        goals.submit("g1", AddTodo(todo=TodoSpec(todo_id="t1", title="open work")))
        goals.create(CreateGoal(goal_id="g2", title="an empty goal"))
        projections = store.list_projections(goal_reads.GOAL_KIND)
        listed = goals.goals_of(projections)
        assert goal_reads.goal_states(projections) == listed == goals.list_goals()
        expected = {"g1": goals.audit("g1"), "g2": goals.audit("g2")}
        assert {s.goal.id: goals.audit_of(s) for s in listed} == expected
        assert {s.goal.id: goal_reads.audit_of(store, s) for s in listed} == expected
        assert expected["g1"].open_todos == 1  # the two goals' audits differ: a real check
        assert expected["g2"].open_todos == 0


def test_a_goal_row_that_does_not_decode_is_data_loss_on_both_paths() -> None:
    row = Projection.model_construct(
        stream_id="goal:g1", kind="goal", head_seq=1, schema_version=1, state="{}", checksum=""
    )
    with pytest.raises(DataLoss) as light:
        goal_reads.goal_states([row])
    with pytest.raises(DataLoss) as codec:
        GOAL_CODEC.decode_state(row.stream_id, row.state)
    assert (light.value.reason, str(light.value)) == (codec.value.reason, str(codec.value))
    assert light.value.reason == "undecodable_projection"
