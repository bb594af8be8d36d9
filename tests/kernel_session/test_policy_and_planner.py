"""The bounded recovery policy and the choice of the next turn."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from tests.kernel_session.helpers import (
    CONTRACT,
    GOAL,
    Harness,
    accept,
    at,
    complete_turn,
    fail_turn,
    new_session,
    record,
    spec,
    start_host,
)
from turnkeeper.errors import InvalidArgument
from turnkeeper.kernel.session import (
    AcceptTurn,
    GoalView,
    LossProof,
    NextTurn,
    RecordTurnLost,
    RecoveryPolicy,
    ResolveHostRecovery,
    RunnableTodo,
    SetStatus,
    Stop,
    backoff_delay,
    decide_recovery,
    envelope_for,
    plan_next_turn,
)
from turnkeeper.vocabulary import HostErrorKind

POLICY = RecoveryPolicy(
    max_attempts=3, backoff_base_seconds=10, backoff_max_seconds=25, max_consecutive_host_failures=3
)


def test_policy_nothing_to_recover() -> None:
    h = new_session()
    assert decide_recovery(h.s, POLICY, at(0)).action == "none"


def test_policy_backoff_then_recover_now() -> None:
    h = new_session()
    fail_turn(h, "t1")  # at T0, one host failure
    wait = decide_recovery(h.s, POLICY, at(5))
    assert (wait.action, wait.reason, wait.not_before) == ("wait", "backoff", at(10))
    now = decide_recovery(h.s, POLICY, at(10))
    assert (now.action, now.reason, now.turn_id) == ("recover_now", "resolve_host_recovery", "t1")
    h.run(ResolveHostRecovery(lease=h.token, record=record(h, "t1")))
    assert decide_recovery(h.s, POLICY, at(10)).reason == "accept_continuation"


def test_backoff_grows_and_is_capped() -> None:
    assert backoff_delay(POLICY, 0) == timedelta(0)
    assert backoff_delay(POLICY, 1) == timedelta(seconds=10)
    assert backoff_delay(POLICY, 2) == timedelta(seconds=20)
    assert backoff_delay(POLICY, 3) == timedelta(seconds=25)
    assert backoff_delay(POLICY, 10_000) == timedelta(seconds=25)


def test_lost_turn_recovers_without_backoff() -> None:
    h = new_session()
    accept(h, "t1")
    h.run(RecordTurnLost(lease=h.token, turn_id="t1", proof=LossProof(ended="proven_gone")))
    decision = decide_recovery(h.s, POLICY, at(0))
    assert (decision.action, decision.reason) == ("recover_now", "accept_continuation")


def _fail_chain(h: Harness, attempts: int) -> None:
    """Fail attempt 1, then recover and fail each continuation up to ``attempts``."""
    fail_turn(h, "t1")
    for n in range(2, attempts + 1):
        h.run(ResolveHostRecovery(lease=h.token, record=record(h, f"t{n - 1}", attempt=n - 1)))
        assert h.s.recovery is not None and h.s.recovery.next is not None
        fail_turn(h, f"t{n}", h.s.recovery.next)


def test_policy_stops_when_attempts_are_exhausted() -> None:
    h = new_session()
    _fail_chain(h, 3)
    decision = decide_recovery(h.s, POLICY, at(1000))
    assert (decision.action, decision.reason) == ("crash", "recovery_attempts_exhausted")
    h.run(SetStatus(lease=h.token, action="mark_crashed", reason=decision.reason))
    assert decide_recovery(h.s, POLICY, at(1000)).reason == "session_crashed"


def test_policy_stops_after_too_many_consecutive_host_failures() -> None:
    h = new_session()
    policy = POLICY.model_copy(update={"max_attempts": 10, "max_consecutive_host_failures": 2})
    _fail_chain(h, 3)
    decision = decide_recovery(h.s, policy, at(1000))
    assert (decision.action, decision.reason) == ("crash", "consecutive_host_failures")


def test_policy_can_exclude_error_kinds() -> None:
    h = new_session()
    fail_turn(h, "t1", error_kind=HostErrorKind.EXIT_CODE)
    policy = POLICY.model_copy(update={"auto_recover_error_kinds": frozenset({"timeout"})})
    assert decide_recovery(h.s, policy, at(1000)).reason == "error_kind_not_auto_recovered"


def test_policy_bounds_are_validated() -> None:
    with pytest.raises(ValidationError):
        RecoveryPolicy(backoff_base_seconds=10, backoff_max_seconds=5)


# --- planner ------------------------------------------------------------------------

TODO1 = RunnableTodo(todo_id="todo-1", title="write the parser", attempts=0)
TODO2 = RunnableTodo(todo_id="todo-2", title="add tests", attempts=2)


def view(**over: object) -> GoalView:
    return GoalView.model_validate({"goal_id": GOAL, "runnable_todos": [TODO1, TODO2], **over})


def plan(h: Harness, **over: object) -> NextTurn | Stop:
    return plan_next_turn(h.s, view(**over), at(0))


def _accept_planned(h: Harness, turn_id: str, planned: NextTurn | Stop) -> None:
    assert isinstance(planned, NextTurn)
    h.run(AcceptTurn(lease=h.token, envelope=envelope_for(h.s, planned, turn_id, CONTRACT)))


def test_new_todo_starts() -> None:
    h = new_session()
    planned = plan(h)
    assert isinstance(planned, NextTurn)
    assert (planned.kind, planned.todo_id, planned.attempt, planned.resume_host_session) == (
        "start",
        "todo-1",
        1,
        False,
    )
    assert "write the parser" in planned.instructions
    _accept_planned(h, "t1", planned)


def test_same_todo_continues_in_the_resumed_host_session() -> None:
    h = new_session()
    complete_turn(h, "t1")
    planned = plan(h)
    assert isinstance(planned, NextTurn)
    assert (planned.kind, planned.todo_id, planned.attempt, planned.resume_host_session) == (
        "continuation",
        "todo-1",
        1,
        True,
    )
    _accept_planned(h, "t2", planned)


def test_next_todo_starts_when_the_last_one_is_done() -> None:
    h = new_session()
    complete_turn(h, "t1")
    planned = plan(h, runnable_todos=[TODO2])
    assert isinstance(planned, NextTurn)
    assert (planned.kind, planned.todo_id, planned.attempt) == ("start", "todo-2", 3)


def test_projection_mismatch_repairs_first() -> None:
    h = new_session()
    planned = plan(h, projection_mismatch=True, replan_obligation_ids=["r1"])
    assert isinstance(planned, NextTurn) and planned.kind == "repair" and planned.todo_id is None
    _accept_planned(h, "t1", planned)


def test_replan_obligations_come_before_waiting_on_gates() -> None:
    h = new_session()
    planned = plan(
        h, runnable_todos=[], blocking_gate_ids=["g1"], replan_obligation_ids=["r1", "r2"]
    )
    assert isinstance(planned, NextTurn) and planned.kind == "replan"
    assert "r1, r2" in planned.instructions


def test_resolved_failure_continues_per_the_resolution() -> None:
    h = new_session()
    fail_turn(h, "t1", error_kind=HostErrorKind.TIMEOUT)
    stop = plan(h)
    assert isinstance(stop, Stop) and (stop.reason, stop.ids) == ("recovery_unresolved", ("t1",))
    h.run(ResolveHostRecovery(lease=h.token, record=record(h, "t1")))
    planned = plan(h)
    assert isinstance(planned, NextTurn)
    assert (planned.kind, planned.attempt, planned.recovers_turn_id) == ("continuation", 2, "t1")
    _accept_planned(h, "t2", planned)
    assert h.s.recovery is None


def test_lost_turn_without_host_session_is_retried() -> None:
    h = new_session()
    accept(h, "t1")
    h.run(RecordTurnLost(lease=h.token, turn_id="t1", proof=LossProof(ended="proven_gone")))
    planned = plan(h)
    assert isinstance(planned, NextTurn) and (planned.kind, planned.attempt) == ("retry", 2)
    _accept_planned(h, "t2", planned)


@pytest.mark.parametrize(
    ("over", "reason", "ids"),
    [
        ({"terminal": True, "runnable_todos": []}, "goal_terminal", ()),
        ({"runnable_todos": [], "blocking_gate_ids": ["g1", "g2"]}, "gate_blocked", ("g1", "g2")),
        ({"budget_left": 0}, "budget", ()),
        ({"runnable_todos": []}, "nothing_runnable", ()),
    ],
)
def test_stops(over: dict[str, object], reason: str, ids: tuple[str, ...]) -> None:
    h = new_session()
    stop = plan(h, **over)
    assert isinstance(stop, Stop) and (stop.reason, stop.ids) == (reason, ids)


def test_session_level_stops() -> None:
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1")
    stop = plan(h)
    assert isinstance(stop, Stop) and (stop.reason, stop.ids) == ("turn_in_flight", ("t1",))
    h.run(SetStatus(lease=h.token, action="stop"))
    stop = plan(h)
    assert isinstance(stop, Stop) and stop.reason == "session_suspended"


def test_goal_view_for_another_goal() -> None:
    h = new_session()
    with pytest.raises(InvalidArgument) as info:
        plan_next_turn(h.s, GoalView(goal_id="other"), at(0))
    assert info.value.reason == "goal_mismatch"


def test_repair_spec_is_acceptable_during_pending_recovery() -> None:
    h = new_session()
    fail_turn(h, "t1")
    planned = plan(h, projection_mismatch=True)
    _accept_planned(h, "r1", planned)
    assert spec(kind="repair", todo_id=None).kind == "repair"
