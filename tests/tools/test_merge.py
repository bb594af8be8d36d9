"""A turn's tool calls joined to the result its host reported, as the write-back reads it."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.model import NoFollowUpReason
from turnkeeper.kernel.proposals import AddTodo, OpenGate, RecordNoFollowUp, SatisfyCriterion
from turnkeeper.runtime.turn import writeback
from turnkeeper.runtime.turn.agent_result import parse_result
from turnkeeper.tools.calls import (
    AddTodoCall,
    MeetCriterionCall,
    NoFollowUpCall,
    OpenGateCall,
    RecordEvidenceCall,
    RequestEffectCall,
    TodoDoneCall,
    ToolCall,
    evidence_id,
    merge_calls,
)

TURN = "turn-abc"
AT = datetime(2025, 1, 1, tzinfo=UTC)


def _evidence(seq: int, command: str, key: str | None, exit_code: int = 0) -> RecordEvidenceCall:
    return RecordEvidenceCall(
        seq=seq,
        at=AT,
        command=command,
        key=key,
        freshness_seconds=600,
        exit_code=exit_code,
        ran_at=AT,
    )


def _meet(seq: int, key: str, resolved: str | None = None) -> MeetCriterionCall:
    return MeetCriterionCall(
        seq=seq, at=AT, criterion_id="c1", evidence_key=key, resolved_evidence_id=resolved
    )


def test_the_write_back_numbers_evidence_with_the_tools_formula() -> None:
    # Imported, not copied: one formula.
    assert vars(writeback)["evidence_id"] is evidence_id
    assert evidence_id(TURN, 3) == "ev-turn-abc-3"


def test_calls_are_added_after_the_hosts_own_in_call_order() -> None:
    host: JsonDict = {
        "summary": "host said",
        "evidence": [{"command": "make", "key": "build"}],
        "proposals": [{"kind": "note", "author": "agent", "text": "hello"}],
        "effects": [{"provider": "http", "request": {"n": 0}}],
        "mine": {"kept": True},
    }
    before = copy.deepcopy(host)
    calls: list[ToolCall] = [
        _evidence(0, "pytest -q", "tests", exit_code=1),
        AddTodoCall(seq=1, at=AT, todo_id="t9", title="more", depends_on=["t1"]),
        _evidence(2, "pytest -q", "tests"),
        _meet(3, "tests"),
        RequestEffectCall(seq=4, at=AT, provider="http", request={"n": 1}),
        OpenGateCall(seq=5, at=AT, gate_id="g9", title="ship?", scope=["t9"]),
        NoFollowUpCall(
            seq=6, at=AT, reason=NoFollowUpReason.NO_ACTION_NEEDED, summary="ok", discharges=["o"]
        ),
        TodoDoneCall(seq=7, at=AT, summary="from the tool"),
    ]
    merged = merge_calls(host, calls, TURN)
    assert host == before  # the host's result is not changed
    assert merged["evidence"] == [
        {"command": "make", "key": "build"},
        {"command": "pytest -q", "key": "tests", "freshness_seconds": 600},
        {"command": "pytest -q", "key": "tests", "freshness_seconds": 600},
    ]
    result = parse_result(merged)  # what the write-back reads: it accepts the merge
    assert result.todo_done is True
    assert result.summary == "host said"  # the host's own summary wins
    assert result.model_extra == {"mine": {"kept": True}}
    assert [p.kind for p in result.proposals] == [
        "note",
        "add_todo",
        "satisfy_criterion",
        "open_gate",
        "record_no_follow_up",
    ]
    add, meet, gate, nfu = result.proposals[1:]
    assert isinstance(add, AddTodo) and add.todo.todo_id == "t9" and add.todo.depends_on == ["t1"]
    # The criterion is met with the turn's latest `tests` item: the third overall.
    assert isinstance(meet, SatisfyCriterion)
    assert meet.evidence_ids == ["ev-turn-abc-2"]
    assert isinstance(gate, OpenGate) and gate.scope == ["t9"]
    assert isinstance(nfu, RecordNoFollowUp) and nfu.discharges == ["o"]
    assert [(e.provider, e.request) for e in result.effects] == [
        ("http", {"n": 0}),
        ("http", {"n": 1}),
    ]


def test_a_criterion_is_met_with_the_turns_own_evidence_before_the_goals() -> None:
    host: JsonDict = {"evidence": [{"command": "pytest -q"}]}  # its key: the command
    merged = merge_calls(
        host,
        [
            _meet(0, "pytest -q", resolved="ev-older"),
            _meet(1, "lint", resolved="ev-goal-lint"),
            _meet(2, "nothing"),
        ],
        TURN,
    )
    ids = [
        p.evidence_ids for p in parse_result(merged).proposals if isinstance(p, SatisfyCriterion)
    ]
    # The host's own item; the goal's record the server found; none (refused later).
    assert ids == [["ev-turn-abc-0"], ["ev-goal-lint"], []]


def test_no_calls_change_nothing_and_todo_done_alone_sets_the_flag() -> None:
    assert merge_calls({}, [], TURN) == {}
    assert merge_calls({"summary": "s"}, [], TURN) == {"summary": "s"}
    merged = merge_calls({}, [TodoDoneCall(seq=0, at=AT, summary="did it")], TURN)
    assert merged == {"todo_done": True, "summary": "did it"}


def test_a_field_the_host_got_wrong_is_left_for_the_parser_to_refuse() -> None:
    merged = merge_calls({"evidence": "pytest"}, [_evidence(0, "make", None)], TURN)
    assert merged["evidence"] == "pytest"
