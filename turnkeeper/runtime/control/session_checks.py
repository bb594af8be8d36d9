"""What the control loop checks of a session before its next turn, beyond the planner:
the host session artifact is still the one the last snapshot recorded, and whether the
goal already holds the replan obligation for the session's idle streak."""

from __future__ import annotations

from pathlib import Path

from turnkeeper.kernel import GoalState
from turnkeeper.kernel.model import ObligationStatus, ReplanTrigger
from turnkeeper.kernel.proposals import ReportNoProgress
from turnkeeper.kernel.session import SessionState
from turnkeeper.runtime.workspaces.snapshots import sha256_file


def artifact_damage(session: SessionState) -> str | None:
    """Why the host session artifact cannot be resumed (missing, or not what the last
    snapshot recorded), or None. Checked only while the last turn is the completed
    one: a later failed or lost turn may have legitimately written to it."""
    last, end = session.last_completed, session.last_turn_end
    if last is None or end is None or end.turn_id != last.turn_id:
        return None
    if session.in_flight is not None or session.recovery is not None:
        return None
    snap = last.snapshot
    if snap.host_artifact_path is None or snap.host_artifact_digest is None:
        return None
    live = Path(snap.host_artifact_path)
    if not live.is_file():
        return "host_artifact_missing"
    if sha256_file(live) != snap.host_artifact_digest:
        return "host_artifact_digest_mismatch"
    return None


def no_progress_reported(goal: GoalState, session: SessionState) -> bool:
    """Whether the goal holds this idle streak's obligation (open or discharged), or
    any open one for the session."""
    streak = session.idle_since_turn
    if streak is None:
        return False
    return any(
        o.trigger is ReplanTrigger.NO_PROGRESS
        and o.subject == session.session_id
        and (o.fingerprint == streak or o.status is ObligationStatus.OPEN)
        for o in goal.obligations.values()
    )


def no_progress_report(session: SessionState) -> ReportNoProgress:
    """The report that raises the replan obligation for the session's idle streak."""
    return ReportNoProgress(
        session_id=session.session_id,
        fingerprint=session.idle_since_turn or "unknown",
        turns=session.turns_without_progress,
    )
