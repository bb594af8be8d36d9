"""``project.goals``, ``.todos``, ``.gates`` and ``.evidence``: the goal kernel's surface.

Each method builds the kernel proposal the matching ``turnkeeper`` command builds and
submits it through the same :class:`~turnkeeper.runtime.services.goals.GoalService`, so a
refusal is the same typed error (``turnkeeper.errors``) with the same reason. Every
method returns the kernel's own model of what it touched.
"""

from __future__ import annotations

import builtins
import getpass
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path

from pydantic import JsonValue

from turnkeeper.errors import InvalidArgument
from turnkeeper.json_types import JsonMapping
from turnkeeper.kernel import GoalProposal, GoalState, TerminalAudit, parse_proposal
from turnkeeper.kernel.model import Claim, Evidence, Gate, NoFollowUpReason, Todo
from turnkeeper.kernel.proposals import (
    AddTodo,
    ClaimTodo,
    CloseGoal,
    CompleteTodo,
    CreateGoal,
    CriterionSpec,
    Fence,
    OpenGate,
    RecordNoFollowUp,
    ReleaseClaim,
    ResolveGate,
    SatisfyCriterion,
    TodoSpec,
    checked_input,
)
from turnkeeper.runtime.services.goals import GoalService, Submitted, new_id, utc_now
from turnkeeper.runtime.turn.evidence import record_command_evidence
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import EventRecord

# The open store of the project, or FAILED_PRECONDITION once it is closed: every call
# asks for it, so a closed project is never reopened behind its owner's back.
StoreOf = Callable[[], EventStore]

# The longest claim a caller may take (as ``turnkeeper todo claim --lease``).
CLAIM_LEASE_MAX_SECONDS = 30 * 24 * 3600


def default_owner() -> str:
    """Who claims work from this process: ``TURNKEEPER_OWNER``, else ``user@host`` (the
    command line's default too, so a claim taken here can be finished from a shell)."""
    return os.environ.get("TURNKEEPER_OWNER") or f"{getpass.getuser()}@{socket.gethostname()}"


def _check_lease(seconds: float) -> None:
    if not 0 < seconds <= CLAIM_LEASE_MAX_SECONDS:
        raise InvalidArgument(
            f"lease_seconds must be more than 0 and at most {CLAIM_LEASE_MAX_SECONDS}, "
            f"not {seconds}",
            reason="out_of_range",
            details={"option": "lease_seconds", "value": seconds},
        )


class Goals:
    """Goals: objectives with acceptance criteria, closed only by the terminal audit."""

    def __init__(self, store: StoreOf) -> None:
        self._store = store

    @property
    def _goals(self) -> GoalService:
        return GoalService(self._store())

    def add(
        self,
        title: str,
        *,
        criteria: Sequence[str] = (),
        objective: str = "",
        goal_id: str | None = None,
        vision_agents: Sequence[str] = (),
    ) -> GoalState:
        """Create a goal; its criteria get the ids ``c1``, ``c2``, ... in order."""
        gid = new_id("goal") if goal_id is None else goal_id
        with checked_input():
            proposal = CreateGoal(
                goal_id=gid,
                title=title,
                objective=objective,
                criteria=[CriterionSpec(id=f"c{i + 1}", text=t) for i, t in enumerate(criteria)],
                agents_requiring_vision=list(vision_agents),
            )
        return self._goals.create(proposal).state

    def show(self, goal_id: str) -> GoalState:
        """The goal with its todos, gates, monitors, evidence and obligations."""
        return self._goals.load(goal_id)

    def list(self) -> list[GoalState]:
        """Every goal."""
        return self._goals.list_goals()

    def history(self, goal_id: str, limit: int | None = None) -> builtins.list[EventRecord]:
        """The goal's events, oldest first (at most ``limit``)."""
        return self._goals.history(goal_id, limit=limit)

    def audit(self, goal_id: str) -> TerminalAudit:
        """The terminal audit now: every counter and every named blocker."""
        return self._goals.audit(goal_id)

    def criterion_met(
        self,
        goal_id: str,
        criterion_id: str,
        evidence_ids: Sequence[str],
        *,
        revision: str | None = None,
    ) -> GoalState:
        """Mark an acceptance criterion met by passing, fresh evidence (from ``revision``
        when given)."""
        with checked_input():
            proposal = SatisfyCriterion(
                criterion_id=criterion_id,
                evidence_ids=list(evidence_ids),
                current_revision=revision,
            )
        return self._goals.submit(goal_id, proposal).state

    def no_follow_up(
        self,
        goal_id: str,
        summary: str,
        discharges: Sequence[str],
        *,
        reason: NoFollowUpReason = NoFollowUpReason.NO_ACTION_NEEDED,
    ) -> GoalState:
        """Record a structured "nothing more to do" that discharges the named replan
        obligations (``state.open_obligations()``); at least one must be named."""
        with checked_input():
            proposal = RecordNoFollowUp(reason=reason, summary=summary, discharges=list(discharges))
        return self._goals.submit(goal_id, proposal).state

    def close(
        self,
        goal_id: str,
        summary: str,
        *,
        reason: NoFollowUpReason = NoFollowUpReason.ACCEPTANCE_MET,
    ) -> GoalState:
        """Close the goal; refused (``FAILED_PRECONDITION``, naming each blocker) unless
        the terminal audit passes."""
        with checked_input():
            proposal = CloseGoal(reason=reason, summary=summary)
        return self._goals.submit(goal_id, proposal).state

    def propose(self, goal_id: str, proposal: GoalProposal | JsonMapping | str) -> Submitted:
        """Any kernel proposal (a model, a dict or JSON text): the full surface."""
        if isinstance(proposal, str | Mapping):
            proposal = parse_proposal(proposal if isinstance(proposal, str) else dict(proposal))
        return self._goals.submit(goal_id, proposal)


class Todos:
    """Todos: units of work with dependencies, leased claims fenced by epoch, evidence."""

    def __init__(self, store: StoreOf) -> None:
        self._store = store

    @property
    def _goals(self) -> GoalService:
        return GoalService(self._store())

    def add(
        self,
        goal_id: str,
        title: str,
        *,
        depends_on: Sequence[str] = (),
        requires_evidence: Sequence[str] = (),
        successor_required: bool = False,
        successor_of: str | None = None,
        todo_id: str | None = None,
    ) -> Todo:
        """Add a todo; finishing it needs passing evidence for each required key."""
        tid = new_id("todo") if todo_id is None else todo_id
        with checked_input():
            spec = TodoSpec(
                todo_id=tid,
                title=title,
                depends_on=list(depends_on),
                required_evidence=list(requires_evidence),
                successor_required=successor_required,
            )
            proposal = AddTodo(todo=spec, successor_of=successor_of)
        return self._goals.submit(goal_id, proposal).state.todos[tid]

    def show(self, todo_id: str) -> Todo:
        """One todo, wherever it lives."""
        return self._goals.load(self._goals.goal_of(todo_id, "todo")).todos[todo_id]

    def list(self, goal_id: str) -> list[Todo]:
        """The goal's todos in the order they were added."""
        return list(self._goals.load(goal_id).todos.values())

    def claim(self, todo_id: str, *, owner: str | None = None, lease_seconds: float = 900) -> Claim:
        """Claim a todo under a lease; later writes give the claim's ``epoch``."""
        _check_lease(lease_seconds)
        who = owner or default_owner()
        gid = self._goals.goal_of(todo_id, "todo")
        until = utc_now() + timedelta(seconds=lease_seconds)
        with checked_input():
            proposal = ClaimTodo(todo_id=todo_id, owner=who, lease_expires_at=until)
        claim = self._goals.submit(gid, proposal).state.todos[todo_id].claim
        assert claim is not None  # the kernel accepted the claim: the todo holds it
        return claim

    def release(self, todo_id: str, *, epoch: int, owner: str | None = None) -> Todo:
        """Give a claimed todo back."""
        with checked_input():
            proposal = ReleaseClaim(
                todo_id=todo_id, fence=Fence(owner=owner or default_owner(), epoch=epoch)
            )
        gid = self._goals.goal_of(todo_id, "todo")
        return self._goals.submit(gid, proposal).state.todos[todo_id]

    def done(
        self,
        todo_id: str,
        *,
        epoch: int,
        evidence: Sequence[str] = (),
        owner: str | None = None,
        revision: str | None = None,
    ) -> Todo:
        """Finish a claimed todo; its required evidence must pass and be fresh."""
        with checked_input():
            proposal = CompleteTodo(
                todo_id=todo_id,
                fence=Fence(owner=owner or default_owner(), epoch=epoch),
                evidence_ids=list(evidence),
                current_revision=revision,
            )
        gid = self._goals.goal_of(todo_id, "todo")
        return self._goals.submit(gid, proposal).state.todos[todo_id]


class Gates:
    """Gates: decisions that block work (the whole goal or named todos) until resolved."""

    def __init__(self, store: StoreOf) -> None:
        self._store = store

    @property
    def _goals(self) -> GoalService:
        return GoalService(self._store())

    def open(
        self, goal_id: str, title: str, *, blocking: bool = True, scope: Sequence[str] = ()
    ) -> Gate:
        """Open a gate; ``scope`` names the todos it blocks (empty: the whole goal)."""
        gid = new_id("gate")
        with checked_input():
            proposal = OpenGate(gate_id=gid, title=title, blocking=blocking, scope=list(scope))
        return self._goals.submit(goal_id, proposal).state.gates[gid]

    def resolve(
        self,
        gate_id: str,
        decision: str,
        *,
        by: str,
        payload: Mapping[str, JsonValue] | None = None,
    ) -> Gate:
        """Resolve an open gate with a decision (``approved``, ``rejected``, ...)."""
        with checked_input():
            proposal = ResolveGate(
                gate_id=gate_id, by=by, decision=decision, payload=dict(payload or {})
            )
        goal_id = self._goals.goal_of(gate_id, "gate")
        return self._goals.submit(goal_id, proposal).state.gates[gate_id]

    def list(self, goal_id: str) -> list[Gate]:
        """The goal's gates, open and resolved."""
        return list(self._goals.load(goal_id).gates.values())


class EvidenceRecords:
    """Evidence: command results bound to the revision they ran on and when."""

    def __init__(self, store: StoreOf, root: Path) -> None:
        self._store = store
        self._root = root

    @property
    def _goals(self) -> GoalService:
        return GoalService(self._store())

    def record(
        self,
        goal_id: str,
        command: Sequence[str],
        *,
        key: str | None = None,
        freshness_seconds: int = 3600,
        timeout_seconds: float = 1800,
        cwd: Path | None = None,
    ) -> Evidence:
        """Run ``command`` (an argv list) in ``cwd`` (default: the project root) and
        record its exit code, output digest, git revision and time."""
        if isinstance(command, str):  # a str is a Sequence[str] too: one char per arg
            raise InvalidArgument(
                "give the command as a list of arguments, e.g. ['pytest', '-q']",
                reason="command_not_a_list",
            )
        done = record_command_evidence(
            self._goals,
            goal_id,
            list(command),
            cwd=cwd or self._root,
            key=key,
            freshness_seconds=freshness_seconds,
            timeout_seconds=timeout_seconds,
        )
        return done.evidence

    def list(self, goal_id: str) -> list[Evidence]:
        """The goal's evidence records in the order they were recorded."""
        return list(self._goals.load(goal_id).evidence.values())
