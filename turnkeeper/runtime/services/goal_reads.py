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


def goal_states(projections: Iterable[Projection]) -> list[GoalState]:
    """The states of goal projections (``DATA_LOSS`` for one that does not decode)."""
    return [decode_state(GoalState, p.stream_id, p.state) for p in projections]


def audit_of(store: EventStore, state: GoalState) -> TerminalAudit:
    """The terminal audit of a goal state, on the database's clock (as ``GoalService``
    audits)."""
    return audit(state, store.now())
