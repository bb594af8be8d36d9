"""Lost turns in a row: folded from the turns' ends, bounded by the recovery policy.

A lost turn spends no attempt (its controller died or lost its lease, not its host),
so a turn lost every time — a worker whose lease keeper had died lost every turn
longer than its lease, forever — needs a bound of its own: the session's
``consecutive_lost`` counts lost turns in a row (from the log alone), a completed turn
breaks the streak, an operator's resume starts it again, and once it reaches the
policy's ``max_consecutive_lost`` the session is suspended (``lost_turns``) instead of
continued. Sessions recorded before the count existed decode with 0.
"""

from __future__ import annotations

import json

from tests.kernel_session.helpers import (
    Harness,
    accept,
    at,
    complete_turn,
    new_session,
    spec,
    start_host,
)
from turnkeeper.kernel.session import (
    LOST_TURNS,
    LossProof,
    NextTurn,
    ProgressPolicy,
    RecordTurnLost,
    RecoveryPolicy,
    SessionState,
    SetStatus,
    decide_recovery,
    fold_session,
    pace_next_turn,
)

POLICY = RecoveryPolicy(max_attempts=10, backoff_base_seconds=0, max_consecutive_lost=3)
PROGRESS = ProgressPolicy()
GONE = LossProof(ended="proven_gone", detail="no live host process at restart")


def _lose(h: Harness, turn_id: str, next_turn: NextTurn | None = None) -> NextTurn:
    """Accept a turn, start its host, lose it; the continuation queued for it."""
    accept(h, turn_id, next_turn or spec())
    start_host(h, turn_id)
    h.run(RecordTurnLost(lease=h.token, turn_id=turn_id, proof=GONE))
    pending = h.s.recovery
    assert pending is not None and pending.next is not None
    return pending.next


def _pace(h: Harness) -> tuple[str, str]:
    pace = pace_next_turn(h.s, POLICY, PROGRESS, at(10), no_progress_reported=False)
    return pace.action, pace.reason


def test_lost_turns_in_a_row_are_counted_and_suspend_the_session_at_the_bound() -> None:
    h = new_session()
    after = _lose(h, "turn-1")
    after = _lose(h, "turn-2", after)
    assert (h.s.consecutive_lost, h.s.counters.turns_lost) == (2, 2)
    assert h.s.consecutive_host_failures == 0  # still not the host's fault
    assert _pace(h) == ("go", "within_policy")  # below the bound: continued
    after = _lose(h, "turn-3", after)
    assert h.s.consecutive_lost == 3
    assert fold_session(h.events) == h.s  # from the log alone
    assert _pace(h) == ("suspend", LOST_TURNS)
    assert decide_recovery(h.s, POLICY, at(10)).action == "suspend"
    lenient = POLICY.model_copy(update={"max_consecutive_lost": 4})
    assert pace_next_turn(h.s, lenient, PROGRESS, at(10), no_progress_reported=False).action == (
        "go"
    )
    # Suspended for an operator; a resume vouches for a fresh start.
    h.run(SetStatus(lease=h.token, action="suspend", reason=LOST_TURNS))
    assert (h.s.status, h.s.status_reason) == ("suspended", LOST_TURNS)
    h.run(SetStatus(lease=h.token, action="resume"))
    assert h.s.consecutive_lost == 0
    assert _pace(h) == ("go", "within_policy")
    assert fold_session(h.events) == h.s


def test_a_completed_turn_breaks_the_streak() -> None:
    h = new_session()
    after = _lose(h, "turn-1")
    after = _lose(h, "turn-2", after)
    complete_turn(h, "turn-3", after)
    assert h.s.consecutive_lost == 0
    _lose(h, "turn-4")
    assert h.s.consecutive_lost == 1
    assert fold_session(h.events) == h.s


def test_the_default_bound_leaves_room_for_restarts_in_a_row() -> None:
    """Back-to-back restarts are what the crash core is built for (six in a row in the
    chaos harness): the default bound is above them."""
    assert RecoveryPolicy().max_consecutive_lost > 6


def test_a_session_recorded_before_the_count_decodes_with_zero() -> None:
    h = new_session()
    _lose(h, "turn-1")
    old = json.loads(h.s.model_dump_json())
    del old["consecutive_lost"]
    assert SessionState.model_validate(old).consecutive_lost == 0
