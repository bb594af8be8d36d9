"""A goal's state, as the kernel has it, turned into a handoff packet.

Only the goal stream is read for the packet's content. The goal's sessions are read
for one thing: to say in ``omitted`` what they hold that stays behind (their host
session handles, transcripts, host configurations and workspaces) and to give the
leak check their workspace paths. Nothing of a session is copied into the packet —
not even its id, which names private state in the original project; a session is
named there by its goal, host kind and creation time instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from turnkeeper.errors import FailedPrecondition
from turnkeeper.handoff.clean import check_clean
from turnkeeper.handoff.packet import (
    BlockerPart,
    CriterionPart,
    EvidencePart,
    GatePart,
    GoalPart,
    HandoffPacket,
    MonitorPart,
    ObligationPart,
    Omission,
    TodoPart,
)
from turnkeeper.kernel import GoalState, TerminalAudit
from turnkeeper.kernel.model import Evidence, Gate, Monitor, Todo, TodoStatus
from turnkeeper.kernel.session import SessionState


@dataclass(frozen=True)
class Origin:
    """Where the packet is made: never copied into it, only used to keep it clean."""

    project_root: str
    source_revision: str | None
    # Further local paths that must not appear (the user's home directory, say).
    private_paths: tuple[str, ...] = ()


def build_packet(
    state: GoalState,
    audit: TerminalAudit,
    sessions: list[SessionState],
    origin: Origin,
    now: datetime,
) -> HandoffPacket:
    """The packet for ``state`` at ``now``, checked clean; ``handoff_not_clean`` (naming
    the field) when a value would carry a credential or a local path."""
    if state.is_closed:
        raise FailedPrecondition(
            f"goal {state.goal.id!r} is closed: there is nothing left to carry on",
            reason="goal_closed",
            details={"goal_id": state.goal.id},
        )
    goal = state.goal
    ours = sorted((s for s in sessions if s.goal_id == goal.id), key=lambda s: s.created_at)
    packet = HandoffPacket(
        made_at=now,
        source_revision=origin.source_revision,
        goal=GoalPart(
            id=goal.id,
            title=goal.title,
            objective=goal.objective,
            status=goal.status.value,
            agents_requiring_vision=list(goal.agents_requiring_vision),
        ),
        criteria=[
            CriterionPart(id=c.id, text=c.text, met=c.met, evidence_ids=list(c.evidence_ids))
            for c in goal.criteria
        ],
        todos=[_todo(t, now) for t in state.todos.values()],
        gates=[_gate(g) for g in state.gates.values()],
        monitors=[_monitor(m, now) for m in state.monitors.values()],
        evidence=[_evidence(e, now) for e in state.evidence.values()],
        obligations=[
            ObligationPart(
                id=o.id,
                trigger=o.trigger.value,
                subject=o.subject,
                detail=o.detail,
                raised_at=o.raised_at,
            )
            for o in state.open_obligations()
        ],
        blockers=[
            BlockerPart(kind=b.kind.value, subject=b.subject, text=b.text) for b in audit.blockers
        ],
        terminal=audit.terminal,
        omitted=_omissions(state, ours, now),
    )
    private = [origin.project_root, *origin.private_paths, *(s.workspace for s in ours)]
    check_clean(packet.model_dump(mode="json"), private)
    return packet


def _todo(todo: Todo, now: datetime) -> TodoPart:
    completion = todo.completion
    return TodoPart(
        id=todo.id,
        title=todo.title,
        status=todo.status.value,
        depends_on=list(todo.depends_on),
        required_evidence=list(todo.required_evidence),
        successor_required=todo.successor_required,
        successor_of=todo.successor_of,
        successors=list(todo.successors),
        blocked_reason=todo.blocked_reason,
        superseded_reason=todo.superseded_reason,
        claim_dropped=_claimed(todo, now),
        completed_at=completion.at if completion is not None else None,
        completed_with=list(completion.evidence_ids) if completion is not None else [],
    )


def _claimed(todo: Todo, now: datetime) -> bool:
    return todo.status is TodoStatus.CLAIMED or (todo.claim is not None and todo.claim.is_live(now))


def _gate(gate: Gate) -> GatePart:
    resolution = gate.resolution
    return GatePart(
        id=gate.id,
        title=gate.title,
        blocking=gate.blocking,
        scope=list(gate.scope),
        status=gate.status.value,
        decision=resolution.decision if resolution else None,
        decided_by=resolution.by if resolution else None,
        decided_at=resolution.at if resolution else None,
        payload=dict(resolution.payload) if resolution else {},
    )


def _monitor(monitor: Monitor, now: datetime) -> MonitorPart:
    last = monitor.last_readback
    return MonitorPart(
        id=monitor.id,
        target=monitor.target,
        cadence_seconds=monitor.cadence_seconds,
        stall_limit=monitor.stall_limit,
        required=monitor.required,
        freshness_seconds=monitor.freshness_seconds,
        next_due=monitor.next_due,
        due=not monitor.retired and monitor.next_due <= now,
        last_readback_at=last.at if last else None,
        last_value=last.value if last else None,
        no_change_streak=monitor.no_change_streak,
        retired=monitor.retired,
        retired_reason=monitor.retired_reason,
    )


def _evidence(evidence: Evidence, now: datetime) -> EvidencePart:
    return EvidencePart(
        id=evidence.id,
        key=evidence.key,
        command=evidence.command,
        revision=evidence.revision,
        exit_code=evidence.exit_code,
        output_digest=evidence.output_digest,
        recorded_at=evidence.recorded_at,
        freshness_seconds=evidence.freshness_seconds,
        fresh=evidence.passed and evidence.is_fresh(now),
    )


def _omissions(state: GoalState, sessions: list[SessionState], now: datetime) -> list[Omission]:
    goal_id = state.goal.id
    find = (
        f"`turnkeeper session list --json` in the original project (the session of goal "
        f"{goal_id} created at {{at}}), then"
    )
    omitted = [
        Omission(
            what="the original project's location and its local paths",
            subject=goal_id,
            how="not carried: paths are only meaningful on the machine that made the packet",
        ),
        Omission(
            what="the output of every evidence command (only its sha256 digest is carried)",
            subject=goal_id,
            how="turnkeeper keeps only the digest; run the command again at the revision "
            "named in the reference (`turnkeeper evidence record GOAL --key KEY -- CMD`)",
        ),
        Omission(
            what="goal notes and the goal's event history",
            subject=goal_id,
            how=f"`turnkeeper goal show {goal_id} --json` in the original project",
        ),
    ]
    for todo in state.todos.values():
        if _claimed(todo, now):
            omitted.append(
                Omission(
                    what="a claim on this todo (claims are leases local to one project)",
                    subject=todo.id,
                    how="dropped: the todo is open to whoever adopts the packet; "
                    f"`turnkeeper todo show {todo.id} --json` in the original project",
                )
            )
    for number, session in enumerate(sessions, start=1):
        at = session.created_at.isoformat()
        subject = f"session #{number} of goal {goal_id} ({session.host_kind} host, created {at})"
        where = find.format(at=at)
        if session.host_session_handle is not None:
            omitted.append(
                Omission(
                    what="host session handle",
                    subject=subject,
                    how=f"{where} `turnkeeper session show ID`",
                )
            )
        omitted += [
            Omission(
                what="session id, workspace and host configuration (may hold credentials "
                "and local paths)",
                subject=subject,
                how=f"{where} `turnkeeper session show ID --json`",
            ),
            Omission(
                what="transcript: the host's events, messages and turn receipts",
                subject=subject,
                how=f"{where} `turnkeeper logs ID` and `turnkeeper turn list ID`",
            ),
        ]
    return omitted
