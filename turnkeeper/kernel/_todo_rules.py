"""Decision rules for todos: add, claim, renew, release, complete, supersede, block.

Claims are leases with a fencing epoch. Every new claim (first claim, takeover
of an expired lease, or the same owner claiming again) gets the next epoch, so
an older incarnation of an agent that still holds the previous epoch is fenced
off: whatever it proposes afterwards is ``Aborted(reason="stale_epoch")``.
"""

from __future__ import annotations

from datetime import datetime

from turnkeeper.errors import Aborted, AlreadyExists, FailedPrecondition, InvalidArgument
from turnkeeper.kernel._guards import (
    check_evidence_usable,
    check_fence,
    discharge_events,
    evidence_error,
    lookup,
    require_open_todo,
    require_text,
    require_unique,
    require_utc,
)
from turnkeeper.kernel.events import (
    ClaimReleased,
    ClaimRenewed,
    GoalEvent,
    TodoAdded,
    TodoBlocked,
    TodoClaimed,
    TodoCompleted,
    TodoSuperseded,
    TodoUnblocked,
)
from turnkeeper.kernel.model import GoalState, TodoStatus
from turnkeeper.kernel.proposals import (
    AddTodo,
    BlockTodo,
    ClaimTodo,
    CompleteTodo,
    ReleaseClaim,
    RenewClaim,
    SupersedeTodo,
    TodoSpec,
    UnblockTodo,
)


def dependency_met(state: GoalState, todo_id: str) -> bool:
    """A dependency is met when done, or superseded by successors that are all met (a
    todo the goal does not hold is not met)."""
    todo = state.todos.get(todo_id)
    if todo is None:
        return False
    if todo.status is TodoStatus.DONE:
        return True
    if todo.status is TodoStatus.SUPERSEDED and todo.successors:
        # Successors are always newer than their predecessor, so this terminates.
        return all(dependency_met(state, s) for s in todo.successors)
    return False


def add_todo(state: GoalState, p: AddTodo, now: datetime) -> list[GoalEvent]:
    if p.successor_of is not None:
        lookup(state.todos, "todo", p.successor_of)
    added = _todo_added(state, p.todo, p.successor_of, now)
    discharges = discharge_events(
        state,
        p.discharges,
        by=p.kind,
        ref=p.todo.todo_id,
        now=now,
        auto_successor_of=p.successor_of,
    )
    return [added, *discharges]


def claim_todo(state: GoalState, p: ClaimTodo, now: datetime) -> list[GoalEvent]:
    todo = lookup(state.todos, "todo", p.todo_id)
    require_text("owner", p.owner)
    _require_lease_ahead(p.lease_expires_at, now)
    require_open_todo(todo)
    if todo.status is TodoStatus.BLOCKED:
        raise FailedPrecondition(
            f"todo {todo.id!r} is blocked",
            reason="todo_blocked",
            details={"todo_id": todo.id, "blocked_reason": todo.blocked_reason},
        )
    gates = [g.id for g in state.gates.values() if g.blocks(todo.id)]
    if gates:
        raise FailedPrecondition(
            f"todo {todo.id!r} is held by an unresolved blocking gate",
            reason="gate_blocks",
            details={"todo_id": todo.id, "gates": gates},
        )
    pending = [d for d in todo.depends_on if not dependency_met(state, d)]
    if pending:
        raise FailedPrecondition(
            f"todo {todo.id!r} waits on unfinished dependencies",
            reason="dependency_unmet",
            details={"todo_id": todo.id, "pending": pending},
        )
    claim = todo.claim
    if claim is not None and claim.owner != p.owner and claim.is_live(now):
        raise Aborted(
            f"todo {todo.id!r} is claimed by {claim.owner!r}",
            reason="lease_held",
            details={
                "todo_id": todo.id,
                "owner": claim.owner,
                "epoch": claim.epoch,
                "lease_expires_at": claim.lease_expires_at.isoformat(),
            },
        )
    return [
        TodoClaimed(
            todo_id=todo.id,
            owner=p.owner,
            epoch=todo.epoch + 1,
            lease_expires_at=p.lease_expires_at,
            taken_over_from=claim.owner if claim is not None else None,
            at=now,
        )
    ]


def renew_claim(state: GoalState, p: RenewClaim, now: datetime) -> list[GoalEvent]:
    todo = lookup(state.todos, "todo", p.todo_id)
    check_fence(todo, p.fence)
    _require_lease_ahead(p.lease_expires_at, now)
    return [
        ClaimRenewed(
            todo_id=todo.id,
            owner=p.fence.owner,
            epoch=p.fence.epoch,
            lease_expires_at=p.lease_expires_at,
            at=now,
        )
    ]


def release_claim(state: GoalState, p: ReleaseClaim, now: datetime) -> list[GoalEvent]:
    todo = lookup(state.todos, "todo", p.todo_id)
    check_fence(todo, p.fence)
    return [ClaimReleased(todo_id=todo.id, owner=p.fence.owner, epoch=p.fence.epoch, at=now)]


def complete_todo(state: GoalState, p: CompleteTodo, now: datetime) -> list[GoalEvent]:
    todo = lookup(state.todos, "todo", p.todo_id)
    check_fence(todo, p.fence)
    require_unique("evidence_ids", p.evidence_ids)
    offered = [lookup(state.evidence, "evidence", i) for i in p.evidence_ids]
    for key in todo.required_evidence:
        candidates = [e for e in offered if e.key == key]
        if not candidates:
            raise FailedPrecondition(
                f"no evidence offered for required key {key!r}",
                reason="evidence_missing",
                details={"todo_id": todo.id, "key": key},
            )
        problems = {check_evidence_usable(e, now, p.current_revision): e for e in candidates}
        if None not in problems:
            # Report a stale passing record before a failing one: re-running is the fix.
            reason = "evidence_stale" if "evidence_stale" in problems else "evidence_failed"
            raise evidence_error(reason, problems[reason], now, p.current_revision)
    return [
        TodoCompleted(
            todo_id=todo.id,
            owner=p.fence.owner,
            epoch=p.fence.epoch,
            evidence_ids=p.evidence_ids,
            at=now,
        )
    ]


def supersede_todo(state: GoalState, p: SupersedeTodo, now: datetime) -> list[GoalEvent]:
    todo = lookup(state.todos, "todo", p.todo_id)
    require_text("reason", p.reason)
    require_open_todo(todo)
    if todo.status is TodoStatus.CLAIMED:
        check_fence(todo, p.fence)
    events: list[GoalEvent] = [TodoSuperseded(todo_id=todo.id, reason=p.reason, at=now)]
    if p.successor is not None:
        events.append(_todo_added(state, p.successor, todo.id, now))
    events += discharge_events(state, p.discharges, by=p.kind, ref=todo.id, now=now)
    return events


def block_todo(state: GoalState, p: BlockTodo, now: datetime) -> list[GoalEvent]:
    todo = lookup(state.todos, "todo", p.todo_id)
    require_text("reason", p.reason)
    require_open_todo(todo)
    if todo.status is TodoStatus.BLOCKED:
        raise FailedPrecondition(
            f"todo {todo.id!r} is already blocked",
            reason="todo_blocked",
            details={"todo_id": todo.id},
        )
    if todo.status is TodoStatus.CLAIMED:
        # Only the holder of the claim may block claimed work.
        check_fence(todo, p.fence)
    return [TodoBlocked(todo_id=todo.id, reason=p.reason, at=now)]


def unblock_todo(state: GoalState, p: UnblockTodo, now: datetime) -> list[GoalEvent]:
    todo = lookup(state.todos, "todo", p.todo_id)
    if todo.status is not TodoStatus.BLOCKED:
        raise FailedPrecondition(
            f"todo {todo.id!r} is not blocked",
            reason="todo_not_blocked",
            details={"todo_id": todo.id, "status": todo.status.value},
        )
    return [TodoUnblocked(todo_id=todo.id, at=now)]


def _todo_added(
    state: GoalState, spec: TodoSpec, successor_of: str | None, now: datetime
) -> TodoAdded:
    require_text("todo_id", spec.todo_id)
    require_text("title", spec.title)
    if spec.todo_id in state.todos:
        raise AlreadyExists(
            f"todo {spec.todo_id!r} already exists",
            reason="todo_exists",
            details={"id": spec.todo_id},
        )
    require_unique("depends_on", spec.depends_on)
    require_unique("required_evidence", spec.required_evidence)
    if spec.todo_id in spec.depends_on:
        raise InvalidArgument(
            f"todo {spec.todo_id!r} depends on itself",
            reason="self_dependency",
            details={"id": spec.todo_id},
        )
    for dependency in spec.depends_on:
        lookup(state.todos, "todo", dependency)
    return TodoAdded(
        todo_id=spec.todo_id,
        title=spec.title,
        depends_on=spec.depends_on,
        required_evidence=spec.required_evidence,
        successor_required=spec.successor_required,
        successor_of=successor_of,
        at=now,
    )


def _require_lease_ahead(lease_expires_at: datetime, now: datetime) -> None:
    require_utc("lease_expires_at", lease_expires_at)
    if lease_expires_at <= now:
        raise InvalidArgument(
            "lease_expires_at must be after now",
            reason="lease_not_in_future",
            details={"lease_expires_at": lease_expires_at.isoformat(), "now": now.isoformat()},
        )
