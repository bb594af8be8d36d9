"""The progress guard and the pace of turns (kernel/session/policy.py, evolve.py).

Idle completed turns are counted as a streak named by its first turn; a turn with
progress (or whose progress is unknown: older streams) ends it; an operator's resume
forgets it. ``pace_next_turn`` applies every bound before any turn, whatever its kind.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.kernel_session.helpers import (
    Harness,
    accept,
    at,
    fail_turn,
    new_session,
    snapshot,
    spec,
    start_host,
    success,
)
from turnkeeper.kernel.session import (
    CompleteTurn,
    NextTurn,
    ProgressPolicy,
    RecordReceipt,
    RecordWriteBack,
    RecoveryPolicy,
    SetStatus,
    pace_next_turn,
)

RECOVERY = RecoveryPolicy(
    max_attempts=3, backoff_base_seconds=10, backoff_max_seconds=25, max_consecutive_host_failures=3
)
PROGRESS = ProgressPolicy(max_turns_without_progress=3, max_replans_without_progress=2)


def _turn(
    h: Harness, turn_id: str, progress: bool | None, next_turn: NextTurn | None = None
) -> None:
    accept(h, turn_id, next_turn)
    start_host(h, turn_id)
    h.run(RecordReceipt(lease=h.token, turn_id=turn_id, receipt=success()))
    h.run(RecordWriteBack(lease=h.token, turn_id=turn_id, progress=progress))
    h.run(CompleteTurn(lease=h.token, turn_id=turn_id, snapshot=snapshot()))


def _pace(h: Harness, *, reported: bool = False, seconds: float = 0) -> tuple[str, str]:
    decision = pace_next_turn(h.s, RECOVERY, PROGRESS, at(seconds), no_progress_reported=reported)
    return decision.action, decision.reason


def test_idle_turns_are_a_streak_named_by_its_first_turn() -> None:
    h = new_session()
    _turn(h, "t1", progress=False)
    _turn(h, "t2", progress=False)
    assert (h.s.turns_without_progress, h.s.idle_since_turn) == (2, "t1")
    _turn(h, "t3", progress=True)
    assert (h.s.turns_without_progress, h.s.replans_without_progress) == (0, 0)
    assert h.s.idle_since_turn is None


def test_unknown_progress_never_counts_as_idle() -> None:
    h = new_session()
    _turn(h, "t1", progress=False)
    _turn(h, "t2", progress=None)  # written before progress was judged
    assert h.s.turns_without_progress == 0


def test_only_replan_turns_count_as_idle_replans() -> None:
    h = new_session()
    _turn(h, "t1", progress=False)
    _turn(h, "t2", progress=False, next_turn=spec(kind="replan", todo_id=None))
    assert (h.s.turns_without_progress, h.s.replans_without_progress) == (2, 1)


def test_pace_raises_a_replan_then_suspends() -> None:
    h = new_session()
    for n in range(3):
        assert _pace(h) == ("go", "within_policy")
        _turn(h, f"t{n}", progress=False)
    assert _pace(h) == ("raise_replan", "no_progress")
    assert _pace(h, reported=True) == ("go", "within_policy")
    replan = spec(kind="replan", todo_id=None)
    _turn(h, "r1", progress=False, next_turn=replan)
    assert _pace(h, reported=True) == ("go", "within_policy")
    _turn(h, "r2", progress=False, next_turn=replan)
    assert _pace(h, reported=True) == ("suspend", "no_progress")


def test_a_streak_outlasting_both_allowances_suspends_without_replans() -> None:
    # The obligation was discharged by hand without any progress: no replan turns
    # follow, and the streak still ends after both allowances.
    h = new_session()
    for n in range(5):
        _turn(h, f"t{n}", progress=False)
    assert _pace(h, reported=True) == ("suspend", "no_progress")


def test_host_failures_back_off_for_every_kind_of_turn_then_crash() -> None:
    h = new_session()
    fail_turn(h, "f1")  # at T0
    assert _pace(h, seconds=5) == ("wait", "host_failure_backoff")
    assert _pace(h, seconds=10) == ("go", "within_policy")
    decision = pace_next_turn(h.s, RECOVERY, PROGRESS, at(5), no_progress_reported=False)
    assert decision.not_before == at(10)


def test_too_many_host_failures_crash_whatever_is_pending() -> None:
    h = new_session()
    h.state = h.s.model_copy(update={"consecutive_host_failures": 4})
    assert _pace(h) == ("crash", "consecutive_host_failures")


def test_resume_forgets_the_streaks() -> None:
    h = new_session()
    for n in range(5):
        _turn(h, f"t{n}", progress=False)
    h.run(SetStatus(lease=h.token, action="suspend", reason="no_progress"))
    assert (h.s.status, h.s.status_reason) == ("suspended", "no_progress")
    h.run(SetStatus(lease=h.token, action="resume", reason="try again"))
    assert (h.s.status, h.s.status_reason) == ("ready", None)
    assert (h.s.turns_without_progress, h.s.replans_without_progress) == (0, 0)
    assert _pace(h) == ("go", "within_policy")


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_turns_without_progress", 0), ("max_replans_without_progress", 1_000_001)],
)
def test_progress_policy_bounds(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        ProgressPolicy.model_validate({field: value})


def test_backoff_is_measured_from_the_failed_turns_end() -> None:
    h = new_session()
    fail_turn(h, "f1")
    end = h.s.last_turn_end
    assert end is not None and end.outcome == "failed"
    later = end.at + timedelta(seconds=9.9)
    decision = pace_next_turn(h.s, RECOVERY, PROGRESS, later, no_progress_reported=False)
    assert decision.action == "wait"
