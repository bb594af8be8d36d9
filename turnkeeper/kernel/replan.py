"""Replan triggers: when the work's meaning must change, not just continue.

A trigger is a condition on the state. While it holds and no obligation covers
it, the kernel raises a replan obligation, which only an observable delta (a new
or superseded todo, a successor, changed acceptance, a vision patch, a structured
no-follow-up) can discharge.

Each condition is identified by ``(trigger, subject, fingerprint)``. The
fingerprint names one *occurrence* of the condition: once an obligation for an
occurrence was raised, that occurrence never raises another, even after the
obligation is discharged; a new occurrence (a new failing run, a new stall)
does. And while an obligation for ``(trigger, subject)`` is open, no second one
is raised.

``evidence_stale`` depends on the clock, so ``decide`` raises it only on an
explicit ``Reassess``; every other trigger changes only through a proposal, so
``decide`` checks them after every accepted proposal.
"""

from __future__ import annotations

from datetime import datetime

from turnkeeper.kernel.model import (
    Evidence,
    GoalState,
    KernelModel,
    ObligationStatus,
    ReplanTrigger,
    Todo,
    TodoStatus,
    TodoTally,
)

TIME_BASED_TRIGGERS = frozenset({ReplanTrigger.EVIDENCE_STALE})


class TriggerHit(KernelModel):
    """A replan condition that holds now."""

    trigger: ReplanTrigger
    subject: str
    fingerprint: str
    detail: str


def needs_successor(todo: Todo) -> bool:
    """A finished todo that promised a successor and has none yet."""
    finished = todo.status in (TodoStatus.DONE, TodoStatus.SUPERSEDED)
    return finished and todo.successor_required and not todo.successors


def _relied_keys(state: GoalState, tally: TodoTally) -> list[str]:
    """Every evidence key work relies on — one a done todo requires or a met criterion
    stands on — in the order the evidence log first names each (a key with no record
    raises nothing, so keys are taken from the log's own index)."""
    relied = set(tally.relied)
    for criterion in state.goal.criteria:
        if criterion.met:
            for evidence_id in criterion.evidence_ids:
                if evidence_id in state.evidence:
                    relied.add(state.evidence[evidence_id].key)
    if not relied:
        return []  # and no need of the log's index, which a state may not have built yet
    return [key for key in state.evidence_keys() if key in relied]


def detect_triggers(state: GoalState, now: datetime) -> list[TriggerHit]:
    """Every replan condition that holds in ``state`` at ``now``."""
    # decide asks this after every accepted proposal, and a goal that lives for days has
    # thousands of todos: what the triggers ask of them is the state's tally, kept as
    # they change, not a walk over them.
    tally = state.todo_tally()
    hits: list[TriggerHit] = []
    hits.extend(_frontier_exhausted(state, tally))
    for monitor in state.monitors.values():
        if not monitor.retired and monitor.no_change_streak > monitor.stall_limit:
            hits.append(
                TriggerHit(
                    trigger=ReplanTrigger.MONITOR_STALLED,
                    subject=monitor.id,
                    fingerprint=str(monitor.streak_started_at),
                    detail=f"{monitor.target}: no change for {monitor.no_change_streak} readbacks",
                )
            )
    for key in _relied_keys(state, tally):
        hits.extend(_evidence_hits(key, state.evidence_for_key(key), now))
    # Oldest first (ties by id): an order fixed by the todos alone, however the tally
    # was reached.
    needing = sorted(
        (state.todos[todo_id] for todo_id in tally.successor_needed),
        key=lambda todo: (todo.created_at, todo.id),
    )
    for todo in needing:
        hits.append(
            TriggerHit(
                trigger=ReplanTrigger.SUCCESSOR_NEEDED,
                subject=todo.id,
                fingerprint="",
                detail=f"todo {todo.id} requires a successor",
            )
        )
    return hits


def pending_triggers(
    state: GoalState, now: datetime, *, include_time_based: bool = True
) -> list[TriggerHit]:
    """Conditions that hold and that no obligation covers yet."""
    seen = {(o.trigger, o.subject, o.fingerprint) for o in state.obligations.values()}
    open_subjects = {
        (o.trigger, o.subject)
        for o in state.obligations.values()
        if o.status is ObligationStatus.OPEN
    }
    return [
        hit
        for hit in detect_triggers(state, now)
        if (include_time_based or hit.trigger not in TIME_BASED_TRIGGERS)
        and (hit.trigger, hit.subject, hit.fingerprint) not in seen
        and (hit.trigger, hit.subject) not in open_subjects
    ]


def _frontier_exhausted(state: GoalState, tally: TodoTally) -> list[TriggerHit]:
    # A goal that never had a todo has no frontier to exhaust; its unmet
    # acceptance already shows as an acceptance gap in the audit.
    unmet = [c.id for c in state.goal.criteria if not c.met]
    if not unmet or not state.todos or tally.runnable:
        return []
    return [
        TriggerHit(
            trigger=ReplanTrigger.FRONTIER_EXHAUSTED,
            subject=state.goal.id,
            fingerprint=f"todos={len(state.todos)},finished={tally.finished}",
            detail=f"no runnable todo while criteria are unmet: {', '.join(unmet)}",
        )
    ]


def _evidence_hits(key: str, records: list[Evidence], now: datetime) -> list[TriggerHit]:
    if not records:
        return []
    latest = records[-1]
    if not latest.passed:
        # The occurrence is the first failure after the last pass, so re-running
        # a still-failing command does not raise a new obligation each time.
        first_failure = latest
        for record in reversed(records):
            if record.passed:
                break
            first_failure = record
        return [
            TriggerHit(
                trigger=ReplanTrigger.EVIDENCE_CONTRADICTED,
                subject=key,
                fingerprint=first_failure.id,
                detail=f"{key!r} now fails (exit {latest.exit_code}) but work relied on it",
            )
        ]
    if not latest.is_fresh(now):
        return [
            TriggerHit(
                trigger=ReplanTrigger.EVIDENCE_STALE,
                subject=key,
                fingerprint=latest.id,
                detail=f"{key!r} was last verified at {latest.recorded_at.isoformat()}",
            )
        ]
    return []
