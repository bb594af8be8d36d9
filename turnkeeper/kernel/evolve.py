"""Folding events into state: ``evolve`` applies one event, ``fold`` a whole stream.

``evolve`` trusts that ``decide`` validated the event, but a stream that cannot be
folded at all (an event about an unknown todo, a second ``goal_created``) means
the log is not one this kernel wrote; that is :class:`DataLoss`, never a guess.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TypeVar

from turnkeeper.errors import DataLoss
from turnkeeper.kernel.events import (
    AcceptanceUpdated,
    ClaimReleased,
    ClaimRenewed,
    CriterionSatisfied,
    EvidenceRecorded,
    GateOpened,
    GateResolved,
    GoalClosed,
    GoalCreated,
    GoalEvent,
    MonitorAdded,
    MonitorRetired,
    NoFollowUpRecorded,
    NoteRecorded,
    ObligationDischarged,
    ObligationRaised,
    ReadbackRecorded,
    TodoAdded,
    TodoBlocked,
    TodoClaimed,
    TodoCompleted,
    TodoSuperseded,
    TodoUnblocked,
    VisionCheckpointRecorded,
)
from turnkeeper.kernel.model import (
    Claim,
    Completion,
    Evidence,
    Gate,
    GateStatus,
    Goal,
    GoalNote,
    GoalState,
    GoalStatus,
    Monitor,
    ObligationStatus,
    Readback,
    ReplanObligation,
    Todo,
    TodoStatus,
)

_T = TypeVar("_T")


def fold_goal(events: Iterable[GoalEvent]) -> GoalState:
    """The state after applying ``events`` in order; the stream must not be empty."""
    state: GoalState | None = None
    for event in events:
        state = evolve_goal(state, event)
    if state is None:
        raise DataLoss("cannot fold an empty goal stream", reason="empty_stream")
    return state


def evolve_goal(state: GoalState | None, event: GoalEvent) -> GoalState:
    """The state after ``event``. Only ``goal_created`` may start a stream."""
    if isinstance(event, GoalCreated):
        if state is not None:
            raise _broken("goal_created on an existing goal", event)
        goal = Goal(
            id=event.goal_id,
            title=event.title,
            objective=event.objective,
            criteria=event.criteria,
            agents_requiring_vision=event.agents_requiring_vision,
            created_at=event.at,
        )
        return GoalState(goal=goal, version=1)
    if state is None:
        raise _broken("the first event of a goal stream must be goal_created", event)
    # indexed(): the tally and evidence index, built once, then carried step to step.
    return _apply(state.indexed(), event).model_copy(update={"version": state.version + 1})


def _apply(state: GoalState, event: GoalEvent) -> GoalState:
    match event:
        case AcceptanceUpdated():
            return _with_goal(
                state,
                criteria=event.criteria,
                agents_requiring_vision=event.agents_requiring_vision,
                refresh_seq=state.goal.refresh_seq + 1,
            )
        case CriterionSatisfied():
            if event.criterion_id not in {c.id for c in state.goal.criteria}:
                raise _broken("unknown criterion", event)
            criteria = [
                c.model_copy(update={"met": True, "evidence_ids": event.evidence_ids})
                if c.id == event.criterion_id
                else c
                for c in state.goal.criteria
            ]
            return _with_goal(state, criteria=criteria)
        case VisionCheckpointRecorded():
            vision = {**state.goal.vision, event.checkpoint.agent: event.checkpoint}
            return _with_goal(state, vision=vision)
        case GoalClosed():
            return _with_goal(state, status=GoalStatus.CLOSED, closure=event.closure)
        case (
            TodoAdded()
            | TodoClaimed()
            | ClaimRenewed()
            | ClaimReleased()
            | TodoCompleted()
            | TodoSuperseded()
            | TodoBlocked()
            | TodoUnblocked()
        ):
            return _apply_todo(state, event)
        case GateOpened():
            gate = Gate(
                id=event.gate_id,
                title=event.title,
                blocking=event.blocking,
                scope=event.scope,
                opened_at=event.at,
            )
            return state.model_copy(update={"gates": {**state.gates, gate.id: gate}})
        case GateResolved():
            gate = _get(state.gates, event.gate_id, event)
            resolved = gate.model_copy(
                update={"status": GateStatus.RESOLVED, "resolution": event.resolution}
            )
            return state.model_copy(update={"gates": {**state.gates, gate.id: resolved}})
        case MonitorAdded() | ReadbackRecorded() | MonitorRetired():
            return _apply_monitor(state, event)
        case EvidenceRecorded():
            evidence = Evidence(
                id=event.evidence_id,
                key=event.key,
                command=event.command,
                revision=event.revision,
                tree=event.tree,
                exit_code=event.exit_code,
                output_digest=event.output_digest,
                output_tail=event.output_tail,
                recorded_at=event.recorded_at,
                freshness_seconds=event.freshness_seconds,
            )
            return state.with_evidence_recorded(evidence)
        case ObligationRaised() | ObligationDischarged():
            return _apply_obligation(state, event)
        case NoFollowUpRecorded():
            return state.model_copy(update={"no_follow_ups": [*state.no_follow_ups, event.record]})
        case NoteRecorded():
            note = GoalNote(author=event.author, text=event.text, at=event.at)
            return state.model_copy(update={"notes": [*state.notes, note]})
        case _:  # pragma: no cover - GoalCreated is handled by evolve
            raise _broken("unexpected event", event)


def _apply_todo(
    state: GoalState,
    event: TodoAdded
    | TodoClaimed
    | ClaimRenewed
    | ClaimReleased
    | TodoCompleted
    | TodoSuperseded
    | TodoBlocked
    | TodoUnblocked,
) -> GoalState:
    if isinstance(event, TodoAdded):
        added = Todo(
            id=event.todo_id,
            title=event.title,
            depends_on=event.depends_on,
            required_evidence=event.required_evidence,
            successor_required=event.successor_required,
            successor_of=event.successor_of,
            created_at=event.at,
        )
        changed = {added.id: added}
        if event.successor_of is not None:
            pred = _get(state.todos, event.successor_of, event)
            changed[pred.id] = pred.model_copy(
                update={"successors": [*pred.successors, event.todo_id]}
            )
        return state.with_todos(changed)

    todo = _get(state.todos, event.todo_id, event)
    update: dict[str, object]
    match event:
        case TodoClaimed():
            claim = Claim(
                owner=event.owner, lease_expires_at=event.lease_expires_at, epoch=event.epoch
            )
            update = {"status": TodoStatus.CLAIMED, "claim": claim, "epoch": event.epoch}
        case ClaimRenewed():
            if todo.claim is None:
                raise _broken("renewal of an unclaimed todo", event)
            claim = todo.claim.model_copy(update={"lease_expires_at": event.lease_expires_at})
            update = {"claim": claim}
        case ClaimReleased():
            update = {"status": TodoStatus.OPEN, "claim": None}
        case TodoCompleted():
            completion = Completion(owner=event.owner, evidence_ids=event.evidence_ids, at=event.at)
            update = {"status": TodoStatus.DONE, "claim": None, "completion": completion}
        case TodoSuperseded():
            update = {
                "status": TodoStatus.SUPERSEDED,
                "claim": None,
                "superseded_reason": event.reason,
            }
        case TodoBlocked():
            update = {"status": TodoStatus.BLOCKED, "claim": None, "blocked_reason": event.reason}
        case TodoUnblocked():
            update = {"status": TodoStatus.OPEN, "blocked_reason": None}
    return state.with_todos({todo.id: todo.model_copy(update=update)})


def _apply_monitor(
    state: GoalState, event: MonitorAdded | ReadbackRecorded | MonitorRetired
) -> GoalState:
    if isinstance(event, MonitorAdded):
        monitor = Monitor(
            id=event.monitor_id,
            target=event.target,
            cadence_seconds=event.cadence_seconds,
            next_due=event.next_due,
            stall_limit=event.stall_limit,
            required=event.required,
            freshness_seconds=event.freshness_seconds,
        )
    elif isinstance(event, ReadbackRecorded):
        old = _get(state.monitors, event.monitor_id, event)
        unchanged = old.last_readback is not None and old.last_readback.value == event.value
        monitor = old.model_copy(
            update={
                "last_readback": Readback(value=event.value, at=event.observed_at),
                "no_change_streak": old.no_change_streak + 1 if unchanged else 0,
                "streak_started_at": old.streak_started_at if unchanged else event.observed_at,
                "next_due": event.observed_at + timedelta(seconds=old.cadence_seconds),
            }
        )
    else:
        old = _get(state.monitors, event.monitor_id, event)
        monitor = old.model_copy(update={"retired": True, "retired_reason": event.reason})
    return state.model_copy(update={"monitors": {**state.monitors, monitor.id: monitor}})


def _apply_obligation(
    state: GoalState, event: ObligationRaised | ObligationDischarged
) -> GoalState:
    if isinstance(event, ObligationRaised):
        obligation = ReplanObligation(
            id=event.obligation_id,
            trigger=event.trigger,
            subject=event.subject,
            fingerprint=event.fingerprint,
            detail=event.detail,
            raised_at=event.at,
        )
        # Raising an obligation is a material refresh: vision must be re-stated.
        state = _with_goal(state, refresh_seq=state.goal.refresh_seq + 1)
    else:
        old = _get(state.obligations, event.obligation_id, event)
        obligation = old.model_copy(
            update={"status": ObligationStatus.DISCHARGED, "discharged_by": event.discharge}
        )
    return state.model_copy(
        update={"obligations": {**state.obligations, obligation.id: obligation}}
    )


def _with_goal(state: GoalState, **changes: object) -> GoalState:
    return state.model_copy(update={"goal": state.goal.model_copy(update=changes)})


def _get(table: dict[str, _T], key: str, event: GoalEvent) -> _T:
    if key not in table:
        raise _broken(f"unknown id {key!r}", event)
    return table[key]


def _broken(message: str, event: GoalEvent) -> DataLoss:
    return DataLoss(
        f"goal stream cannot be folded: {message}",
        reason="inconsistent_stream",
        details={"event_type": event.type},
    )
