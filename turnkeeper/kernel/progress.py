"""What counts as progress on a goal (seed 001: rounds of surface progress need a replan).

A turn made progress when the goal events its write-back produced change what the
work *is* or how far it got: a todo completed, added, superseded, blocked or
unblocked; passing evidence; a criterion met; acceptance or vision changed; a gate
opened for a human decision; a monitor added or retired; an obligation discharged or
a structured no-follow-up. Claims and their renewals, notes, failing evidence and
readbacks are the surface of work, not its progress: an agent that only ever does
those is spinning, however busy it looks.
"""

from __future__ import annotations

from collections.abc import Iterable

from turnkeeper.kernel import events as ev
from turnkeeper.kernel.events import GoalEvent, GoalEventType
from turnkeeper.kernel.model import VISION_DELTA_STATUSES

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


def is_progress(event: GoalEvent) -> bool:
    if isinstance(event, ev.EvidenceRecorded):
        return event.exit_code == 0
    if isinstance(event, ev.VisionCheckpointRecorded):
        return event.checkpoint.status in VISION_DELTA_STATUSES
    return isinstance(event, _PROGRESS_EVENTS)


def made_progress(events: Iterable[GoalEvent]) -> bool:
    """Whether any of ``events`` is progress (see the module docstring)."""
    return any(is_progress(event) for event in events)
