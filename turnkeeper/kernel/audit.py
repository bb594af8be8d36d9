"""The terminal audit: is this goal really done at ``now``?

All todos ticked is not enough. A goal is terminal only when every counter below
is zero: no unfinished todo, no due monitor, no unresolved blocking gate, no
pending successor, no open replan obligation and no replan trigger waiting to be
raised, no acceptance gap, no failing postcondition and no stale required readback.
Each non-zero counter comes with named blockers so a caller can see what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from enum import StrEnum

from turnkeeper.kernel.model import (
    UNFINISHED_TODO_STATUSES,
    GateStatus,
    GoalState,
    KernelModel,
)
from turnkeeper.kernel.replan import needs_successor, pending_triggers


class BlockerKind(StrEnum):
    OPEN_TODO = "open_todo"
    DUE_MONITOR = "due_monitor"
    UNRESOLVED_BLOCKING_GATE = "unresolved_blocking_gate"
    PENDING_SUCCESSOR = "pending_successor"
    REPLAN_OBLIGATION = "replan_obligation"
    UNRAISED_REPLAN_TRIGGER = "unraised_replan_trigger"
    ACCEPTANCE_GAP = "acceptance_gap"
    RETRYABLE_POSTCONDITION = "retryable_postcondition"
    STALE_READBACK = "stale_readback"


class Blocker(KernelModel):
    kind: BlockerKind
    subject: str
    text: str


class TerminalAudit(KernelModel):
    open_todos: int
    due_monitors: int
    unresolved_blocking_gates: int
    pending_successors: int
    replan_obligations: int
    # Replan conditions that hold at ``now`` but were never raised; today only
    # stale evidence, which needs a ``Reassess`` to become an obligation.
    unraised_replan_triggers: int
    acceptance_gaps: int
    retryable_postconditions: int
    stale_readbacks: int
    blockers: list[Blocker]
    terminal: bool

    def counters(self) -> dict[str, int]:
        """The counters by name, in declaration order (what ``audit --json`` and the
        goal page show beside the blockers)."""
        data = self.model_dump(exclude={"blockers", "terminal"})
        return {name: int(value) for name, value in data.items()}


def audit(state: GoalState, now: datetime) -> TerminalAudit:
    """Count everything that stops ``state``'s goal from closing at ``now``."""
    blockers = [
        Blocker(kind=kind, subject=subject, text=text)
        for kind, subject, text in _blockers(state, now)
    ]
    counts = dict.fromkeys(BlockerKind, 0)
    for blocker in blockers:
        counts[blocker.kind] += 1
    return TerminalAudit(
        open_todos=counts[BlockerKind.OPEN_TODO],
        due_monitors=counts[BlockerKind.DUE_MONITOR],
        unresolved_blocking_gates=counts[BlockerKind.UNRESOLVED_BLOCKING_GATE],
        pending_successors=counts[BlockerKind.PENDING_SUCCESSOR],
        replan_obligations=counts[BlockerKind.REPLAN_OBLIGATION],
        unraised_replan_triggers=counts[BlockerKind.UNRAISED_REPLAN_TRIGGER],
        acceptance_gaps=counts[BlockerKind.ACCEPTANCE_GAP],
        retryable_postconditions=counts[BlockerKind.RETRYABLE_POSTCONDITION],
        stale_readbacks=counts[BlockerKind.STALE_READBACK],
        blockers=blockers,
        terminal=not blockers,
    )


def is_terminal(state: GoalState, now: datetime) -> bool:
    """``audit(state, now).terminal``, stopping at the first blocker: the planner asks
    before every turn, and needs neither the counts nor the blockers' models."""
    tally = state.todo_tally()
    if tally.unfinished or tally.successor_needed:
        return False  # a todo blocks: known without finding which (the first may be last)
    return next(_blockers(state, now), None) is None


def _blockers(state: GoalState, now: datetime) -> Iterator[tuple[BlockerKind, str, str]]:
    """(kind, subject, text) of each blocker, in the order ``audit`` lists them; lazily,
    so a caller that needs only the first computes no more."""
    tally = state.todo_tally()
    if tally.unfinished or tally.successor_needed:  # else no todo blocks: no walk over them
        for todo in state.todos.values():
            if todo.status in UNFINISHED_TODO_STATUSES:
                yield BlockerKind.OPEN_TODO, todo.id, f"todo {todo.title!r} is {todo.status.value}"
            if needs_successor(todo):
                yield (
                    BlockerKind.PENDING_SUCCESSOR,
                    todo.id,
                    f"todo {todo.title!r} needs a successor",
                )

    for monitor in state.monitors.values():
        if monitor.retired:
            continue
        if monitor.next_due <= now:
            yield BlockerKind.DUE_MONITOR, monitor.id, f"monitor {monitor.target!r} is due"
        if monitor.required:
            last = monitor.last_readback
            window = timedelta(seconds=monitor.freshness_seconds or 0)
            if last is None or now - last.at > window:
                yield (
                    BlockerKind.STALE_READBACK,
                    monitor.id,
                    f"required readback of {monitor.target!r} is missing or stale",
                )

    for gate in state.gates.values():
        if gate.blocking and gate.status is GateStatus.OPEN:
            yield BlockerKind.UNRESOLVED_BLOCKING_GATE, gate.id, f"gate {gate.title!r} is open"

    for obligation in state.open_obligations():
        yield (
            BlockerKind.REPLAN_OBLIGATION,
            obligation.id,
            f"replan obligation {obligation.trigger.value} on {obligation.subject}",
        )
    for hit in pending_triggers(state, now):
        yield BlockerKind.UNRAISED_REPLAN_TRIGGER, hit.subject, f"{hit.trigger.value}: {hit.detail}"

    for criterion in state.goal.criteria:
        if not criterion.met:
            yield BlockerKind.ACCEPTANCE_GAP, criterion.id, f"criterion unmet: {criterion.text}"
    for agent in missing_vision_checkpoints(state):
        yield BlockerKind.ACCEPTANCE_GAP, agent, f"vision_checkpoint_missing:{agent}"

    for key in failing_evidence_keys(state):
        yield BlockerKind.RETRYABLE_POSTCONDITION, key, f"latest run of {key!r} failed"


def missing_vision_checkpoints(state: GoalState) -> list[str]:
    """Agents that owe a vision checkpoint for the goal's latest material refresh."""
    goal = state.goal
    return [
        agent
        for agent in goal.agents_requiring_vision
        if agent not in goal.vision or goal.vision[agent].refresh_seq < goal.refresh_seq
    ]


def failing_evidence_keys(state: GoalState) -> list[str]:
    """Evidence keys whose latest record failed: a postcondition to retry."""
    failing: list[str] = []
    for key in state.evidence_keys():
        latest = state.latest_evidence(key)
        if latest is not None and not latest.passed:
            failing.append(key)
    return failing
