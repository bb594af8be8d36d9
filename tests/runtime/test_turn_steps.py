"""The turn declared once: runtime/turn/steps.py against everything that restates it.

Each check reads the real thing: the crash points a real turn reaches (a real driver,
kernels, SQLite store and effect provider, each point recorded with the phase the
log holds there), the ``crash_point`` calls in the source, the commit methods, the
leaf's crash point names, the action kinds restart recovery records, the crash
suite's own table, and docs/design.md. A step added, moved or dropped in any one of
them fails here until the declaration says so.
"""

from __future__ import annotations

import ast
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import pytest

from tests.runtime import test_crash_turn_points as crash_suite
from tests.runtime.inprocess_host import InProcessHost
from turnkeeper import crashpoints
from turnkeeper.hosts import TurnRequest
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import NextTurn, TurnPhase, plan_next_turn
from turnkeeper.kernel.session.report import RecoveryActionKind
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn import driver, effects, host_journal, steps, steps_doc
from turnkeeper.runtime.turn.commits import TurnCommits
from turnkeeper.runtime.turn.driver import DriverConfig, TurnDriver
from turnkeeper.runtime.turn.planning import goal_view
from turnkeeper.store import open_store
from turnkeeper.store.base import EventStore

PACKAGE = Path(driver.__file__).parents[2]  # turnkeeper/
REPO = PACKAGE.parent
DESIGN = REPO / "docs" / "design.md"
COMMIT_CLASSES: dict[str, type] = {"TurnCommits": TurnCommits, "SessionService": SessionService}

STEPS = {step.crash_point: step for step in steps.TURN_STEPS}
ROWS = {row.name: row for row in steps.RECOVERY_TABLE}


# --- the declaration itself ------------------------------------------------------------


def test_each_crash_point_and_name_is_declared_once() -> None:
    points = [*steps.turn_points(), *steps.recovery_points()]
    assert len(points) == len(set(points))
    names = [step.name for step in steps.TURN_STEPS]
    assert len(names) == len(set(names))
    assert len(ROWS) == len(steps.RECOVERY_TABLE)


def test_every_step_names_rows_of_the_table_and_every_row_is_reached() -> None:
    named = {name for step in steps.TURN_STEPS for name in step.recovery}
    assert named == set(ROWS)
    for step in steps.TURN_STEPS:
        # What a crash leaves is what each of its rows applies to.
        for name in step.recovery:
            assert step.leaves in ROWS[name].phases, (step.name, name)


def test_the_table_covers_every_phase_and_every_action_kind() -> None:
    phases = {phase for row in steps.RECOVERY_TABLE for phase in row.phases}
    assert phases == {*TurnPhase, None}
    actions = {action for row in steps.RECOVERY_TABLE for action in row.actions}
    assert actions == set(get_args(RecoveryActionKind))


def test_each_commit_is_a_method_and_each_turn_commit_is_declared() -> None:
    named = {commit for step in steps.TURN_STEPS for commit in step.commits}
    for commit in named:
        owner, _, method = commit.partition(".")
        assert callable(getattr(COMMIT_CLASSES[owner], method, None)), commit
    public = {
        f"TurnCommits.{name}"
        for name, value in vars(TurnCommits).items()
        if callable(value) and not name.startswith("_")
    }
    assert public == {c for c in named if c.startswith("TurnCommits.")}
    for step in steps.TURN_STEPS:
        # A step that writes nothing cannot be durable; one that writes names its commit.
        assert bool(step.commits) == (not step.writes.startswith("nothing")), step.name
        assert step.commits or not step.durable, step.name


# --- the names others keep -------------------------------------------------------------


def test_the_crash_point_names_are_the_declared_ones() -> None:
    # crashpoints.py is a leaf and may import nothing: its names are checked, not derived.
    assert steps.turn_points() == crashpoints.TURN_POINTS
    assert steps.recovery_points() == crashpoints.RECOVERY_POINTS
    assert steps.turn_points() + steps.recovery_points() == crashpoints.ALL_POINTS


def _crash_point_calls(path: Path) -> list[str]:
    """The crash point names ``path`` passes to ``crash_point`` as a literal."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "crash_point"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append(node.args[0].value)
    return names


def test_the_source_hits_each_point_where_declared() -> None:
    declared: dict[str, set[str]] = {
        step.crash_point: set(step.hit_in) for step in steps.TURN_STEPS
    } | {step.crash_point: set(step.hit_in) for step in steps.RECOVERY_STEPS}
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted((PACKAGE / "runtime").rglob("*.py")):
        for name in _crash_point_calls(path):
            found[name].add(path.relative_to(PACKAGE).as_posix())
    assert dict(found) == declared


def _action_kinds(path: Path) -> set[str]:
    """The kinds ``path`` records through ``self._action("kind", ...)``."""
    kinds: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "_action"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            kinds.add(str(node.args[0].value))
    return kinds


def _phase_tuples(path: Path) -> list[set[str]]:
    """Each tuple of phases ``path`` tests a turn's phase against (``x.phase in (...)``)."""
    found: list[set[str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Attribute)
            and node.left.attr == "phase"
            and isinstance(node.comparators[0], ast.Tuple)
        ):
            elts = node.comparators[0].elts
            found.append({str(e.value) for e in elts if isinstance(e, ast.Constant)})
    return found


def test_recovery_records_the_declared_actions_on_the_declared_phases() -> None:
    recovery = PACKAGE / steps.RECOVERY
    assert _action_kinds(recovery) == set(get_args(RecoveryActionKind))
    lost = {p.value for row in ("lost_unstarted", "lost_started") for p in _phases(row)}
    assert _phase_tuples(recovery) == [lost]
    # The runner is asked about the turns the reattach row applies to.
    link = PACKAGE / "runtime" / "turn" / "runner_link.py"
    assert _phase_tuples(link) == [{p.value for p in _phases("reattach")}]


def _phases(row: str) -> list[TurnPhase]:
    return [p for p in ROWS[row].phases if p is not None]


def test_the_crash_suite_expects_what_is_declared() -> None:
    # tests/runtime/test_crash_turn_points.py SIGKILLs the real control plane at each
    # point and checks the phase left and the row restart applied.
    for point, phase in crash_suite.PHASE_LEFT.items():
        leaves = STEPS[point].leaves
        assert phase == (leaves.value if leaves is not None else None), point
    lost = {p for p, s in STEPS.items() if {"lost_unstarted", "lost_started"} & set(s.recovery)}
    assert lost == crash_suite.LOST_POINTS


def test_the_design_document_shows_the_declared_tables() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    assert steps_doc.rendered(text) == text, (
        "docs/design.md differs from runtime/turn/steps.py: "
        "python -m turnkeeper.runtime.turn.steps_doc docs/design.md"
    )
    reattach = steps_doc.recovery_table().splitlines()[2]
    assert reattach.startswith("| `reattach` |") and reattach in text


def test_rendering_refuses_a_document_without_its_markers() -> None:
    with pytest.raises(ValueError, match="recovery-table"):
        steps_doc.rendered(steps_doc.markers("turn-steps")[0] + "\n<!-- /turn-steps -->\n")


# --- a real turn ---------------------------------------------------------------------------


@dataclass
class Hit:
    point: str
    phase: TurnPhase | None


@dataclass
class Project:
    store: EventStore
    workspace: Path
    effects_dir: Path

    def session(self, result: dict[str, object]) -> tuple[str, InProcessHost]:
        goals = GoalService(self.store)
        goals.create(CreateGoal(goal_id="g", title="a goal"))
        goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t1", title="todo 1")))
        marker = f"{self.effects_dir}/applied-{{key}}"
        provider = {"kind": "command", "apply": f"touch {marker}", "readback": f"test -e {marker}"}
        config = {"effects": {"providers": {"mark": provider}}}
        sid = SessionService(self.store).create("g", self.workspace, "inprocess", config)

        def result_for(request: TurnRequest) -> dict[str, object]:
            return result

        return sid.session_id, InProcessHost(result_for)

    def trace(self, result: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> list[Hit]:
        """One turn through the real driver; each crash point it reaches, with the
        in-flight phase the store holds at that moment."""
        sid, host = self.session(result)
        sessions = SessionService(self.store)
        hits: list[Hit] = []

        def record(point: str) -> None:
            turn = sessions.load(sid).in_flight
            hits.append(Hit(point, turn.phase if turn is not None else None))

        for module in (driver, host_journal, effects):
            monkeypatch.setattr(module, "crash_point", record)
        controller = Controller(self.store, ControllerConfig(host_loader=host.loader))
        turn_driver = TurnDriver(
            controller.sessions,
            controller.goals,
            controller.token,
            DriverConfig(host_loader=host.loader),
        )
        controller.acquire(sid)
        try:
            session = controller.sessions.load(sid)
            now = controller.sessions.now()
            plan = plan_next_turn(session, goal_view(controller.goals.load("g"), session, now), now)
            assert isinstance(plan, NextTurn), plan
            assert turn_driver.run_turn(session, plan).succeeded
        finally:
            controller.release(sid)
        return hits


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    (tmp_path / "effects").mkdir()
    store = open_store(tmp_path / "tk.db")
    try:
        yield Project(store, workspace, tmp_path / "effects")
    finally:
        store.close()


def _in_declared_order(hits: list[Hit]) -> None:
    order = steps.turn_points()
    indices = [order.index(hit.point) for hit in hits]
    assert indices == sorted(indices), [hit.point for hit in hits]
    for hit in hits:
        assert hit.phase == STEPS[hit.point].leaves, hit


def test_a_turn_with_an_effect_reaches_every_point_in_order(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    result: dict[str, object] = {
        "summary": "did it",
        "effects": [{"provider": "mark", "request": {"n": 1}}],
    }
    hits = project.trace(result, monkeypatch)
    # Every point once, in order; host events may take more than one batch.
    assert list(dict.fromkeys(hit.point for hit in hits)) == list(steps.turn_points())
    _in_declared_order(hits)
    assert len(list(project.effects_dir.iterdir())) == 1  # the provider really applied


def test_a_turn_that_needs_no_outside_work_skips_to_completion_in_order(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    hits = project.trace({"summary": "nothing outside"}, monkeypatch)
    points = [hit.point for hit in hits]
    # Receipt, write-back and completion are one commit: no point of their own between.
    assert "receipt" not in points and "written_back" not in points
    assert points[0] == "turn.accepted" and points[-1] == "completed"
    _in_declared_order(hits)
