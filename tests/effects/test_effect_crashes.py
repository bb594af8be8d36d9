"""SIGKILL of the real control plane at each effect boundary.

``turnkeeper run`` runs as its own process against a project set up through the CLI,
with ``TURNKEEPER_CRASH_AT`` naming an effect crash point: it SIGKILLs itself there.
The turn's result asks for two effects through the ``http`` provider to a counting
service on 127.0.0.1. After a plain ``run`` restarts it, the service saw each key
exactly once, the host ran once, and the goal closed.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.effects.service import CountingService
from tests.effects.support import (
    GOAL_ID,
    cli_project,
    host_config,
    host_runs,
    of_type,
    session_events,
)
from turnkeeper.kernel.session import derive_effect_key
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.effects import effect_gate_id
from turnkeeper.store import open_store

TWO_EFFECTS = [
    {"provider": "http", "request": {"body": {"n": 1}}},
    {"provider": "http", "request": {"body": {"n": 2}}},
]


class Oracle:
    """The durable state a finished (or killed) control plane left, read back."""

    def __init__(self, root: Path, sid: str) -> None:
        self.store = open_store(f"sqlite:///{root / '.turnkeeper' / 'turnkeeper.db'}")
        self.sid = sid

    def events(self, kind: str) -> list[Any]:
        return of_type(session_events(self.store, self.sid), kind)

    def keys(self) -> list[str]:
        (accepted,) = self.events("turn.accepted")
        return [derive_effect_key(accepted.envelope.idempotency_key, n) for n in range(2)]

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.close()


def _killed_at(project: Any, point: str) -> None:
    killed = project.run("run", crash_at=point)
    assert killed.returncode == -signal.SIGKILL, (killed.stdout, killed.stderr)
    assert f"[crash point {point.partition('@')[0]}#" in killed.stderr


@pytest.mark.parametrize(
    ("point", "e0_apply_called"),
    [
        ("effect.intended", True),  # intent durable, nothing sent: read back 404, apply now
        ("effect.applied", False),  # sent, outcome lost: read back 200, recorded applied
        ("effect.resolved", True),  # outcome durable: e0 is left alone, e1 runs
        ("effect.applied@2", True),  # the second effect's apply, its outcome lost
        ("effect.resolved@2", True),  # both outcomes durable, the turn not completed
    ],
)
def test_sigkill_at_an_effect_boundary_applies_each_key_once(
    tmp_path: Path, service: CountingService, point: str, e0_apply_called: bool
) -> None:
    state_dir = tmp_path / "host-state"
    config = host_config(state_dir, TWO_EFFECTS, {"http": service.provider_config()})
    project, sid = cli_project(tmp_path, config)
    _killed_at(project, point)
    with Oracle(tmp_path, sid) as oracle:
        assert oracle.events("turn.completed") == []
        applied_before_restart = service.total()

    summary = project.ok("run")
    assert summary["stops"] == {sid: "goal_terminal"}

    with Oracle(tmp_path, sid) as oracle:
        keys = oracle.keys()
        assert dict(service.applied) == {keys[0]: 1, keys[1]: 1}
        assert applied_before_restart <= 2
        resolved = {e.effect_id: e for e in oracle.events("turn.effect_resolved")}
        assert sorted(resolved) == ["e0", "e1"]
        assert {e.outcome for e in resolved.values()} == {"applied"}
        assert resolved["e0"].apply_called is e0_apply_called
        assert len(oracle.events("turn.effect_intended")) == 2
        assert len(oracle.events("turn.completed")) == 1
        report = SessionService(oracle.store).load(sid).latest_recovery_report
        assert report is not None
        kinds = [a.kind for a in report.actions]
        assert ("effects_resolved" in kinds) is (point != "effect.resolved@2")
        assert GoalService(oracle.store).load(GOAL_ID).is_closed
        assert oracle.store.verify(kernel_folder()).ok
    assert host_runs(state_dir) == 1


def test_sigkill_after_an_apply_readback_cannot_confirm_gates_instead_of_retrying(
    tmp_path: Path, service: CountingService
) -> None:
    effects = TWO_EFFECTS[:1]
    state_dir = tmp_path / "host-state"
    config = host_config(state_dir, effects, {"http": service.provider_config(readback="flaky")})
    project, sid = cli_project(tmp_path, config)
    _killed_at(project, "effect.applied")
    assert service.total() == 1

    summary = project.ok("run", expect=13)
    assert summary["stops"] == {sid: "gate_blocked"}
    assert summary["outcomes"] == {sid: "blocked"}
    with Oracle(tmp_path, sid) as oracle:
        key = oracle.keys()[0]
        (resolved,) = oracle.events("turn.effect_resolved")
        assert (resolved.outcome, resolved.apply_called) == ("indeterminate", False)
        (completed,) = oracle.events("turn.completed")
        gate_id = effect_gate_id(completed.turn_id, "e0")
        audit = GoalService(oracle.store).audit(GOAL_ID)
        assert audit.unresolved_blocking_gates == 1 and not audit.terminal
    assert dict(service.applied) == {key: 1}

    assert project.ok("run", expect=13)["stops"] == {sid: "gate_blocked"}  # never retried
    project.ok("gate", "resolve", gate_id, "--decision", "applied", "--by", "operator")
    assert project.ok("run")["stops"] == {sid: "goal_terminal"}
    assert dict(service.applied) == {key: 1}
    assert host_runs(state_dir) == 1
