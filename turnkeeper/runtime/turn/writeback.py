"""Step 5 of the turn transaction: validate a turn's result and write it back to the goal.

The agent's word is not proof: an executor's self-report cannot alone prove
completion. Evidence the agent names is run again here, in the
workspace, bound to the revision it ran on; the goal kernel then accepts or
rejects each proposal. Every write carries an id derived from the turn, so doing
the write-back twice — after a crash — applies it once.

Two halves: :func:`prepare_write_back` does the outside work (running the
checks) and :func:`decide_write_back` is pure — it decides every proposal in
order on the goal's state, so the caller can commit the goal's events together
with the session's ``turn.written_back`` in one atomic append.

The result is an :class:`~turnkeeper.runtime.turn.agent_result.AgentResult`, validated
at the receipt (docs/agents.md is its contract for agent authors). Its parts are
decided in this order, so a later part may name what an earlier one records:

1. each ``evidence`` item, re-run here, recorded as ``ev-<turn id>-<n>`` (``n`` its
   position in the list, from 0);
2. each of ``proposals``, in order (a ``satisfy_criterion`` may name the evidence
   of step 1);
3. ``todo_done``: complete the turn's todo with the evidence of step 1.

A part the kernel refuses is a rejection recorded with the turn, never a failed
write-back; the next turn sees the state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from turnkeeper.errors import AlreadyExists, TurnkeeperError
from turnkeeper.kernel import GoalEvent, GoalProposal, GoalState, decide_goal, evolve_goal
from turnkeeper.kernel.limits import TITLE_MAX_CHARS
from turnkeeper.kernel.progress import made_progress
from turnkeeper.kernel.proposals import CompleteTodo, Fence, RecordEvidence, checked_input
from turnkeeper.kernel.session import ProposalDecision, TurnEnvelope
from turnkeeper.runtime.turn.agent_result import AgentResult, MalformedResult
from turnkeeper.runtime.workspaces.tested_content import tested_tree
from turnkeeper.runtime.workspaces.workspace import git_revision

# The one formula for a result's evidence ids (the agent's tools resolve them with it).
from turnkeeper.tools.calls import evidence_id
from turnkeeper.tools.checks import run_check


def claim_owner(session_id: str) -> str:
    """The owner name a session's todo claims carry."""
    return f"session:{session_id}"


@dataclass
class WriteBackResult:
    accepted: list[ProposalDecision] = field(default_factory=list)
    rejected: list[ProposalDecision] = field(default_factory=list)
    # Whether the goal events written back are progress (kernel/progress.py): the
    # session's progress guard counts the turns that are not.
    progress: bool = False


@dataclass
class PreparedWriteBack:
    """The proposals a result makes, in order, with the outside work already done."""

    proposals: list[tuple[str, GoalProposal]] = field(default_factory=list)
    evidence_ids: list[str] = field(default_factory=list)
    todo_done: bool = False
    rejected: list[ProposalDecision] = field(default_factory=list)


def needs_outside_work(result: AgentResult) -> bool:
    """Whether writing back runs anything outside the database (checks or effects).

    When it does, the receipt must be durable first, so a crash during that
    work keeps the host's result; when it does not, receipt, write-back and
    completion can be one atomic commit.
    """
    return bool(result.evidence) or bool(result.effects)


def prepare_write_back(
    goal: Callable[[], GoalState], envelope: TurnEnvelope, workspace: Path, result: AgentResult
) -> PreparedWriteBack:
    """Run the result's evidence checks and list its proposals in order.

    ``goal`` is read only when the result names evidence (its recorded evidence says
    which checks a write-back redone after a crash need not run again): the proposals
    themselves are decided later, in the commit, on the state its append lands on, so
    a result without evidence costs no goal read here.
    """
    prepared = PreparedWriteBack(todo_done=result.todo_done)
    recorded = goal().evidence if result.evidence else {}
    for n, item in enumerate(result.evidence):
        eid = evidence_id(envelope.turn_id, n)
        pid = f"{envelope.turn_id}:evidence:{n}"
        prepared.evidence_ids.append(eid)
        if eid in recorded:  # written back before a crash: the check does not run again
            continue
        # The same run as the agent's record_evidence tool makes (tools/checks.py): what
        # the tool answered in the turn is what the write-back finds, unless the work
        # changed since.
        # The content is read before the command runs: what it tested.
        tree = tested_tree(workspace)
        run = run_check(item.command, workspace)
        try:
            # The result model holds the item to the kernel's limits; the revision is
            # read here, so a refusal is still this item's, never a failed write-back.
            with checked_input():
                evidence = RecordEvidence(
                    evidence_id=eid,
                    command=item.command,
                    key=item.key,
                    revision=git_revision(workspace),
                    tree=tree,
                    exit_code=run.exit_code,
                    output_digest=run.output_digest,
                    output_tail=run.output_tail,
                    freshness_seconds=item.freshness_seconds,
                )
        except TurnkeeperError as error:
            prepared.evidence_ids.remove(eid)
            prepared.rejected.append(ProposalDecision(proposal_id=pid, reason=error.reason))
            continue
        prepared.proposals.append((pid, evidence))
    for n, proposal in enumerate(result.proposals):
        prepared.proposals.append((f"{envelope.turn_id}:proposal:{n}", proposal))
    return prepared


def refused_write_back(envelope: TurnEnvelope, error: MalformedResult) -> PreparedWriteBack:
    """What a durable receipt whose result the model refuses writes back: nothing but
    the refusal. Only a receipt recorded before results were validated at the receipt
    can hold one; its turn still completes, and the next turn sees the state."""
    decision = ProposalDecision(proposal_id=f"{envelope.turn_id}:result", reason=error.reason)
    return PreparedWriteBack(rejected=[decision])


def decide_write_back(
    goal: GoalState, prepared: PreparedWriteBack, envelope: TurnEnvelope, now: datetime
) -> tuple[list[GoalEvent], WriteBackResult]:
    """Every proposal decided in order on the evolving goal state: events and verdicts."""
    out = WriteBackResult(rejected=list(prepared.rejected))
    events: list[GoalEvent] = []
    state = goal
    for pid, proposal in prepared.proposals:
        state = _decide_one(state, pid, proposal, now, events, out)
    if prepared.todo_done and envelope.todo_id is not None:
        pid = f"{envelope.turn_id}:complete"
        todo = state.todos.get(envelope.todo_id)
        owner = claim_owner(envelope.session_id)
        if todo is not None and todo.completion is not None and todo.completion.owner == owner:
            out.accepted.append(ProposalDecision(proposal_id=pid, reason="already done"))
        else:
            epoch = todo.claim.epoch if todo is not None and todo.claim is not None else 0
            complete = CompleteTodo(
                todo_id=envelope.todo_id,
                fence=Fence(owner=owner, epoch=epoch),
                evidence_ids=prepared.evidence_ids,
            )
            _decide_one(state, pid, complete, now, events, out)
    out.progress = made_progress(events, before=goal) or _already_progressed(out)
    return events, out


def _already_progressed(out: WriteBackResult) -> bool:
    """A write-back redone after a crash finds its proposals applied: the progress the
    first attempt made is no less progress for having been made before."""
    return any(d.reason in ("already applied", "already done") for d in out.accepted)


def _decide_one(
    state: GoalState,
    pid: str,
    proposal: GoalProposal,
    now: datetime,
    events: list[GoalEvent],
    out: WriteBackResult,
) -> GoalState:
    try:
        decided = decide_goal(state, proposal, now)
    except AlreadyExists:
        out.accepted.append(ProposalDecision(proposal_id=pid, reason="already applied"))
        return state
    except TurnkeeperError as error:
        # The kernel said no: recorded, not retried. The next turn's brief names it.
        message = error.message[:TITLE_MAX_CHARS]
        out.rejected.append(ProposalDecision(proposal_id=pid, reason=error.reason, message=message))
        return state
    for event in decided:
        state = evolve_goal(state, event)
    events.extend(decided)
    out.accepted.append(ProposalDecision(proposal_id=pid))
    return state
