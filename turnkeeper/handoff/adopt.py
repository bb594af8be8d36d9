"""A handoff packet turned back into a goal: the kernel proposals that recreate it.

What is recreated, under the packet's own ids: the goal with its criteria, every
todo with its lineage (dependencies, successor links, required evidence, blocked
and superseded states), the gates with their scope and decisions, the monitors.

What is not taken on trust: evidence. Each reference is recorded as an evidence
record of the goal (same id, key, command, revision, exit code, digest and run
time) whose freshness window has already passed, so the kernel sees it as stale:
it cannot complete a todo or meet a criterion, ``evidence list`` shows it stale,
and the audit never counts it. What stood on it in the original project — a done
todo, a met criterion — is therefore open again here, to be verified afresh (a
note on the goal says which, and by which evidence ids). Monitors start due: a
readback made elsewhere is a value to observe again, not a fact here. Claims
were local to the original project and are gone.

Every proposal is decided first on a state folded in memory (the kernel is pure),
so a packet the kernel would refuse writes nothing; only then are they submitted
through :class:`~turnkeeper.runtime.services.goals.GoalService`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from turnkeeper.errors import AlreadyExists, FailedPrecondition, InvalidArgument, TurnkeeperError
from turnkeeper.handoff.packet import HandoffPacket, TodoPart
from turnkeeper.kernel import GoalProposal, GoalState
from turnkeeper.kernel.decide import decide_and_evolve
from turnkeeper.kernel.limits import TEXT_MAX_CHARS
from turnkeeper.kernel.proposals import (
    AddMonitor,
    AddTodo,
    BlockTodo,
    CreateGoal,
    CriterionSpec,
    Note,
    OpenGate,
    RecordEvidence,
    ResolveGate,
    RetireMonitor,
    SupersedeTodo,
    TodoSpec,
)
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.store.base import EventStore

# The freshness window of a handed-over evidence record: the smallest the kernel
# accepts. Recorded with its original run time, it is stale as soon as that time is
# more than this far behind the adopting store's clock (adopt waits for that).
HANDED_OVER_FRESHNESS_SECONDS = 1
NOTE_AUTHOR = "turnkeeper adopt"


@dataclass
class Adopted:
    goal_id: str
    todos: list[str] = field(default_factory=list)
    # Done in the original project, open here until verified again.
    reverify_todos: list[str] = field(default_factory=list)
    reverify_criteria: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    gates: list[str] = field(default_factory=list)
    monitors: list[str] = field(default_factory=list)
    head_seq: int = 0


def adopt_packet(
    store: EventStore, packet: HandoffPacket, sleep: Callable[[float], None] = time.sleep
) -> Adopted:
    """Recreate ``packet``'s goal in ``store``. ``ALREADY_EXISTS`` when the goal or any
    of its ids is already there; ``packet_malformed`` for a packet whose parts do not
    fit together; nothing is written in either case."""
    check_references(packet)
    _check_ids_free(store, packet)
    proposals = list(proposals_for(packet))
    now = store.now()
    _check_times(packet, now)
    _dry_run(proposals, now)
    _wait_until_stale(store, packet, sleep)
    goals = GoalService(store)
    head = 0
    for proposal in proposals:
        head = goals.submit(packet.goal.id, proposal).head_seq
    return Adopted(
        goal_id=packet.goal.id,
        todos=[t.id for t in packet.todos],
        reverify_todos=[t.id for t in packet.todos if t.status == "done"],
        reverify_criteria=[c.id for c in packet.criteria if c.met],
        evidence=[e.id for e in packet.evidence],
        gates=[g.id for g in packet.gates],
        monitors=[m.id for m in packet.monitors],
        head_seq=head,
    )


def proposals_for(packet: HandoffPacket) -> Iterable[GoalProposal]:
    """The proposals that recreate the packet's goal, in an order the kernel accepts:
    todos in creation order (a dependency or predecessor is always older), then
    evidence, gates and monitors, then the states todos ended in, then the note."""
    try:
        yield from _proposals(packet)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidArgument(
            f"the packet holds a value turnkeeper refuses ({where}: {first['msg']})",
            reason="packet_malformed",
            details={"field": where},
        ) from None


def _proposals(packet: HandoffPacket) -> Iterable[GoalProposal]:
    goal = packet.goal
    yield CreateGoal(
        goal_id=goal.id,
        title=goal.title,
        objective=goal.objective,
        criteria=[CriterionSpec(id=c.id, text=c.text) for c in packet.criteria],
        agents_requiring_vision=goal.agents_requiring_vision,
    )
    for todo in packet.todos:
        yield AddTodo(
            todo=TodoSpec(
                todo_id=todo.id,
                title=todo.title,
                depends_on=todo.depends_on,
                required_evidence=todo.required_evidence,
                successor_required=todo.successor_required,
            ),
            successor_of=todo.successor_of,
        )
    for ev in packet.evidence:
        yield RecordEvidence(
            evidence_id=ev.id,
            key=ev.key,
            command=ev.command,
            revision=ev.revision,
            exit_code=ev.exit_code,
            output_digest=ev.output_digest,
            recorded_at=ev.recorded_at.astimezone(UTC),
            freshness_seconds=HANDED_OVER_FRESHNESS_SECONDS,
        )
    for gate in packet.gates:
        yield OpenGate(gate_id=gate.id, title=gate.title, blocking=gate.blocking, scope=gate.scope)
        if gate.status == "resolved":
            yield ResolveGate(
                gate_id=gate.id,
                by=gate.decided_by or "unknown",
                decision=gate.decision or "resolved",
                payload=gate.payload,
            )
    for monitor in packet.monitors:
        yield AddMonitor(
            monitor_id=monitor.id,
            target=monitor.target,
            cadence_seconds=monitor.cadence_seconds,
            stall_limit=monitor.stall_limit,
            required=monitor.required,
            freshness_seconds=monitor.freshness_seconds,
        )
        if monitor.retired:
            yield RetireMonitor(monitor_id=monitor.id, reason=monitor.retired_reason or "retired")
    for todo in packet.todos:
        if todo.status == "blocked":
            yield BlockTodo(todo_id=todo.id, reason=todo.blocked_reason or "blocked")
        elif todo.status == "superseded":
            yield SupersedeTodo(todo_id=todo.id, reason=todo.superseded_reason or "superseded")
    yield Note(author=NOTE_AUTHOR, text=adoption_note(packet))


def adoption_note(packet: HandoffPacket) -> str:
    """What the adopting side must know and cannot see in the state alone."""
    lines = [
        f"Adopted from a handoff packet made at {packet.made_at.isoformat()}"
        + (f" at revision {packet.source_revision}" if packet.source_revision else "")
        + ". Handed-over evidence is recorded stale: run each check again before it counts.",
    ]
    for todo in packet.todos:
        if todo.status == "done":
            used = ", ".join(todo.completed_with) or "no evidence"
            lines.append(f"todo {todo.id} was done there ({used}): verify it again here.")
    for criterion in packet.criteria:
        if criterion.met:
            used = ", ".join(criterion.evidence_ids)
            lines.append(f"criterion {criterion.id} was met there ({used}): meet it again here.")
    for todo in packet.todos:
        if todo.claim_dropped:
            lines.append(f"todo {todo.id} was claimed there; the claim stayed behind.")
    for obligation in packet.obligations:
        lines.append(
            f"open replan obligation there: {obligation.trigger} on {obligation.subject} "
            f"({obligation.detail})"
        )
    text = "\n".join(lines)
    if len(text) > TEXT_MAX_CHARS:
        text = text[: TEXT_MAX_CHARS - 40] + "\n... (the packet lists the rest)"
    return text


def check_references(packet: HandoffPacket) -> None:
    """Every id the packet's parts name is one of its own, and no id is used twice."""
    todos = {t.id for t in packet.todos}
    evidence = {e.id for e in packet.evidence}
    for name, ids in (
        ("criteria", [c.id for c in packet.criteria]),
        ("todos", [t.id for t in packet.todos]),
        ("gates", [g.id for g in packet.gates]),
        ("monitors", [m.id for m in packet.monitors]),
        ("evidence", [e.id for e in packet.evidence]),
    ):
        if len(set(ids)) != len(ids):
            raise _malformed(f"the packet's {name} repeat an id", name)
    seen: set[str] = set()
    for i, todo in enumerate(packet.todos):
        _refs(f"todos[{i}].depends_on", todo.depends_on, seen)
        if todo.successor_of is not None:
            _refs(f"todos[{i}].successor_of", [todo.successor_of], seen)
        _refs(f"todos[{i}].successors", todo.successors, todos)
        _refs(f"todos[{i}].completed_with", todo.completed_with, evidence)
        _check_status(i, todo)
        seen.add(todo.id)
    for i, gate in enumerate(packet.gates):
        _refs(f"gates[{i}].scope", gate.scope, todos)
        if gate.status not in ("open", "resolved"):
            raise _malformed(f"gate status {gate.status!r} is unknown", f"gates[{i}].status")
    for i, criterion in enumerate(packet.criteria):
        _refs(f"criteria[{i}].evidence_ids", criterion.evidence_ids, evidence)


def _check_status(index: int, todo: TodoPart) -> None:
    if todo.status not in ("open", "claimed", "done", "blocked", "superseded"):
        raise _malformed(f"todo status {todo.status!r} is unknown", f"todos[{index}].status")


def _refs(where: str, ids: list[str], known: set[str]) -> None:
    # Todos must name older todos only: that is how the kernel made them.
    for ref in ids:
        if ref not in known:
            raise _malformed(f"{where} names {ref!r}, which the packet does not hold", where)


def _malformed(message: str, where: str) -> InvalidArgument:
    return InvalidArgument(message, reason="packet_malformed", details={"field": where})


def _check_ids_free(store: EventStore, packet: HandoffPacket) -> None:
    """Ids are project-wide (the store's entity index): each must still be free."""
    if store.lookup(packet.goal.id) is not None:
        raise AlreadyExists(
            f"goal {packet.goal.id!r} already exists in this project",
            reason="goal_exists",
            details={"goal_id": packet.goal.id},
        )
    parts = (
        ("todo", [t.id for t in packet.todos]),
        ("gate", [g.id for g in packet.gates]),
        ("monitor", [m.id for m in packet.monitors]),
        ("evidence", [e.id for e in packet.evidence]),
    )
    for kind, ids in parts:
        for entity_id in ids:
            if store.lookup(entity_id) is not None:
                raise AlreadyExists(
                    f"{kind} id {entity_id!r} is already taken in this project",
                    reason="packet_id_taken",
                    details={"kind": kind, "id": entity_id},
                )


def _check_times(packet: HandoffPacket, now: datetime) -> None:
    """A run time ahead of this project's clock means the clocks disagree: importing
    it would make a record fresh for longer than it ran ago (the kernel refuses it)."""
    for i, ev in enumerate(packet.evidence):
        if ev.recorded_at > now:
            raise FailedPrecondition(
                f"evidence {ev.id!r} ran at {ev.recorded_at.isoformat()}, after this "
                f"project's clock ({now.isoformat()}): the two machines' clocks disagree",
                reason="packet_from_future",
                details={"field": f"evidence[{i}].recorded_at"},
            )


def _dry_run(proposals: list[GoalProposal], now: datetime) -> None:
    state: GoalState | None = None
    for proposal in proposals:
        try:
            _, state = decide_and_evolve(state, proposal, now)
        except TurnkeeperError as refused:
            raise InvalidArgument(
                f"the packet does not make a valid goal: {proposal.kind} was refused "
                f"({refused.reason}: {refused.message})",
                reason="packet_malformed",
                details={"proposal": proposal.kind, "refused": refused.reason},
            ) from None


def _wait_until_stale(
    store: EventStore, packet: HandoffPacket, sleep: Callable[[float], None]
) -> None:
    # Evidence run less than the window ago would still be fresh when recorded: wait
    # out the rest of it (at most the window itself), never shorten the run time.
    if not packet.evidence:
        return
    newest = max(ev.recorded_at for ev in packet.evidence)
    left = HANDED_OVER_FRESHNESS_SECONDS - (store.now() - newest).total_seconds()
    if left >= 0:
        sleep(left + 0.05)


__all__ = ["Adopted", "adopt_packet", "adoption_note", "proposals_for"]
