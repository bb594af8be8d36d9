"""Decision rules for the goal itself: creation, acceptance, vision, replan deltas, closure."""

from __future__ import annotations

from datetime import datetime

from turnkeeper.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from turnkeeper.kernel._guards import (
    check_evidence_usable,
    discharge_events,
    evidence_error,
    lookup,
    reject_discharge,
    require_text,
    require_unique,
)
from turnkeeper.kernel.audit import audit
from turnkeeper.kernel.events import (
    AcceptanceUpdated,
    CriterionSatisfied,
    GoalClosed,
    GoalCreated,
    GoalEvent,
    NoFollowUpRecorded,
    NoteRecorded,
    VisionCheckpointRecorded,
)
from turnkeeper.kernel.model import (
    VISION_DELTA_STATUSES,
    Criterion,
    GoalState,
    NoFollowUp,
    VisionCheckpoint,
    VisionStatus,
)
from turnkeeper.kernel.proposals import (
    CloseGoal,
    CreateGoal,
    CriterionSpec,
    Note,
    RecordNoFollowUp,
    RecordVisionCheckpoint,
    SatisfyCriterion,
    UpdateAcceptance,
)


def create_goal(p: CreateGoal, now: datetime) -> list[GoalEvent]:
    require_text("goal_id", p.goal_id)
    require_text("title", p.title)
    _check_specs(p.criteria)
    require_unique("agents_requiring_vision", p.agents_requiring_vision)
    criteria = [Criterion(id=c.id, text=c.text) for c in p.criteria]
    return [
        GoalCreated(
            goal_id=p.goal_id,
            title=p.title,
            objective=p.objective,
            criteria=criteria,
            agents_requiring_vision=p.agents_requiring_vision,
            at=now,
        )
    ]


def update_acceptance(state: GoalState, p: UpdateAcceptance, now: datetime) -> list[GoalEvent]:
    if not p.criteria:
        # Emptying acceptance would make the goal look complete without doing it.
        raise InvalidArgument("criteria must not be empty", reason="empty_criteria")
    _check_specs(p.criteria)
    agents = p.agents_requiring_vision
    if agents is not None:
        require_unique("agents_requiring_vision", agents)
    current = {c.id: c for c in state.goal.criteria}
    if p.mode == "add":
        for spec in p.criteria:
            if spec.id in current:
                raise AlreadyExists(
                    f"criterion {spec.id!r} already exists",
                    reason="criterion_exists",
                    details={"id": spec.id},
                )
        criteria = [*state.goal.criteria, *(Criterion(id=c.id, text=c.text) for c in p.criteria)]
    else:
        # A criterion whose id and text are unchanged keeps what met it.
        criteria = [
            current[c.id]
            if c.id in current and current[c.id].text == c.text
            else Criterion(id=c.id, text=c.text)
            for c in p.criteria
        ]
    discharges = discharge_events(state, p.discharges, by=p.kind, ref="acceptance", now=now)
    updated = AcceptanceUpdated(
        criteria=criteria,
        agents_requiring_vision=state.goal.agents_requiring_vision if agents is None else agents,
        at=now,
    )
    return [updated, *discharges]


def satisfy_criterion(state: GoalState, p: SatisfyCriterion, now: datetime) -> list[GoalEvent]:
    criteria = {c.id: c for c in state.goal.criteria}
    lookup(criteria, "criterion", p.criterion_id)
    require_unique("evidence_ids", p.evidence_ids)
    if not p.evidence_ids:
        raise FailedPrecondition(
            "a criterion is met only by evidence",
            reason="evidence_missing",
            details={"criterion_id": p.criterion_id},
        )
    for evidence_id in p.evidence_ids:
        evidence = lookup(state.evidence, "evidence", evidence_id)
        reason = check_evidence_usable(evidence, now, p.current_revision)
        if reason is not None:
            raise evidence_error(reason, evidence, now, p.current_revision)
    return [CriterionSatisfied(criterion_id=p.criterion_id, evidence_ids=p.evidence_ids, at=now)]


def record_vision_checkpoint(
    state: GoalState, p: RecordVisionCheckpoint, now: datetime
) -> list[GoalEvent]:
    require_text("agent", p.agent)
    if p.status is VisionStatus.UNCHANGED:
        require_text("reason", p.reason)
    if p.status is VisionStatus.PATCHED:
        require_text("vision_text", p.vision_text or "")
    if p.status not in VISION_DELTA_STATUSES:
        reject_discharge(f"vision checkpoint {p.status.value!r}", p.discharges)
    checkpoint = VisionCheckpoint(
        agent=p.agent,
        status=p.status,
        reason=p.reason,
        vision_text=p.vision_text,
        at=now,
        refresh_seq=state.goal.refresh_seq,
    )
    discharges = discharge_events(state, p.discharges, by=p.kind, ref=p.agent, now=now)
    return [VisionCheckpointRecorded(checkpoint=checkpoint, at=now), *discharges]


def record_no_follow_up(state: GoalState, p: RecordNoFollowUp, now: datetime) -> list[GoalEvent]:
    require_text("summary", p.summary)
    if not p.discharges:
        raise InvalidArgument(
            "a no-follow-up record must name the obligations it discharges",
            reason="nothing_to_discharge",
        )
    discharges = discharge_events(state, p.discharges, by=p.kind, ref=p.reason.value, now=now)
    record = NoFollowUp(reason=p.reason, summary=p.summary, at=now)
    return [NoFollowUpRecorded(record=record, at=now), *discharges]


def note(state: GoalState, p: Note, now: datetime) -> list[GoalEvent]:
    require_text("author", p.author)
    require_text("text", p.text)
    # "Re-assessed, continuing" is not a delta: a note never discharges an obligation.
    reject_discharge("note", p.discharges)
    return [NoteRecorded(author=p.author, text=p.text, at=now)]


def close_goal(state: GoalState, p: CloseGoal, now: datetime) -> list[GoalEvent]:
    require_text("summary", p.summary)
    report = audit(state, now)
    if not report.terminal:
        raise FailedPrecondition(
            "goal is not terminal",
            reason="goal_not_terminal",
            details={
                "blockers": [b.model_dump(mode="json") for b in report.blockers],
                "audit": report.model_dump(mode="json", exclude={"blockers"}),
            },
        )
    closure = NoFollowUp(reason=p.reason, summary=p.summary, at=now)
    return [GoalClosed(closure=closure, at=now)]


def _check_specs(specs: list[CriterionSpec]) -> None:
    require_unique("criterion id", [c.id for c in specs])
    for spec in specs:
        require_text("criterion text", spec.text)
