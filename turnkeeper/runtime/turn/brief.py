"""Building a turn's brief (turnkeeper/brief.py) from the durable state, at the turn's start.

Replayed from the log: the goal, its acceptance, the todo and its lineage, the
gates, the replan obligations, the evidence records and what the previous turn was
refused. Probed again now: the workspace's revision and its uncommitted changes (an
old receipt proves the past, not the present). After a lost turn, the brief lists
what that turn had started (its journaled commands and tool calls), so the agent
reconciles before it redoes anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from turnkeeper.brief import (
    MAX_LISTED,
    CriterionBrief,
    EvidenceNeed,
    FailedCheck,
    GateBrief,
    GoalBrief,
    LostTurn,
    ObligationBrief,
    PreviousAttempt,
    Refusal,
    StopConditions,
    TodoBrief,
    TodoRef,
    TurnBrief,
    WorkCounts,
    WorkspaceProbe,
    clip,
    clip_tail,
    render,
)
from turnkeeper.errors import TurnkeeperError
from turnkeeper.hosts.base import TOOLS_SERVER_NAME
from turnkeeper.json_types import JsonValue
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.audit import missing_vision_checkpoints
from turnkeeper.kernel.limits import TEXT_MAX_CHARS
from turnkeeper.kernel.model import RUNNABLE_TODO_STATUSES, Evidence, GateStatus, Todo, TodoStatus
from turnkeeper.kernel.session import InteractionContract, NextTurn, SessionState
from turnkeeper.runtime.services.turn_listing import JournaledEvent, TurnInfo
from turnkeeper.runtime.workspaces.gitcmd import git
from turnkeeper.runtime.workspaces.workspace import git_marker, git_revision
from turnkeeper.tools.calls import evidence_id
from turnkeeper.vocabulary import TurnKind

# What must be probed again rather than trusted from the log (seed 001), told after a
# turn that did not complete and on every continuation.
REPROBE = (
    "the worktree (git status and HEAD)",
    "CI or pull-request state",
    "external systems you changed",
    "the time and any monitor that is due",
)
# A rendered brief is recorded as the turn's instructions; a brief is a few kilobytes,
# its lists bounded, so this is a backstop the kernel's text limit makes a hard one.
INSTRUCTIONS_MAX_CHARS = TEXT_MAX_CHARS
# Host events of a lost turn that say what it started.
_ACTION_KINDS = frozenset({"command.started", "command.completed", "tool.started", "message"})


@dataclass(frozen=True)
class AgentLimits:
    """The bounds a session runs under, as its agent is told them (None: not known)."""

    max_attempts: int | None = None
    max_turns_without_progress: int | None = None
    timeout_seconds: float | None = None
    silence_seconds: float | None = None


def build_brief(
    *,
    turn_id: str,
    spec: NextTurn,
    contract: InteractionContract,
    session: SessionState,
    goal: GoalState,
    now: datetime,
    previous: TurnInfo | None,
    workspace: Path,
    limits: AgentLimits,
    tools: Sequence[str] = (),
    unapplied_calls: Sequence[str] = (),
) -> TurnBrief:
    """The brief of turn ``turn_id``, planned as ``spec`` under ``contract``.
    ``previous``: the session's last ended turn as its records tell it (None: no
    earlier turn, or out of reach);
    ``unapplied_calls``: the tool calls that turn journaled, when it failed or was lost
    (so none was applied)."""
    todo = goal.todos.get(spec.todo_id) if spec.todo_id else None
    commands = _evidence_commands(session.host_config, todo)
    lost = _lost_turn(previous, unapplied_calls)
    return TurnBrief(
        turn_id=turn_id,
        session_id=session.session_id,
        kind=spec.kind,
        attempt=spec.attempt,
        goal=_goal(goal),
        todo=_todo(goal, todo, commands, now) if todo is not None else None,
        work=work_counts(goal, spec.todo_id),
        **_evidence(goal, set(todo.required_evidence) if todo is not None else set(), now),
        previous=_previous(goal, previous, spec, unapplied_calls),
        **_gates(goal),
        **_replan(goal),
        vision_due=missing_vision_checkpoints(goal)[:MAX_LISTED],
        lost_turn=lost,
        note=clip(spec.reconcile_note, 2000) if spec.reconcile_note else None,
        reprobe=list(REPROBE) if _reprobe(spec, previous) else [],
        workspace=probe(workspace, now),
        stop=StopConditions(
            stop_condition=contract.stop_condition,
            attempt=spec.attempt,
            max_attempts=limits.max_attempts,
            turns_without_progress=session.turns_without_progress,
            max_turns_without_progress=limits.max_turns_without_progress,
            timeout_seconds=limits.timeout_seconds,
            silence_seconds=limits.silence_seconds,
        ),
        tools=list(tools),
    )


def _goal(state: GoalState) -> GoalBrief:
    goal = state.goal
    criteria = [CriterionBrief(id=c.id, text=clip(c.text), met=c.met) for c in goal.criteria]
    return GoalBrief(
        id=goal.id,
        title=clip(goal.title),
        objective=clip(goal.objective, 2000),
        criteria=criteria[:MAX_LISTED],
        criteria_more=max(0, len(criteria) - MAX_LISTED),
    )


def _ref(todo: Todo) -> TodoRef:
    return TodoRef(id=todo.id, title=clip(todo.title), status=todo.status.value)


def _todo(state: GoalState, todo: Todo, commands: Mapping[str, str], now: datetime) -> TodoBrief:
    deps = [state.todos[d] for d in todo.depends_on if d in state.todos]
    return TodoBrief(
        id=todo.id,
        title=clip(todo.title),
        status=todo.status.value,
        depends_on=[_ref(d) for d in deps[:MAX_LISTED]],
        required_evidence=[
            _need(state.latest_evidence(key), key, commands.get(key), now)
            for key in todo.required_evidence[:MAX_LISTED]
        ],
        successor_required=todo.successor_required,
        successor_of=todo.successor_of,
    )


def _need(record: Evidence | None, key: str, command: str | None, now: datetime) -> EvidenceNeed:
    if record is None:
        return EvidenceNeed(key=key, status="missing", command=command)
    status = "failed" if not record.passed else ("passed" if record.is_fresh(now) else "stale")
    return EvidenceNeed(
        key=key,
        status=status,
        command=command or record.command,
        exit_code=record.exit_code,
        recorded_at=record.recorded_at,
        revision=record.revision,
        output_tail=clip_tail(record.output_tail) if status == "failed" else "",
    )


def _evidence(
    state: GoalState, shown: set[str], now: datetime
) -> dict[str, list[EvidenceNeed] | int]:
    """The latest record of each key but those the todo's part already shows (from the
    goal's evidence index: a brief costs the same at any number of records)."""
    latest = [state.latest_evidence(key) for key in state.evidence_keys() if key not in shown]
    newest = sorted((e for e in latest if e is not None), key=lambda e: e.recorded_at, reverse=True)
    # Without output tails: the todo's own failing evidence quotes its tail once.
    needs = [
        _need(e, e.key, None, now).model_copy(update={"output_tail": ""})
        for e in newest[:MAX_LISTED]
    ]
    return {"evidence": needs, "evidence_more": max(0, len(newest) - MAX_LISTED)}


def _evidence_commands(config: Mapping[str, JsonValue], todo: Todo | None) -> dict[str, str]:
    """The commands the session's host config names for the todo's evidence keys (an
    agent CLI host's ``evidence`` map: by todo id, by title, or ``*``)."""
    table = config.get("evidence")
    if todo is None or not isinstance(table, dict):
        return {}
    for name in (todo.id, todo.title, "*"):
        specs = table.get(name)
        if isinstance(specs, list):
            return {
                str(spec["key"]): str(spec["command"])
                for spec in specs
                if isinstance(spec, dict) and "key" in spec and "command" in spec
            }
    return {}


def work_counts(state: GoalState, current: str | None) -> WorkCounts:
    """The brief's ``work``: the todos other than ``current`` by status, and the first
    unfinished ones; from the goal's tally, so a brief costs the same at any number of
    todos."""
    tally = state.todo_tally()
    counts = dict(tally.counts)
    this = state.todos.get(current) if current is not None else None
    if this is not None:
        counts[this.status] -= 1
    listed: list[TodoRef] = []
    for todo_id in tally.unfinished:  # goal order; blocked ones skipped, so bounded by them
        if len(listed) == MAX_LISTED:
            break
        todo = state.todos[todo_id]
        if todo_id != current and todo.status in RUNNABLE_TODO_STATUSES:
            listed.append(_ref(todo))
    runnable = sum(counts.get(status, 0) for status in RUNNABLE_TODO_STATUSES)
    return WorkCounts(
        open=counts.get(TodoStatus.OPEN, 0),
        claimed=counts.get(TodoStatus.CLAIMED, 0),
        done=counts.get(TodoStatus.DONE, 0),
        blocked=counts.get(TodoStatus.BLOCKED, 0),
        superseded=counts.get(TodoStatus.SUPERSEDED, 0),
        listed=listed,
        listed_more=max(0, runnable - len(listed)),
    )


def _gates(state: GoalState) -> dict[str, list[GateBrief] | int]:
    """Open gates first, then the resolved ones, newest first (their decisions matter)."""
    ordered = sorted(
        state.gates.values(),
        key=lambda g: (g.status is not GateStatus.OPEN, -g.opened_at.timestamp()),
    )
    gates = [
        GateBrief(
            id=g.id,
            title=clip(g.title),
            blocking=g.blocking,
            scope=g.scope[:MAX_LISTED],
            status=g.status.value,
            decision=clip(g.resolution.decision) if g.resolution else None,
            decided_by=clip(g.resolution.by) if g.resolution else None,
        )
        for g in ordered
    ]
    return {"gates": gates[:MAX_LISTED], "gates_more": max(0, len(gates) - MAX_LISTED)}


def _replan(state: GoalState) -> dict[str, list[ObligationBrief] | int]:
    open_ = state.open_obligations()
    listed = [
        ObligationBrief(id=o.id, trigger=o.trigger.value, subject=o.subject, detail=clip(o.detail))
        for o in open_[:MAX_LISTED]
    ]
    return {"replan": listed, "replan_more": max(0, len(open_) - MAX_LISTED)}


def _recorded_by(state: GoalState, turn: TurnInfo) -> list[Evidence]:
    """The evidence ``turn``'s write-back recorded, in its order: looked up by id, not
    found by a walk over every record of the goal. The write-back records its ``n``-th
    item as ``evidence_id(turn, n)`` in the commit that records its decisions, one for
    each item it decided, so the ids to look up are bounded by the decisions (and by
    any record found past them)."""
    if turn.written_back is None:
        return []  # no write-back committed: nothing of the turn's is in the goal
    decided = len(turn.written_back.accepted) + len(turn.written_back.rejected)
    found: list[Evidence] = []
    n = 0
    while n < decided or evidence_id(turn.turn_id, n) in state.evidence:
        record = state.evidence.get(evidence_id(turn.turn_id, n))
        if record is not None:
            found.append(record)
        n += 1
    return found


def _what(proposal_id: str, turn_id: str) -> str:
    """A refused part of a turn named as a person reads it (``turn-x:proposal:2`` ->
    ``proposal 2``, ``turn-x:complete`` -> ``completing the todo``)."""
    part = proposal_id.removeprefix(f"{turn_id}:")
    if part == "complete":
        return "completing the todo"
    if part == "result":
        return "the turn's result"
    return part.replace(":", " ")


def _previous(
    state: GoalState, turn: TurnInfo | None, spec: NextTurn, calls: Sequence[str]
) -> PreviousAttempt | None:
    """What refused or failed the previous turn on the same work (None: nothing did)."""
    if turn is None or turn.envelope.todo_id != spec.todo_id:
        return None
    refusals = []
    if turn.written_back is not None:
        refusals = [
            Refusal(
                what=_what(d.proposal_id, turn.turn_id),
                reason=d.reason,
                detail=clip(d.message),
            )
            for d in turn.written_back.rejected[:MAX_LISTED]
        ]
    failed = [
        FailedCheck(
            key=e.key,
            command=clip(e.command),
            exit_code=e.exit_code,
            output_tail=clip_tail(e.output_tail),
        )
        for e in _recorded_by(state, turn)
        if not e.passed
    ]
    host_error = clip(turn.reason, 1000) if turn.outcome == "failed" and turn.reason else None
    if not refusals and not failed and host_error is None:
        return None
    return PreviousAttempt(
        turn_id=turn.turn_id,
        outcome=turn.outcome,
        refusals=refusals,
        failed_checks=failed[:MAX_LISTED],
        host_error=host_error,
        unapplied_calls=list(calls[-MAX_LISTED:]) if host_error is not None else [],
    )


def _lost_turn(turn: TurnInfo | None, calls: Sequence[str]) -> LostTurn | None:
    if turn is None or turn.outcome != "lost":
        return None
    # The tool channel's own record of the turnkeeper calls (with what each observed)
    # stands for the host's events of the same calls.
    actions = [
        _action(e)
        for e in turn.events
        if e.kind in _ACTION_KINDS
        and not (calls and e.kind == "tool.started" and e.data.get("server") == TOOLS_SERVER_NAME)
    ]
    actions += [f"called turnkeeper tool {call}" for call in calls]
    kept = actions[-MAX_LISTED:]
    return LostTurn(
        turn_id=turn.turn_id,
        cause=clip(turn.reason or "lost"),
        actions=kept,
        actions_more=len(actions) - len(kept),
    )


def _action(event: JournaledEvent) -> str:
    data = event.data
    if event.kind == "command.started":
        return clip(f"started command: {data.get('command')}")
    if event.kind == "command.completed":
        return clip(f"command finished (exit {data.get('exit_code')}): {data.get('command')}")
    if event.kind == "tool.started":
        return clip(f"called tool {data.get('tool') or data.get('name')}: {data.get('arguments')}")
    return clip(f"said: {data.get('text')}")


def _reprobe(spec: NextTurn, previous: TurnInfo | None) -> bool:
    if spec.kind in (TurnKind.CONTINUATION, TurnKind.RETRY):
        return True
    return previous is not None and previous.outcome in ("failed", "lost", "abandoned")


def probe(workspace: Path, now: datetime) -> WorkspaceProbe:
    """The workspace's revision and uncommitted changes, read from git now."""
    status = _status_lines(workspace)
    if status is None:
        return WorkspaceProbe(path=str(workspace), probed_at=now)
    lines = [ln for ln in status if ln.strip()]
    return WorkspaceProbe(
        path=str(workspace),
        revision=git_revision(workspace),
        dirty=bool(lines),
        changed=[clip(ln, 200) for ln in lines[:MAX_LISTED]],
        changed_more=max(0, len(lines) - MAX_LISTED),
        probed_at=now,
    )


def _status_lines(workspace: Path) -> list[str] | None:
    """The lines of ``git status --porcelain`` in ``workspace``; None outside a
    repository or when git fails. Read in this process where libgit2 reads them as git
    does (runtime/workspaces/status_lines.py), so a turn starts no git for them; by git
    elsewhere, but not where no ``.git`` is at or above the workspace: that is no
    repository, told by stat alone (the git run here ignores GIT_DIR and GIT_WORK_TREE:
    gitcmd.py drops them)."""
    # Imported here, not with the module: pygit2 takes a tenth of a second to load, and
    # the commands that import the turn driver without running a turn never need it.
    from turnkeeper.runtime.workspaces.status_lines import porcelain_lines

    lines = porcelain_lines(workspace)
    if lines is not None:
        return lines
    if git_marker(workspace.absolute()) is None:
        return None
    try:
        status = git(workspace, "status", "--porcelain", check=False)
    except TurnkeeperError:
        return None
    return status.stdout.splitlines() if status.returncode == 0 else None


def instructions_of(brief: TurnBrief) -> str:
    """The brief's text as a turn's instructions: within what an envelope records."""
    return clip(render(brief), INSTRUCTIONS_MAX_CHARS)
