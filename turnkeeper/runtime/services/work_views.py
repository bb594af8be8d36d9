"""Read views of one goal's work: what ``todo show``, ``todo list``, ``gate list`` and
``evidence list`` print, as plain data (models inside are JSON-ready).

Pure functions of a folded :class:`GoalState` and ``now``: what a view says about
time (a live claim, fresh evidence) is judged at the ``now`` it is given, the same
way the kernel judges it when a write depends on it.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import TypedDict

from turnkeeper.json_types import JsonDict
from turnkeeper.kernel import dependency_met
from turnkeeper.kernel.model import Evidence, GoalState, Todo


# The views' shapes. They are dicts, not models, because ``--json`` prints them as they
# are (the models inside dumped as JSON), key for key.
class TodoBrief(TypedDict):
    """Another todo as a todo's view names it."""

    id: str
    title: str
    status: str


class Dependency(TodoBrief):
    met: bool  # as the kernel judges it for a claim


class RequiredEvidence(TypedDict):
    """One key a todo's completion needs, with its latest run (all None: never run)."""

    key: str
    latest: str | None
    passed: bool | None
    fresh: bool | None


class GateBrief(TypedDict):
    id: str
    title: str


class TodoDetail(TypedDict):
    """``todo show``."""

    id: str
    goal_id: str
    todo: Todo
    claim: JsonDict | None  # the claim as JSON, with whether it is live now
    dependencies: list[Dependency]
    required_evidence: list[RequiredEvidence]
    evidence: list[Evidence]  # what its completion attached
    successor_of: TodoBrief | None
    successors: list[TodoBrief]
    blocking_gates: list[GateBrief]


class EvidenceRow(TypedDict):
    """A row of ``evidence list``."""

    id: str
    evidence: Evidence
    passed: bool
    fresh: bool
    latest: bool


def todos(state: GoalState, statuses: Collection[str] = ()) -> list[Todo]:
    """The goal's todos in the order they were added, only ``statuses`` when given."""
    return [t for t in state.todos.values() if not statuses or t.status.value in statuses]


def _brief(todo: Todo) -> TodoBrief:
    return {"id": todo.id, "title": todo.title, "status": todo.status.value}


def _dependency(state: GoalState, todo_id: str) -> Dependency:
    todo = state.todos[todo_id]
    met = dependency_met(state, todo_id)
    return {"id": todo.id, "title": todo.title, "status": todo.status.value, "met": met}


def todo_detail(state: GoalState, todo_id: str, now: datetime) -> TodoDetail:
    """Everything about one todo a person deciding what to do next needs."""
    todo = state.todos[todo_id]
    claim: JsonDict | None = None
    if todo.claim is not None:
        claim = todo.claim.model_dump(mode="json") | {"live": todo.claim.is_live(now)}
    dependencies = [_dependency(state, d) for d in todo.depends_on if d in state.todos]
    required: list[RequiredEvidence] = []
    for key in todo.required_evidence:
        latest = state.latest_evidence(key)
        required.append(
            {
                "key": key,
                "latest": latest.id if latest else None,
                "passed": latest.passed if latest else None,
                "fresh": latest.is_fresh(now) if latest else None,
            }
        )
    attached = todo.completion.evidence_ids if todo.completion else []
    return {
        "id": todo.id,
        "goal_id": state.goal.id,
        "todo": todo,
        "claim": claim,
        "dependencies": dependencies,
        "required_evidence": required,
        "evidence": [state.evidence[e] for e in attached if e in state.evidence],
        "successor_of": (
            _brief(state.todos[todo.successor_of])
            if todo.successor_of in state.todos and todo.successor_of is not None
            else None
        ),
        "successors": [_brief(state.todos[s]) for s in todo.successors if s in state.todos],
        "blocking_gates": [
            {"id": g.id, "title": g.title} for g in state.gates.values() if g.blocks(todo.id)
        ],
    }


def evidence_row(state: GoalState, evidence: Evidence, now: datetime) -> EvidenceRow:
    """One evidence record with what the kernel would say of it now: fresh or stale, and
    whether it is its key's latest run (only the latest counts for the audit)."""
    latest = state.latest_evidence(evidence.key)
    return {
        "id": evidence.id,
        "evidence": evidence,
        "passed": evidence.passed,
        "fresh": evidence.is_fresh(now),
        "latest": latest is not None and latest.id == evidence.id,
    }


def evidence_rows(state: GoalState, now: datetime, key: str = "") -> list[EvidenceRow]:
    """The goal's evidence in recording order, only ``key``'s when given."""
    return [evidence_row(state, e, now) for e in state.evidence.values() if not key or e.key == key]
