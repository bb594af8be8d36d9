"""The project the command benchmark lists: many sessions on a few goals, built fast.

The goals and their todos are created through the real goal service. The sessions
are clones of two sessions recorded through the real runtime (controller loop, turn
driver, kernels, store, no-op host; see :func:`benchmarks.recovery_history.record_templates`):
one closed after its turns, one mid-work whose lease a SIGKILLed controller holds.
Each clone gets fresh session and turn ids and is pointed at one of the project's
goals and todos, and is appended through ``SqlEventStore.append`` with
``durable=False``, one durable commit every ``batch_events`` events: real events,
checksums, projections and index entries, at a fraction of the runtime's cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import Say, count_events, git_workspace
from benchmarks.recovery_history import (
    StreamTemplate,
    append_clone,
    checkpoint,
    dead_owner,
    dead_process,
    record_templates,
)
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.project import Project, init_project
from turnkeeper.store import open_store

# Id space of the clones (see benchmarks.recovery_history: 1 and 2 are its own).
_SPACE = 7


@dataclass(frozen=True)
class ProjectShape:
    sessions: int
    mid_work: int  # of them, left mid-work with the dead controller's lease
    goals: int
    todos_per_goal: int
    target_events: int  # the project's size in events, reached through the closed sessions
    mid_work_turns: int = 5
    batch_events: int = 20_000


@dataclass
class BuiltProject:
    root: Path
    database: Path
    events: int
    sessions: int
    goals: int
    turns_per_closed_session: int
    db_bytes: int
    build_s: float


def _turns_for(shape: ProjectShape, goal_events: int, mid_events: int, per_turn: int) -> int:
    """Turns per closed session that bring the project closest to ``target_events``."""
    closed = shape.sessions - shape.mid_work
    if closed <= 0:
        return 1
    # A closed session: created, lease acquired, ``per_turn`` events a turn, closed.
    budget = shape.target_events - goal_events - shape.mid_work * mid_events
    return max(1, round((budget / closed - 3) / per_turn))


def _goals(project: Project, shape: ProjectShape) -> list[tuple[str, list[str]]]:
    """The project's goals with their todos, through the real goal service."""
    store = open_store(project.database_url)
    try:
        service = GoalService(store)
        out = []
        for g in range(shape.goals):
            goal_id = f"goal-{g:02d}"
            service.create(CreateGoal(goal_id=goal_id, title=f"benchmark goal {g}"))
            todos = []
            for t in range(shape.todos_per_goal):
                todo_id = f"todo-{g:02d}-{t:03d}"
                service.submit(
                    goal_id,
                    AddTodo(todo=TodoSpec(todo_id=todo_id, title=f"todo {t} of goal {g}")),
                )
                todos.append(todo_id)
            out.append((goal_id, todos))
        return out
    finally:
        store.close()


def _clone_ids(n: int, goal_id: str, todo_id: str, turn_slots: int) -> list[str]:
    # Same shapes and lengths as the runtime's ids (uuid4, turn-<16 hex>); the slots are
    # recovery_history's: session, goal, todo, then the turns.
    return [
        f"{n:08x}-{_SPACE:04x}-4000-8000-{n:012x}",
        goal_id,
        todo_id,
        *(f"turn-{_SPACE:x}{n:07x}{j:08x}" for j in range(turn_slots)),
    ]


def _session_template(templates: list[StreamTemplate]) -> list[StreamTemplate]:
    return [t for t in templates if t.stream_key == "session"]


def build_project(work: Path, shape: ProjectShape, say: Say) -> BuiltProject:
    """A project under ``work/project`` holding ``shape``'s goals and sessions."""
    t0 = time.perf_counter()
    git_workspace(work / "workspace")
    owner = dead_owner(*dead_process())
    root = work / "project"
    root.mkdir()
    project, _ = init_project(root)
    goals = _goals(project, shape)
    goal_events = shape.goals * (1 + shape.todos_per_goal)
    # A first, short recording says how many events a turn and a mid-work session take.
    probe_dir = work / "probe"
    git_workspace(probe_dir / "workspace")
    probe = record_templates(
        probe_dir, shape.mid_work_turns, shape.mid_work_turns + 1, owner, lambda _: None
    )
    mid_events = len(_session_template(probe.mid_work)[0].events)
    per_turn = len(_session_template(probe.closed)[0].events) - mid_events - 1
    turns = _turns_for(shape, goal_events, mid_events, per_turn)
    say(f"recording the session templates ({turns} turns a closed session) ...")
    templates = record_templates(work, shape.mid_work_turns, turns, owner, say)
    mid, closed = _session_template(templates.mid_work), _session_template(templates.closed)
    database = project.state_dir / "turnkeeper.db"
    store = open_store(project.database_url)
    written = since_durable = 0
    try:
        for n in range(shape.sessions):
            goal_id, todos = goals[n % len(goals)]
            ids = _clone_ids(
                n, goal_id, todos[(n // len(goals)) % len(todos)], templates.turn_slots
            )
            template = mid if n < shape.mid_work else closed
            last = n == shape.sessions - 1
            durable = last or since_durable >= shape.batch_events
            count = append_clone(store, template, ids, durable=durable)
            written += count
            since_durable = 0 if durable else since_durable + count
            if n and n % 200 == 0:
                say(f"  {n:,} sessions, {written:,} session events")
    finally:
        store.close()
    db_bytes = checkpoint(database)
    return BuiltProject(
        root=root,
        database=database,
        events=count_events(database),
        sessions=shape.sessions,
        goals=shape.goals,
        turns_per_closed_session=turns,
        db_bytes=db_bytes,
        build_s=time.perf_counter() - t0,
    )
