"""What counts as progress on a goal: rounds that only look busy must lead to a replan.

A turn made progress when the goal events its write-back produced change what the
work *is* or how far it got: a todo completed, added, superseded, blocked or
unblocked; passing evidence that is new (see below); a criterion met; acceptance or
vision changed; a gate opened for a human decision; a monitor added or retired; an
obligation discharged or a structured no-follow-up. Claims and their renewals,
notes, failing evidence and readbacks are the surface of work, not its progress: an
agent that only ever does those is spinning, however busy it looks.

Passing evidence is progress only when it says something the goal did not already
know: its key had no passing, fresh record of the same output on the same revision
and worktree content before this turn. An agent that re-runs the same green check
every turn is busy, not advancing; refreshing evidence that went stale still counts.
"""

from __future__ import annotations

from collections.abc import Iterable

from turnkeeper.kernel import events as ev
from turnkeeper.kernel.events import GoalEvent, GoalEventType
from turnkeeper.kernel.model import VISION_DELTA_STATUSES, GoalState

_PROGRESS_EVENTS: tuple[type[GoalEventType], ...] = (
    ev.AcceptanceUpdated,
    ev.CriterionSatisfied,
    ev.TodoAdded,
    ev.TodoCompleted,
    ev.TodoSuperseded,
    ev.TodoBlocked,
    ev.TodoUnblocked,
    ev.GateOpened,
    ev.GateResolved,
    ev.MonitorAdded,
    ev.MonitorRetired,
    ev.ObligationDischarged,
    ev.NoFollowUpRecorded,
    ev.GoalClosed,
)


def is_progress(event: GoalEvent, before: GoalState | None = None) -> bool:
    """Whether ``event`` is progress on the goal as it was ``before`` the turn."""
    if isinstance(event, ev.EvidenceRecorded):
        return event.exit_code == 0 and not _repeats_known_evidence(event, before)
    if isinstance(event, ev.VisionCheckpointRecorded):
        return event.checkpoint.status in VISION_DELTA_STATUSES
    return isinstance(event, _PROGRESS_EVENTS)


def _repeats_known_evidence(event: ev.EvidenceRecorded, before: GoalState | None) -> bool:
    if before is None:
        return False
    known = before.latest_evidence(event.key)
    return (
        known is not None
        and known.passed
        and known.is_fresh(event.recorded_at)
        and known.revision == event.revision
        and known.tree == event.tree
        and known.output_digest == event.output_digest
    )


def made_progress(events: Iterable[GoalEvent], before: GoalState | None = None) -> bool:
    """Whether any of ``events`` is progress on the goal as it was ``before`` them
    (see the module docstring); without ``before``, all passing evidence counts."""
    return any(is_progress(event, before) for event in events)
