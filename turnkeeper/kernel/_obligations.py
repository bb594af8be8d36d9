"""Raising replan obligations: the events :mod:`turnkeeper.kernel.decide` appends when
a trigger holds (see :mod:`turnkeeper.kernel.replan` for the triggers themselves).

Apart from the triggers so that the audit, which reads the triggers, imports neither
the events nor the proposals: ``status`` audits every goal and decides nothing.
"""

from __future__ import annotations

from datetime import datetime

from turnkeeper.errors import InvalidArgument
from turnkeeper.kernel._guards import require_text
from turnkeeper.kernel.events import GoalEvent, ObligationRaised
from turnkeeper.kernel.model import GoalState, ObligationStatus, ReplanTrigger
from turnkeeper.kernel.proposals import ReportNoProgress
from turnkeeper.kernel.replan import TriggerHit


def raise_obligations(
    state: GoalState, hits: list[TriggerHit], now: datetime
) -> list[ObligationRaised]:
    """Events raising one obligation per hit.

    Ids are derived from the obligation count (``obl-1``, ``obl-2``, ...): the
    stream is the only writer of a goal, so the count is unique and replayable.
    """
    base = len(state.obligations)
    return [
        ObligationRaised(
            obligation_id=f"obl-{base + n}",
            trigger=hit.trigger,
            subject=hit.subject,
            fingerprint=hit.fingerprint,
            detail=hit.detail,
            at=now,
        )
        for n, hit in enumerate(hits, start=1)
    ]


def report_no_progress(state: GoalState, p: ReportNoProgress, now: datetime) -> list[GoalEvent]:
    """Raise the ``no_progress`` obligation a session's streak of idle turns calls for.

    Not derived from the goal's own state (the goal cannot see a session's turns), so
    it is raised only on this report. Repeating it for the same streak (the same
    fingerprint), or while the session's last one is still open, raises nothing: a
    controller may report again after a crash without doubling the obligation.
    """
    require_text("session_id", p.session_id)
    require_text("fingerprint", p.fingerprint)
    if p.turns < 1:
        raise InvalidArgument(
            "turns must be at least 1", reason="non_positive_value", details={"field": "turns"}
        )
    hit = TriggerHit(
        trigger=ReplanTrigger.NO_PROGRESS,
        subject=p.session_id,
        fingerprint=p.fingerprint,
        detail=f"session {p.session_id} made no progress in {p.turns} turns in a row",
    )
    for o in state.obligations.values():
        same_streak = (o.trigger, o.subject, o.fingerprint) == (
            hit.trigger,
            hit.subject,
            p.fingerprint,
        )
        still_open = o.status is ObligationStatus.OPEN and (o.trigger, o.subject) == (
            hit.trigger,
            hit.subject,
        )
        if same_streak or still_open:
            return []
    return list(raise_obligations(state, [hit], now))
