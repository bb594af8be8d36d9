"""What the kernel would decide now: a turn's calls replayed on the goal as it started.

A tool answers with the kernel's decision on the goal as it stands, so the agent can
correct itself in the same turn; the write-back still decides for real when the turn
ends. The replay follows the write-back's order (runtime/turn/writeback.py): every
evidence call first, as a ``RecordEvidence`` with the exit code the server observed
(no revision: the write-back reads it when it runs the command again), then every
proposal in call order, each decided with :func:`~turnkeeper.kernel.decide_goal` and
folded with :func:`~turnkeeper.kernel.evolve_goal` (a refused one is skipped, as the
write-back skips it), then the turn's todo completed under the turn's claim with every
evidence id of the turn. Nothing here writes: it is all pure functions of the goal, the
calls and ``now``.

Evidence ids here are provisional (``ev-<turn>-<k>``, ``k`` counting the turn's evidence
calls): the write-back numbers the host's own evidence first, which the server cannot
see. Nothing the agent is told depends on them: a criterion is met by an evidence key.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain, islice

from turnkeeper.errors import FailedPrecondition, TurnkeeperError
from turnkeeper.kernel import GoalState, decide_goal, dependency_met, evolve_goal
from turnkeeper.kernel.audit import missing_vision_checkpoints
from turnkeeper.kernel.model import GateStatus, Todo, TodoStatus
from turnkeeper.kernel.proposals import (
    AddTodo,
    CompleteTodo,
    Fence,
    GoalProposal,
    OpenGate,
    RecordEvidence,
    RecordNoFollowUp,
    RecordVisionCheckpoint,
    SatisfyCriterion,
    UpdateAcceptance,
    checked_input,
)
from turnkeeper.tools.calls import (
    AddTodoCall,
    RecordEvidenceCall,
    RequestEffectCall,
    TodoDoneCall,
    ToolCall,
    evidence_id,
    proposal_of,
)
from turnkeeper.tools.channel import ChannelTurn

# Todos the goal view lists; the rest are counted.
VIEW_LISTED = 30


@dataclass(frozen=True)
class Verdict:
    """The kernel's decision on one call: None is accept, else its refusal."""

    refusal: TurnkeeperError | None = None
    # What an accepted call adds to the goal, in a few words ("todo `t9`").
    made: str = ""

    @property
    def accepted(self) -> bool:
        return self.refusal is None


@dataclass
class Replay:
    """The goal with a turn's calls applied, and the kernel's verdict on each call."""

    state: GoalState
    # Aligned with the calls replayed.
    verdicts: list[Verdict] = field(default_factory=list)
    # This turn's evidence by provisional id, and the latest id for each key.
    evidence: dict[str, RecordEvidenceCall] = field(default_factory=dict)
    latest: dict[str, str] = field(default_factory=dict)
    # Completing the turn's todo now (None: the turn has no todo).
    completion: Verdict | None = None
    # The state with the todo completed too, when the turn said it is done and the
    # kernel would accept it.
    final: GoalState | None = None


def _decide(state: GoalState, proposal: GoalProposal, now: datetime) -> GoalState:
    for event in decide_goal(state, proposal, now):
        state = evolve_goal(state, event)
    return state


def completion_proposal(turn: ChannelTurn, state: GoalState, ids: list[str]) -> CompleteTodo:
    """What the write-back proposes for ``todo_done``: the todo under the turn's claim."""
    assert turn.todo_id is not None
    epoch = turn.claim_epoch
    if epoch is None:
        todo = state.todos.get(turn.todo_id)
        claim = todo.claim if todo is not None else None
        epoch = claim.epoch if claim is not None and claim.owner == turn.claim_owner else 0
    with checked_input():
        return CompleteTodo(
            todo_id=turn.todo_id, fence=Fence(owner=turn.claim_owner, epoch=epoch), evidence_ids=ids
        )


def replay(turn: ChannelTurn, goal: GoalState, calls: Sequence[ToolCall], now: datetime) -> Replay:
    """Decide ``calls`` on ``goal`` in the write-back's order (see the module docstring).

    A value the kernel's limits refuse raises ``INVALID_ARGUMENT`` (the server checks a
    call this way before it journals it, so journaled calls never do)."""
    out = Replay(state=goal)
    verdicts: dict[int, Verdict] = {}
    k = 0
    for n, call in enumerate(calls):  # 1: the evidence
        if not isinstance(call, RecordEvidenceCall):
            continue
        eid = evidence_id(turn.turn_id, k)
        k += 1
        with checked_input():
            record = RecordEvidence(
                evidence_id=eid,
                command=call.command,
                key=call.key,
                exit_code=call.exit_code,
                output_digest=call.output_digest,
                output_tail=call.output_tail,
                recorded_at=call.ran_at,
                freshness_seconds=call.freshness_seconds,
            )
        verdicts[n] = _apply(out, record, now, f"evidence `{call.evidence_key}` recorded")
        if verdicts[n].accepted:
            out.evidence[eid] = call
            out.latest[call.evidence_key] = eid
    for n, call in enumerate(calls):  # 2: the proposals
        if isinstance(call, RecordEvidenceCall | TodoDoneCall | RequestEffectCall):
            continue
        proposal = proposal_of(call, out.latest.get)
        verdicts[n] = _apply(out, proposal, now, _made(proposal))
    if turn.todo_id is not None:  # 3: the todo, as todo_done would complete it
        complete = completion_proposal(turn, out.state, list(out.evidence))
        try:
            done = _decide(out.state, complete, now)
        except TurnkeeperError as error:
            out.completion = Verdict(refusal=error)
        else:
            out.completion = Verdict(made=f"todo `{turn.todo_id}` done")
            if any(isinstance(c, TodoDoneCall) for c in calls):
                out.final = done
    for n, call in enumerate(calls):
        if isinstance(call, TodoDoneCall):
            verdicts[n] = out.completion or Verdict(refusal=_no_todo(turn.turn_id))
        elif isinstance(call, RequestEffectCall):
            # Effects are the effect planner's, after the write-back: the kernel has no say.
            verdicts[n] = Verdict(made=f"an effect through `{call.provider}`")
    out.verdicts = [verdicts[n] for n in range(len(calls))]
    return out


def _no_todo(turn_id: str) -> TurnkeeperError:
    return FailedPrecondition(
        f"turn {turn_id} has no todo: there is nothing for todo_done to complete",
        reason="no_todo",
    )


def _apply(out: Replay, proposal: GoalProposal, now: datetime, made: str) -> Verdict:
    try:
        out.state = _decide(out.state, proposal, now)
    except TurnkeeperError as error:
        # ALREADY_EXISTS included: the write-back takes it for its own earlier attempt,
        # applied before a crash; to the agent it is a refusal, what it asked for exists.
        return Verdict(refusal=error)
    return Verdict(made=made)


def _made(proposal: GoalProposal) -> str:
    """What an accepted proposal adds, in a few words."""
    match proposal:
        case AddTodo():
            return f"todo `{proposal.todo.todo_id}` added"
        case OpenGate():
            return f"gate `{proposal.gate_id}` opened"
        case SatisfyCriterion():
            return f"criterion `{proposal.criterion_id}` met"
        case UpdateAcceptance():
            return "acceptance updated"
        case RecordNoFollowUp():
            return "no follow-up recorded"
        case RecordVisionCheckpoint():
            return f"vision checkpoint of `{proposal.agent}` recorded"
    return proposal.kind


# --- how a refusal reads ---------------------------------------------------------------


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def describe_refusal(error: TurnkeeperError, result: Replay, *, output: bool = True) -> str:
    """The kernel's refusal as the agent should read it: the reason code first, then
    what to do about it, with a failing check's exit code and (``output``) its output's
    last lines where it helps."""
    details = error.details
    eid = details.get("evidence_id")
    call = result.evidence.get(eid) if isinstance(eid, str) else None
    key = details.get("key")
    if error.reason == "evidence_failed" and call is not None:
        text = f"required evidence `{call.evidence_key}` failed (exit {call.exit_code})"
        if call.timed_out:
            text += ", timed out"
        if call.output_tail and output:
            text += "; last output:\n" + _indent(call.output_tail)
        return f"{error.reason} — {text}"
    if error.reason == "evidence_stale":
        what = f"evidence `{key}`" if isinstance(key, str) else "the evidence"
        return f"{error.reason} — {what} is too old to count: run it again with record_evidence"
    if error.reason == "evidence_missing":
        if isinstance(key, str):
            return (
                f"{error.reason} — no evidence with key `{key}` in this turn: call "
                f"record_evidence(command=..., key={key!r}) first"
            )
        return f"{error.reason} — {error.message}: record evidence first, then name its key"
    return f"{error.reason} — {error.message}"


def answer(verdict: Verdict, result: Replay) -> str:
    """The dry run's sentence for a journaled call."""
    if verdict.refusal is None:
        made = f" ({verdict.made})" if verdict.made else ""
        return (
            f"journaled; the kernel would accept it now{made}; it is decided for real when "
            "the turn ends"
        )
    return (
        "journaled; the kernel would refuse it now: "
        + describe_refusal(verdict.refusal, result)
        + "\nIt is decided for real when the turn ends; fix the cause and call again, or "
        "it is refused then too."
    )


# --- the goal as it stands -------------------------------------------------------------


def _listed_todos(turn: ChannelTurn, state: GoalState, calls: Sequence[ToolCall]) -> Iterator[Todo]:
    """The todos the view lists, most wanted first: this turn's todo, those this turn's
    calls add, the other unfinished todos in goal order, then the finished ones, the
    latest first.

    Lazy and without a sort, so listing ``VIEW_LISTED`` of them costs the same on a goal
    of 10,000 todos as of 10: the unfinished ones come from the goal's tally, and the
    walk over every todo for the finished ones stops once the list is full.
    """
    first = [turn.todo_id] if turn.todo_id else []
    first += [c.todo_id for c in calls if isinstance(c, AddTodoCall)]
    unfinished = state.todo_tally().unfinished
    ids = chain(
        first,
        (i for i in unfinished if i not in first),
        (t for t in reversed(state.todos) if t not in unfinished and t not in first),
    )
    seen: set[str] = set()
    for todo_id in ids:
        todo = state.todos.get(todo_id)
        if todo is not None and todo_id not in seen:  # a refused add is not in the goal
            seen.add(todo_id)
            yield todo


def _todo_counts(state: GoalState) -> str:
    counts = state.todo_tally().counts
    return ", ".join(f"{counts[s]} {s.value}" for s in TodoStatus if counts.get(s))


def goal_view(turn: ChannelTurn, result: Replay, calls: Sequence[ToolCall]) -> str:
    """The goal with this turn's calls applied, as compact text for the agent."""
    state = result.final or result.state
    goal = state.goal
    out = [f"Goal {goal.id}: {goal.title} ({goal.status.value})"]
    if goal.objective:
        out.append(goal.objective)
    out.append("Acceptance criteria:")
    out += [f"- [{'x' if c.met else ' '}] {c.id}: {c.text}" for c in goal.criteria] or ["- (none)"]
    todos = list(islice(_listed_todos(turn, state, calls), VIEW_LISTED))
    more = len(state.todos) - len(todos)
    out.append(f"Todos ({_todo_counts(state)}):" if state.todos else "Todos:")
    for todo in todos:
        line = f"- {todo.id}: {todo.title} — {todo.status.value}"
        if todo.id == turn.todo_id:
            line += " (this turn's todo)"
        if todo.depends_on:
            deps = ", ".join(
                f"{d} ({'met' if dependency_met(state, d) else 'pending'})" for d in todo.depends_on
            )
            line += f"; depends on {deps}"
        if todo.required_evidence and todo.status not in (TodoStatus.DONE, TodoStatus.SUPERSEDED):
            needs = ", ".join(_need(key, result) for key in todo.required_evidence)
            line += f"; needs evidence {needs}"
        if todo.successor_of:
            line += f"; successor of {todo.successor_of}"
        out.append(line)
    out += [f"- … and {more} more, not listed"] if more else []
    if not state.todos:
        out.append("- (none)")
    gates = [g for g in state.gates.values() if g.status is GateStatus.OPEN]
    if gates:
        out.append("Open gates (waiting for a person):")
        for gate in gates:
            scope = ", ".join(gate.scope) if gate.scope else "the whole goal"
            kind = "blocking" if gate.blocking else "advisory"
            out.append(f"- {gate.id}: {gate.title} — {kind}, on {scope}")
    obligations = state.open_obligations()
    if obligations:
        out.append("Open replan obligations (each needs a delta or a no-follow-up):")
        out += [f"- {o.id} ({o.trigger.value}, {o.subject}): {o.detail}" for o in obligations]
    due = missing_vision_checkpoints(state)
    if due:
        out.append("Vision checkpoint due for: " + ", ".join(due))
    out.append(_turn_line(turn, result, calls))
    return "\n".join(out) + "\n"


def _need(key: str, result: Replay) -> str:
    eid = result.latest.get(key)
    call = result.evidence.get(eid) if eid else None
    if call is None:
        return f"`{key}` (none in this turn)"
    state = "passed" if call.exit_code == 0 else f"failed, exit {call.exit_code}"
    return f"`{key}` ({state} in this turn)"


def _turn_line(turn: ChannelTurn, result: Replay, calls: Sequence[ToolCall]) -> str:
    counts: dict[str, int] = {}
    for call in calls:
        counts[call.tool] = counts.get(call.tool, 0) + 1
    made = ", ".join(f"{tool} x{n}" if n > 1 else tool for tool, n in counts.items())
    line = f"This turn ({turn.turn_id}): " + (f"calls so far: {made}." if made else "no calls yet.")
    if result.completion is not None:
        if result.completion.refusal is None:
            line += " todo_done now: the kernel would accept it."
        else:
            line += " todo_done now: the kernel would refuse it: " + describe_refusal(
                result.completion.refusal, result
            )
    return line
