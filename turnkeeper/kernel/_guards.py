"""Checks shared by the decision rules. Each one raises a typed error or returns.

Reasons are stable snake_case words; callers and tests match on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TypeVar

from turnkeeper.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound
from turnkeeper.kernel.events import ObligationDischarged
from turnkeeper.kernel.model import (
    Discharge,
    Evidence,
    GoalState,
    ObligationStatus,
    ReplanTrigger,
    Todo,
    TodoStatus,
)
from turnkeeper.kernel.proposals import Fence

_T = TypeVar("_T")


def require_text(field: str, value: str) -> None:
    """The one check for emptiness: the limits' types (kernel/limits.py) bound a value's
    length and characters but let an empty one through, so an empty or blank value gets
    this reason (``empty_text``) whichever way its proposal was made."""
    if not value.strip():
        raise InvalidArgument(
            f"{field} must not be empty", reason="empty_text", details={"field": field}
        )


def require_unique(field: str, values: Iterable[str]) -> None:
    seen: set[str] = set()
    for value in values:
        require_text(field, value)
        if value in seen:
            raise InvalidArgument(
                f"duplicate {field} {value!r}",
                reason="duplicate_value",
                details={"field": field, "value": value},
            )
        seen.add(value)


def require_utc(field: str, value: datetime) -> None:
    """Times must be timezone-aware UTC: naive or local times make replay ambiguous."""
    if value.tzinfo is None or value.utcoffset() != timedelta(0):
        raise InvalidArgument(
            f"{field} must be a timezone-aware UTC datetime",
            reason="naive_datetime",
            details={"field": field},
        )


def require_not_future(field: str, value: datetime, now: datetime) -> None:
    require_utc(field, value)
    if value > now:
        raise InvalidArgument(
            f"{field} is in the future",
            reason="time_in_future",
            details={"field": field, "value": value.isoformat()},
        )


def lookup(table: dict[str, _T], entity: str, key: str) -> _T:
    """``table[key]`` or ``NotFound(reason="<entity>_not_found")``."""
    if key not in table:
        raise NotFound(
            f"unknown {entity} {key!r}", reason=f"{entity}_not_found", details={"id": key}
        )
    return table[key]


def check_fence(todo: Todo, fence: Fence | None) -> None:
    """The proposal must act under the todo's current claim (owner and epoch).

    A mismatch means the caller's claim was taken over, released or renewed by a
    newer incarnation: it is fenced off and nothing it proposes is written.
    """
    require_open_todo(todo)
    if todo.claim is None:
        raise FailedPrecondition(
            f"todo {todo.id!r} is not claimed",
            reason="not_claimed",
            details={"todo_id": todo.id, "status": todo.status.value},
        )
    if fence is None:
        raise FailedPrecondition(
            f"todo {todo.id!r} is claimed: the claim's owner and epoch are required",
            reason="fence_required",
            details={"todo_id": todo.id},
        )
    if (fence.owner, fence.epoch) != (todo.claim.owner, todo.claim.epoch):
        raise Aborted(
            f"claim on {todo.id!r} is stale",
            reason="stale_epoch",
            details={
                "todo_id": todo.id,
                "proposed": {"owner": fence.owner, "epoch": fence.epoch},
                "current": {"owner": todo.claim.owner, "epoch": todo.claim.epoch},
            },
        )


def require_open_todo(todo: Todo) -> None:
    if todo.status in (TodoStatus.DONE, TodoStatus.SUPERSEDED):
        raise FailedPrecondition(
            f"todo {todo.id!r} is {todo.status.value}",
            reason="todo_closed",
            details={"todo_id": todo.id, "status": todo.status.value},
        )


def check_evidence_usable(evidence: Evidence, now: datetime, revision: str | None) -> str | None:
    """Why ``evidence`` cannot support a claim at ``now`` (a reason), or None if it can."""
    if not evidence.passed:
        return "evidence_failed"
    if not evidence.is_fresh(now) or (revision is not None and evidence.revision != revision):
        return "evidence_stale"
    return None


def evidence_error(
    reason: str, evidence: Evidence, now: datetime, revision: str | None
) -> FailedPrecondition:
    return FailedPrecondition(
        f"evidence {evidence.id!r} for {evidence.key!r} cannot be used: {reason}",
        reason=reason,
        details={
            "evidence_id": evidence.id,
            "key": evidence.key,
            "exit_code": evidence.exit_code,
            "recorded_at": evidence.recorded_at.isoformat(),
            "freshness_seconds": evidence.freshness_seconds,
            "revision": evidence.revision,
            "current_revision": revision,
            "now": now.isoformat(),
        },
    )


def reject_discharge(kind: str, discharges: list[str]) -> None:
    """A proposal that is not an observable delta may not discharge anything."""
    if discharges:
        raise FailedPrecondition(
            f"{kind} is not an observable delta and cannot discharge a replan obligation",
            reason="replan_requires_delta",
            details={"kind": kind, "discharges": discharges},
        )


def discharge_events(
    state: GoalState,
    discharges: list[str],
    *,
    by: str,
    ref: str,
    now: datetime,
    auto_successor_of: str | None = None,
) -> list[ObligationDischarged]:
    """Events discharging ``discharges``; each must name an open obligation.

    ``auto_successor_of`` also discharges the open ``successor_needed``
    obligations of that todo, since linking a successor is exactly their delta.
    """
    require_unique("discharges", discharges)
    ids = list(discharges)
    for obligation_id in discharges:
        obligation = lookup(state.obligations, "obligation", obligation_id)
        if obligation.status is not ObligationStatus.OPEN:
            raise FailedPrecondition(
                f"obligation {obligation_id!r} is already discharged",
                reason="obligation_not_open",
                details={"obligation_id": obligation_id},
            )
    if auto_successor_of is not None:
        ids += [
            o.id
            for o in state.open_obligations()
            if o.trigger is ReplanTrigger.SUCCESSOR_NEEDED
            and o.subject == auto_successor_of
            and o.id not in ids
        ]
    discharge = Discharge(by=by, ref=ref, at=now)
    return [ObligationDischarged(obligation_id=i, discharge=discharge, at=now) for i in ids]
