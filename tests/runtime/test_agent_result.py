"""The result model: what it refuses (naming the field), and the write-back it drives."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.effects.support import git_workspace
from turnkeeper.kernel import GoalState, decide_goal, evolve_goal, fold_goal
from turnkeeper.kernel.proposals import CreateGoal, CriterionSpec, SatisfyCriterion
from turnkeeper.kernel.session import NextTurn, TurnEnvelope
from turnkeeper.runtime.turn.agent_result import AgentResult, MalformedResult, parse_result
from turnkeeper.runtime.turn.driver import DEFAULT_CONTRACT
from turnkeeper.runtime.turn.writeback import (
    decide_write_back,
    prepare_write_back,
    refused_write_back,
)
from turnkeeper.tools.calls import evidence_id

NOW = datetime(2025, 6, 1, tzinfo=UTC)
TURN = "turn-0123456789abcdef"
SESSION = "2c1d6a0e-8f57-5b1e-9a3c-0d4b7e6f1a22"
FRESHNESS, EVIDENCE_IDS = "evidence.0.freshness_seconds", "proposals.0.evidence_ids"
NOTE_TEXT = "proposals.0.text"


def refusal(raw: Any) -> MalformedResult:
    with pytest.raises(MalformedResult) as info:
        parse_result(raw)
    assert info.value.reason == "malformed_result"
    assert info.value.code.value == "INVALID_ARGUMENT"
    assert info.value.message.startswith("malformed turn result: ")
    return info.value


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"todo_done": "yes"}, "todo_done"),
        ({"todo_done": 1}, "todo_done"),
        ({"summary": 3}, "summary"),
        ({"version": 2}, "version"),
        ({"evidence": "pytest -q"}, "evidence"),
        ({"evidence": [{"key": "tests"}]}, "evidence.0.command"),
        ({"evidence": [{"command": ""}]}, "evidence.0.command"),
        ({"evidence": [{"command": "true", "cmd": "x"}]}, "evidence.0.cmd"),
        ({"evidence": [{"command": "true", "freshness_seconds": "60"}]}, FRESHNESS),
        ({"evidence": [{"command": "true", "freshness_seconds": 0}]}, FRESHNESS),
        ({"evidence": [{"command": "true", "key": "two\nlines"}]}, "evidence.0.key"),
        ({"proposals": {"kind": "note"}}, "proposals"),
        ({"proposals": ["note"]}, "proposals.0"),
        ({"proposals": [{"kind": "satisfy"}]}, "proposals.0.kind"),
        ({"proposals": [{"criterion_id": "c1"}]}, "proposals.0.kind"),
        ({"proposals": [{"kind": "satisfy_criterion", "criterion_id": "c1"}]}, EVIDENCE_IDS),
        ({"proposals": [{"kind": "note", "author": "a", "text": "x" * 20_001}]}, NOTE_TEXT),
        ({"effects": {"provider": "http"}}, "effects"),
        ({"effects": [{"provider": "http", "body": {}}]}, "effects.0.body"),
        ({"host_artifact": {"path": "p"}}, "host_artifact.sha256"),
        ({"todo_don": True}, "todo_don"),
        ({"todoDone": True}, "todoDone"),
        ({"evidences": []}, "evidences"),
        ({"proposal": []}, "proposal"),
    ],
)  # fmt: skip
def test_a_malformed_result_is_refused_naming_the_field(raw: dict[str, Any], field: str) -> None:
    error = refusal(raw)
    assert error.details["field"] == field, error.message
    assert field in error.message


def test_an_unknown_kind_says_which() -> None:
    error = refusal({"proposals": [{"kind": "note", "author": "a", "text": "t"}, {"kind": "x"}]})
    assert error.message == (
        "malformed turn result: proposals.1.kind: unknown or missing proposal kind 'x'"
    )


def test_a_result_that_is_not_an_object_is_refused() -> None:
    refusal(["todo_done"])


def test_the_agents_own_keys_are_kept_and_informational_ones_typed() -> None:
    raw = {
        "summary": "done",
        "files_changed": ["a.md"],
        "commands": ["make"],
        "handle": "h-1",
        "usage": {"input_tokens": 3},
        "permission_denials": [],
    }
    result = parse_result(raw)
    assert result.model_extra == {
        "files_changed": ["a.md"],
        "commands": ["make"],
        "handle": "h-1",
        "permission_denials": [],
    }
    assert (result.version, result.todo_done, result.evidence, result.proposals) == (
        1,
        False,
        [],
        [],
    )
    assert parse_result({}) == AgentResult()


def test_the_errors_listed_are_bounded() -> None:
    error = refusal({"evidence": [{"cmd": n} for n in range(20)]})
    assert "and 35 more" in error.message
    listed = error.details["errors"]
    assert isinstance(listed, list) and len(listed) == 40


def _goal() -> GoalState:
    create = CreateGoal(
        goal_id="g", title="notes", criteria=[CriterionSpec(id="c1", text="all written")]
    )
    return fold_goal(decide_goal(None, create, NOW))


def _envelope() -> TurnEnvelope:
    spec = NextTurn(
        kind="replan", todo_id=None, attempt=1, instructions="x", resume_host_session=False
    )
    return TurnEnvelope.create(
        turn_id=TURN, session_id=SESSION, generation=1, goal_id="g", spec=spec,
        contract=DEFAULT_CONTRACT,
    )  # fmt: skip


def test_a_proposal_may_name_the_evidence_recorded_by_the_same_result(tmp_path: Path) -> None:
    workspace = git_workspace(tmp_path / "ws")
    result = parse_result(
        {
            "evidence": [
                {"key": "fails", "command": "exit 3"},
                {"key": "readme", "command": "test -s README"},
            ],
            "proposals": [
                {"kind": "satisfy_criterion", "criterion_id": "c1",
                 "evidence_ids": [evidence_id(TURN, 1)]},
            ],
        }
    )  # fmt: skip
    goal, envelope = _goal(), _envelope()
    prepared = prepare_write_back(lambda: goal, envelope, workspace, result)
    assert prepared.evidence_ids == [f"ev-{TURN}-0", f"ev-{TURN}-1"]
    assert isinstance(prepared.proposals[-1][1], SatisfyCriterion)
    events, verdict = decide_write_back(goal, prepared, envelope, NOW)
    state = goal
    for event in events:
        state = evolve_goal(state, event)
    assert state.evidence[f"ev-{TURN}-0"].exit_code == 3  # run again by turnkeeper
    assert state.evidence[f"ev-{TURN}-1"].exit_code == 0
    assert state.goal.criteria[0].met is True
    assert verdict.rejected == [] and verdict.progress


def test_a_durable_result_the_model_refuses_writes_back_only_its_refusal() -> None:
    """A receipt recorded before results were validated at the receipt: its turn
    completes with one rejection and nothing else."""
    with pytest.raises(MalformedResult) as info:
        parse_result({"todo_done": "yes"})
    prepared = refused_write_back(_envelope(), info.value)
    events, verdict = decide_write_back(_goal(), prepared, _envelope(), NOW)
    assert events == []
    assert [(d.proposal_id, d.reason) for d in verdict.rejected] == [
        (f"{TURN}:result", "malformed_result")
    ]
