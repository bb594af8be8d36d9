"""``decide``: the kernel's one entry point for change.

``decide_goal(state, proposal, now)`` returns the events that accepting ``proposal``
produces, or raises a typed error from :mod:`turnkeeper.errors` and produces
nothing. It is pure: the time is the ``now`` argument, ids come in the proposal.

After the proposal's own events, ``decide`` checks the replan triggers on the
resulting state and appends an ``obligation_raised`` event for each new one, so
the proposal that caused a trigger is the one whose events carry it. The clock-
driven trigger (stale evidence) is checked only on ``Reassess``.

Rejections follow one convention: an unknown id is ``NotFound``
(``<entity>_not_found``); a duplicate id on create is ``AlreadyExists``
(``<entity>_exists``); a malformed value is ``InvalidArgument`` (``empty_text``,
``non_positive_value``, ``naive_datetime``, ...); a proposal that does not fit the
current state is ``FailedPrecondition``; contention on a claim is ``Aborted``
(``lease_held``, ``stale_epoch``).
"""

from __future__ import annotations

from datetime import datetime

from turnkeeper.errors import AlreadyExists, FailedPrecondition, NotFound
from turnkeeper.kernel import _goal_rules, _todo_rules, _watch_rules
from turnkeeper.kernel._dispatch import TableRule, rule
from turnkeeper.kernel._guards import require_utc
from turnkeeper.kernel._obligations import raise_obligations, report_no_progress
from turnkeeper.kernel.events import GoalEvent
from turnkeeper.kernel.evolve import evolve_goal
from turnkeeper.kernel.model import GoalState
from turnkeeper.kernel.proposals import (
    AddMonitor,
    AddTodo,
    BlockTodo,
    ClaimTodo,
    CloseGoal,
    CompleteTodo,
    CreateGoal,
    GoalProposal,
    Note,
    OpenGate,
    Reassess,
    RecordEvidence,
    RecordNoFollowUp,
    RecordReadback,
    RecordVisionCheckpoint,
    ReleaseClaim,
    RenewClaim,
    ReportNoProgress,
    ResolveGate,
    RetireMonitor,
    SatisfyCriterion,
    SupersedeTodo,
    UnblockTodo,
    UpdateAcceptance,
)
from turnkeeper.kernel.replan import pending_triggers


def _reassess(state: GoalState, p: Reassess, now: datetime) -> list[GoalEvent]:
    # Nothing of its own: the time-based triggers are checked after every rule.
    return []


# One rule per proposal kind on an existing goal. ``CreateGoal`` is handled apart
# because it is the only proposal that needs no state.
_RULES: dict[type[object], TableRule[GoalState, GoalEvent]] = dict(
    [
        rule(UpdateAcceptance, _goal_rules.update_acceptance),
        rule(SatisfyCriterion, _goal_rules.satisfy_criterion),
        rule(RecordVisionCheckpoint, _goal_rules.record_vision_checkpoint),
        rule(RecordNoFollowUp, _goal_rules.record_no_follow_up),
        rule(Note, _goal_rules.note),
        rule(CloseGoal, _goal_rules.close_goal),
        rule(Reassess, _reassess),
        rule(ReportNoProgress, report_no_progress),
        rule(AddTodo, _todo_rules.add_todo),
        rule(ClaimTodo, _todo_rules.claim_todo),
        rule(RenewClaim, _todo_rules.renew_claim),
        rule(ReleaseClaim, _todo_rules.release_claim),
        rule(CompleteTodo, _todo_rules.complete_todo),
        rule(SupersedeTodo, _todo_rules.supersede_todo),
        rule(BlockTodo, _todo_rules.block_todo),
        rule(UnblockTodo, _todo_rules.unblock_todo),
        rule(OpenGate, _watch_rules.open_gate),
        rule(ResolveGate, _watch_rules.resolve_gate),
        rule(AddMonitor, _watch_rules.add_monitor),
        rule(RecordReadback, _watch_rules.record_readback),
        rule(RetireMonitor, _watch_rules.retire_monitor),
        rule(RecordEvidence, _watch_rules.record_evidence),
    ]
)


def decide_goal(state: GoalState | None, proposal: GoalProposal, now: datetime) -> list[GoalEvent]:
    """Events for accepting ``proposal`` on ``state`` at ``now``, or a typed error.

    ``state`` is None for a goal with no events yet; only ``CreateGoal`` applies then.
    An accepted proposal may produce no events (a ``Reassess`` that finds nothing).
    """
    require_utc("now", now)
    if state is not None and state.is_closed:
        raise FailedPrecondition(
            f"goal {state.goal.id!r} is closed",
            reason="goal_closed",
            details={"goal_id": state.goal.id},
        )
    if isinstance(proposal, CreateGoal):
        if state is not None:
            raise AlreadyExists(
                f"goal {state.goal.id!r} already exists",
                reason="goal_exists",
                details={"goal_id": state.goal.id},
            )
        return _goal_rules.create_goal(proposal, now)
    if state is None:
        raise NotFound("goal not found", reason="goal_not_found", details={"kind": proposal.kind})

    events = _RULES[type(proposal)](state, proposal, now)
    if isinstance(proposal, CloseGoal):
        return events
    after = state
    for event in events:
        after = evolve_goal(after, event)
    hits = pending_triggers(after, now, include_time_based=isinstance(proposal, Reassess))
    return [*events, *raise_obligations(after, hits, now)]


def decide_and_evolve(
    state: GoalState | None, proposal: GoalProposal, now: datetime
) -> tuple[list[GoalEvent], GoalState]:
    """``decide`` plus the state after its events: the common caller's pair."""
    events = decide_goal(state, proposal, now)
    after = state
    for event in events:
        after = evolve_goal(after, event)
    if after is None:  # pragma: no cover - decide_goal(None, ...) always creates the goal
        raise NotFound("goal not found", reason="goal_not_found")
    return events, after
