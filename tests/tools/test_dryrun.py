"""Each tool answers with what the kernel would decide now, and journals what it must."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.tools.support import Opened, apply, claimed_goal, open_channel
from turnkeeper.errors import DataLoss, InvalidArgument, PermissionDenied
from turnkeeper.kernel.model import GoalState, VisionStatus
from turnkeeper.kernel.proposals import AddTodo, ClaimTodo, CompleteTodo, Fence, TodoSpec
from turnkeeper.tools.calls import (
    AddTodoCall,
    MeetCriterionCall,
    OpenGateCall,
    RecordEvidenceCall,
    VisionCheckpointCall,
)
from turnkeeper.tools.dryrun import VIEW_LISTED
from turnkeeper.tools.service import ToolService

FAILING = "for i in $(seq 1 50); do echo line $i; done; echo 'AssertionError: 2 != 3'; exit 1"


def _tools(
    tmp_path: Path, goal: GoalState | None = None, todo: str | None = "t1"
) -> tuple[Opened, ToolService]:
    opened = open_channel(tmp_path / "root", tmp_path, goal=goal, todo=todo)
    return opened, ToolService(opened.server.env)


def test_todo_done_with_passing_evidence_would_be_accepted(tmp_path: Path) -> None:
    opened, tools = _tools(tmp_path)
    (tmp_path / "notes.md").write_text("written\n")
    answer = tools.record_evidence("test -s notes.md && echo present", key="tests")
    assert "exit 0" in answer and "present" in answer
    assert "journaled as evidence `tests`" in answer
    assert "todo_done now: the kernel would accept it" in answer
    answer = tools.todo_done("wrote the notes")
    assert answer.startswith("journaled; the kernel would accept it now (todo `t1` done)")
    calls = opened.channels.calls(opened.turn.turn_id)
    assert [c.tool for c in calls] == ["record_evidence", "todo_done"]
    evidence = calls[0]
    assert isinstance(evidence, RecordEvidenceCall)
    assert (evidence.exit_code, evidence.output_tail, evidence.key) == (0, "present", "tests")


def test_failing_evidence_is_refused_with_its_exit_code_and_output(tmp_path: Path) -> None:
    opened, tools = _tools(tmp_path)
    answer = tools.record_evidence(FAILING, key="tests")
    assert "exit 1" in answer
    tail = answer.split("last output:\n", 1)[1]
    # The output's last 40 lines, the failure's line among them; the first lines not.
    assert "AssertionError: 2 != 3" in tail
    assert "line 12\n" in tail and "line 11\n" not in tail
    assert "todo_done now: the kernel would refuse it: evidence_failed" in answer
    answer = tools.todo_done()
    assert answer.startswith(
        "journaled; the kernel would refuse it now: evidence_failed — required evidence "
        "`tests` failed (exit 1); last output:"
    )
    assert "AssertionError: 2 != 3" in answer
    # Refused by the dry run, journaled all the same: the write-back decides for real.
    assert [c.tool for c in opened.channels.calls(opened.turn.turn_id)] == [
        "record_evidence",
        "todo_done",
    ]
    # Fixed in the same turn: the latest passing record makes it acceptable.
    tools.record_evidence("true", key="tests")
    assert "the kernel would accept it now" in tools.todo_done()


def test_missing_evidence_is_named_by_its_key(tmp_path: Path) -> None:
    _, tools = _tools(tmp_path)
    tools.record_evidence("true", key="lint")  # not the key the todo requires
    answer = tools.todo_done()
    assert "the kernel would refuse it now: evidence_missing" in answer
    assert "no evidence with key `tests`" in answer
    assert "record_evidence(command=..., key='tests')" in answer


def test_a_malformed_call_is_refused_and_not_journaled(tmp_path: Path) -> None:
    opened, tools = _tools(tmp_path)
    before = opened.calls_file.read_bytes()
    cases: list[tuple[Callable[[], str], str]] = [
        (lambda: tools.add_todo("   "), "empty_text"),
        (lambda: tools.add_todo("ok", todo_id="has space"), "invalid_id"),
        (lambda: tools.add_todo("ok", depends_on=["t1", "t1"]), "duplicate_value"),
        (lambda: tools.record_evidence(""), "empty_text"),
        (lambda: tools.record_evidence("true", freshness_seconds=0), "non_positive_value"),
        (lambda: tools.open_gate("two\nlines"), "control_characters"),
        (lambda: tools.update_acceptance([], mode="add"), "empty_criteria"),
        (lambda: tools.update_acceptance([], mode="merge"), "invalid_mode"),
        (lambda: tools.request_effect("http", {"x": float("nan")}), "malformed_json"),
        (lambda: tools.vision_checkpoint(VisionStatus.PATCHED, vision_text="v"), "agent_required"),
    ]
    for call, reason in cases:
        with pytest.raises(InvalidArgument) as refused:
            call()
        assert refused.value.reason == reason
    assert opened.calls_file.read_bytes() == before


def test_ids_are_made_from_the_turn_and_the_call_number(tmp_path: Path) -> None:
    opened, tools = _tools(tmp_path)
    assert tools.add_todo("Write the docs").startswith("todo `turn-0001-todo-0`: journaled;")
    assert "gate `turn-0001-gate-1`" in tools.open_gate("Ship on Friday?", scope=["t1"])
    answer = tools.add_todo("Again", todo_id="turn-0001-todo-0")
    assert "would refuse it now: todo_exists" in answer
    calls = opened.channels.calls(opened.turn.turn_id)
    assert isinstance(calls[0], AddTodoCall) and calls[0].todo_id == "turn-0001-todo-0"
    assert isinstance(calls[1], OpenGateCall) and calls[1].gate_id == "turn-0001-gate-1"
    # The goal as it stands has both, with the gate on this turn's todo.
    view = tools.goal()
    assert "- turn-0001-todo-0: Write the docs — open" in view
    assert "- turn-0001-gate-1: Ship on Friday? — blocking, on t1" in view


def test_a_dependency_unknown_to_the_goal_is_refused_by_the_dry_run(tmp_path: Path) -> None:
    _, tools = _tools(tmp_path)
    answer = tools.add_todo("Later", depends_on=["t-unknown"])
    assert "would refuse it now: todo_not_found — unknown todo 't-unknown'" in answer
    # Added by an earlier call of the same turn, it is known.
    tools.add_todo("First", todo_id="t-first")
    assert "would accept it now" in tools.add_todo("Then", depends_on=["t-first"])


def test_meet_criterion_resolves_the_evidence_key(tmp_path: Path) -> None:
    opened, tools = _tools(tmp_path)
    answer = tools.meet_criterion("c1", "tests")
    assert "evidence_missing — no evidence with key `tests` in this turn or the goal" in answer
    tools.record_evidence("exit 3", key="tests")
    assert "evidence_failed — required evidence `tests` failed (exit 3)" in tools.meet_criterion(
        "c1", "tests"
    )
    tools.record_evidence("true", key="tests")
    assert "criterion `c1` met" in tools.meet_criterion("c1", "tests")
    assert "- [x] c1: parser tests pass" in tools.goal()
    assert "would refuse it now: criterion_not_found" in tools.meet_criterion("c9", "tests")
    calls = [
        c for c in opened.channels.calls(opened.turn.turn_id) if isinstance(c, MeetCriterionCall)
    ]
    assert [c.resolved_evidence_id for c in calls] == [None, None, None, None]


def test_vision_checkpoint_defaults_to_the_agent_the_goal_requires(tmp_path: Path) -> None:
    goal = claimed_goal(agents=("planner",))
    opened, tools = _tools(tmp_path, goal=goal)
    assert "Vision checkpoint due for: planner" in tools.goal()
    answer = tools.vision_checkpoint(VisionStatus.UNCHANGED, reason="still right")
    assert answer.startswith("vision checkpoint of `planner`: journaled; the kernel would accept")
    assert "Vision checkpoint due for" not in tools.goal()
    (call,) = opened.channels.calls(opened.turn.turn_id)
    assert isinstance(call, VisionCheckpointCall) and call.agent == "planner"


def test_todo_done_on_a_turn_without_a_todo(tmp_path: Path) -> None:
    _, tools = _tools(tmp_path, todo=None)
    answer = tools.todo_done()
    assert "would refuse it now: no_todo — turn turn-0001 has no todo" in answer


def test_two_servers_of_one_turn_number_their_calls_in_turn(tmp_path: Path) -> None:
    opened, _ = _tools(tmp_path)
    # Two servers: two services, each opening the journal on its own (flock is per open).
    servers = [ToolService(opened.server.env) for _ in range(2)]

    def work(tools: ToolService) -> None:
        for _ in range(8):
            tools.add_todo("parallel work")

    threads = [threading.Thread(target=work, args=(tools,)) for tools in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    calls = opened.channels.read_calls(opened.turn.turn_id)
    assert calls.torn == 0
    assert [c.seq for c in calls.calls] == list(range(16))
    ids = {c.todo_id for c in calls.calls if isinstance(c, AddTodoCall)}
    assert len(ids) == 16


def _large_goal(done: int, unfinished: int) -> GoalState:
    """The claimed goal with ``done`` finished todos after t1, then ``unfinished`` open."""
    now = datetime.now(UTC) - timedelta(seconds=1)
    state = claimed_goal(required_evidence=())
    lease = now + timedelta(hours=1)
    for n in range(done):
        state = apply(state, AddTodo(todo=TodoSpec(todo_id=f"d{n}", title=f"done {n}")), now)
        state = apply(state, ClaimTodo(todo_id=f"d{n}", owner="other", lease_expires_at=lease), now)
        fence = Fence(owner="other", epoch=1)
        state = apply(state, CompleteTodo(todo_id=f"d{n}", fence=fence), now)
    for n in range(unfinished):
        state = apply(state, AddTodo(todo=TodoSpec(todo_id=f"o{n}", title=f"open {n}")), now)
    return state


def test_the_goal_view_lists_the_turns_todos_then_the_unfinished_then_the_latest_done(
    tmp_path: Path,
) -> None:
    # More todos than the view lists, the unfinished ones last in goal order: the agent
    # sees its own todo, the todo it just added, every unfinished one, and then the
    # latest finished ones, not the oldest of the goal's todos.
    _, tools = _tools(tmp_path, goal=_large_goal(done=40, unfinished=5))
    tools.add_todo("Write the docs", todo_id="docs")
    lines = tools.goal().splitlines()
    start = lines.index("Todos (6 open, 1 claimed, 40 done):")
    listed = lines[start + 1 : start + 1 + VIEW_LISTED]
    latest_done = [f"d{n}" for n in range(39, 39 - (VIEW_LISTED - 7), -1)]
    assert [line.split(":")[0] for line in listed] == [
        f"- {todo}" for todo in ["t1", "docs", *(f"o{n}" for n in range(5)), *latest_done]
    ]
    assert lines[start + 1 + VIEW_LISTED] == f"- … and {47 - VIEW_LISTED} more, not listed"


def test_a_tool_server_decodes_the_goal_once_for_all_its_calls(tmp_path: Path) -> None:
    # A channel's goal files never change (a channel opened again gets a new token), so
    # a server decodes them for its first call only: damaged after it, they are not read
    # again by this server, while a new server of the turn meets the damage.
    opened, tools = _tools(tmp_path)
    assert "- t1: Write the tokenizer — claimed (this turn's todo)" in tools.goal()
    (opened.folder / "goal.json").write_bytes(b"{not a goal")
    assert "todo `turn-0001-todo-0`: journaled;" in tools.add_todo("Write the docs")
    assert "- turn-0001-todo-0: Write the docs — open" in tools.goal()
    with pytest.raises(DataLoss) as damaged:
        ToolService(opened.server.env).goal()
    assert damaged.value.reason == "unreadable_channel_goal"
    (opened.folder / "goal.json").unlink()
    with pytest.raises(DataLoss) as missing:
        ToolService(opened.server.env).goal()
    assert missing.value.reason == "unreadable_channel_goal"


def test_the_goal_read_ahead_is_what_the_first_call_uses(tmp_path: Path) -> None:
    opened, tools = _tools(tmp_path)
    tools.read_ahead().join(timeout=30)
    (opened.folder / "goal.json").write_bytes(b"{not a goal")
    assert "- t1: Write the tokenizer — claimed (this turn's todo)" in tools.goal()


def test_a_goal_that_cannot_be_read_ahead_is_each_calls_error(tmp_path: Path) -> None:
    opened, tools = _tools(tmp_path)
    (opened.folder / "goal.json").write_bytes(b"{not a goal")
    reading = tools.read_ahead()
    reading.join(timeout=30)
    assert not reading.is_alive()
    for _ in range(2):
        with pytest.raises(DataLoss) as damaged:
            tools.goal()
        assert damaged.value.reason == "unreadable_channel_goal"
    unbound = ToolService({})
    unbound.read_ahead().join(timeout=30)
    with pytest.raises(PermissionDenied):
        unbound.goal()
