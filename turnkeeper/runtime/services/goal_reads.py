"""Goals as ``status`` reads them: decoded from their projections, and audited.

:mod:`turnkeeper.runtime.services.goals` writes and folds goals, so it imports the goal
kernel's events, proposals and decisions. Decoding a goal's projection and auditing it
need the state model and the audit alone: ``status``, which lists every goal and
decides nothing, reads them through this module (the events, proposals and decisions
were ~6% of its instructions at 1,000 sessions).
"""

from __future__ import annotations

from collections.abc import Iterable

from turnkeeper.kernel import GoalState, TerminalAudit, audit
from turnkeeper.runtime.log.codec import decode_state
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import Projection

GOAL_KIND = "goal"
# How many bytes of a large goal's state one append may leave unwritten (the goal
# codec's ``lag_bytes_per_event``, runtime/log/streams.py ``projection_for``). At a
# 3 MB goal (10,000 todos): a snapshot every ~190 appends, ~0.3 ms of each append's
# share of it, and a cold read folds at most ~190 events (~30 ms) onto the row; at
# 4 KiB the share was ~0.1 ms but a cold read folded up to ~760 (~125 ms, as much as
# decoding the goal).
GOAL_LAG_BYTES_PER_EVENT = 16 * 1024


def goal_states(projections: Iterable[Projection]) -> list[GoalState]:
    """The states of goal projections, each with its tail folded in (a large goal's
    projection lags its stream); ``DATA_LOSS`` for one that does not decode."""
    return [goal_state(p) for p in projections]


def goal_state(projection: Projection) -> GoalState:
    """One listed goal projection's state. A projection without a tail is decoded
    alone; one with a tail is folded by the goal codec, imported then: only a large
    goal has a tail, and the codec imports the goal kernel's events."""
    if not projection.tail:
        return decode_state(GoalState, projection.stream_id, projection.state)
    from turnkeeper.runtime.services.goals import GOAL_CODEC

    return GOAL_CODEC.state_of(projection)


def audit_of(store: EventStore, state: GoalState) -> TerminalAudit:
    """The terminal audit of a goal state, on the database's clock (as ``GoalService``
    audits)."""
    return audit(state, store.now())
