"""The real control loop (in process) with the scripted host (a real subprocess) and a real
HTTP service: a turn's effects are applied once each, an indeterminate one blocks the
goal behind a gate until an operator resolves it, and nothing is ever applied twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.effects.service import CountingService
from tests.effects.support import (
    GOAL_ID,
    TODO_ID,
    TODO_TITLE,
    git_workspace,
    host_config,
    host_runs,
    of_type,
    session_events,
)
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, ResolveGate, TodoSpec
from turnkeeper.kernel.session import derive_effect_key
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.project import init_project
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.effects import effect_gate_id
from turnkeeper.store import open_store
from turnkeeper.store.sql import SqlEventStore


class Project:
    def __init__(self, root: Path, effects: list[Any], providers: dict[str, Any]) -> None:
        project, _ = init_project(root)
        self.store: SqlEventStore = open_store(project.database_url)
        self.state_dir = root / "host-state"
        goals = GoalService(self.store)
        goals.create(CreateGoal(goal_id=GOAL_ID, title="effects"))
        goals.submit(GOAL_ID, AddTodo(todo=TodoSpec(todo_id=TODO_ID, title=TODO_TITLE)))
        config = host_config(self.state_dir, effects, providers)
        workspace = git_workspace(root / "repo")
        self.sid = (
            SessionService(self.store).create(GOAL_ID, workspace, "scripted", config).session_id
        )

    def run(self) -> dict[str, str]:
        return Controller(self.store, ControllerConfig(max_turns=3)).run([self.sid]).stops

    def events(self, kind: str) -> list[Any]:
        return of_type(session_events(self.store, self.sid), kind)

    def effect_key(self, n: int) -> str:
        (accepted,) = self.events("turn.accepted")
        return derive_effect_key(accepted.envelope.idempotency_key, n)


@pytest.fixture
def make_project(tmp_path: Path) -> Iterator[Any]:
    made: list[Project] = []

    def make(effects: list[Any], providers: dict[str, Any]) -> Project:
        made.append(Project(tmp_path, effects, providers))
        return made[-1]

    yield make
    for project in made:
        project.store.close()


def test_a_turn_applies_each_effect_once(service: CountingService, make_project: Any) -> None:
    effects = [
        {"provider": "orders", "request": {"body": {"order": 1}}},
        {"provider": "orders", "request": {"body": {"order": 2}}},
        {"provider": "unlisted", "request": {}},
    ]
    project = make_project(effects, {"orders": {"kind": "http", **service.provider_config()}})
    assert project.run() == {project.sid: "goal_terminal"}
    keys = [project.effect_key(0), project.effect_key(1)]
    assert dict(service.applied) == {keys[0]: 1, keys[1]: 1}
    assert service.bodies == {keys[0]: {"order": 1}, keys[1]: {"order": 2}}
    resolved = project.events("turn.effect_resolved")
    assert [(e.effect_id, e.outcome, e.apply_called) for e in resolved] == [
        ("e0", "applied", True),
        ("e1", "applied", True),
    ]
    assert resolved[0].readback.value == {"key": keys[0], "body": {"order": 1}, "count": 1}
    (rejected,) = project.events("turn.effect_rejected")
    assert (rejected.effect_id, rejected.reason) == ("e2", "provider_not_authorised")
    state = SessionService(project.store).load(project.sid)
    assert (state.counters.effects_applied, state.counters.effects_rejected) == (2, 1)
    assert GoalService(project.store).load(GOAL_ID).is_closed
    assert host_runs(project.state_dir) == 1
    # Order of the transaction: written back, then effects, then completed.
    kinds = [e.type for e in session_events(project.store, project.sid)]
    assert kinds.index("turn.written_back") < kinds.index("turn.effect_intended")
    assert kinds.index("turn.effect_resolved") < kinds.index("turn.completed")
    assert project.store.verify(kernel_folder()).ok


def test_unknown_readback_blocks_the_goal_until_an_operator_decides(
    service: CountingService, make_project: Any
) -> None:
    effects = [{"provider": "http", "request": {"body": {"x": 1}}}]
    project = make_project(effects, {"http": service.provider_config(readback="blind")})
    assert project.run() == {project.sid: "gate_blocked"}
    assert service.total() == 0  # a readback that cannot tell never leads to an apply
    (resolved,) = project.events("turn.effect_resolved")
    assert (resolved.outcome, resolved.readback.detail) == ("indeterminate", "HTTP 503")
    (completed,) = project.events("turn.completed")
    gate_id = effect_gate_id(completed.turn_id, "e0")
    goals = GoalService(project.store)
    gate = goals.load(GOAL_ID).gates[gate_id]
    assert gate.blocking and project.effect_key(0) in gate.title
    audit = goals.audit(GOAL_ID)
    assert not audit.terminal and audit.unresolved_blocking_gates == 1
    # Running again changes nothing: the effect is not retried, the goal stays blocked.
    assert project.run() == {project.sid: "gate_blocked"}
    assert service.total() == 0 and len(project.events("turn.effect_resolved")) == 1
    # The operator checked the key at the service and decides; the goal can now close.
    goals.submit(GOAL_ID, ResolveGate(gate_id=gate_id, by="operator", decision="not needed"))
    assert project.run() == {project.sid: "goal_terminal"}
    assert goals.load(GOAL_ID).is_closed
    assert host_runs(project.state_dir) == 1


def test_an_apply_readback_cannot_confirm_is_never_repeated(
    service: CountingService, make_project: Any
) -> None:
    effects = [{"provider": "http", "request": {"body": {"x": 1}}}]
    project = make_project(effects, {"http": service.provider_config(apply="drop")})
    assert project.run() == {project.sid: "gate_blocked"}
    key = project.effect_key(0)
    assert service.count(key) == 1
    (resolved,) = project.events("turn.effect_resolved")
    assert resolved.outcome == "indeterminate" and resolved.apply_called
    assert project.run() == {project.sid: "gate_blocked"}
    assert service.count(key) == 1
