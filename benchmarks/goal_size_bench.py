"""Goal size: does one more write cost the same on a goal that has lived for days?

Run ``python -m benchmarks.goal_size_bench`` (``--quick``, ``--smoke``, ``--json``).
For each size — a goal holding N todos (10, 1,000, 10,000) and a goal holding
100,000 evidence records, one of its todos done on the last of them (so every decision
asks about the evidence work relies on, as in a real goal) — in its own embedded
project (``turnkeeper init`` in a git repository on the project's disk), measured side
by side in one run:

* **add a todo**: ``Project.todos.add`` — one proposal decided and appended, as
  ``turnkeeper todo add`` does (median of the rounds), on a freshly opened project
  (*cold*: the goal is read from the store first, as a command reads it);
* **record evidence**: one evidence record through the goal service (the kernel's
  ``record_evidence``, what ``turnkeeper evidence record`` appends after its command),
  cold likewise;
* the same two writes *warm*: in a process that holds the goal already (a project kept
  open for the whole run, as a controller or a server keeps its store), so the figure
  is the write alone — decide, fold, encode, append — with no read of the goal first;
* **a turn**: one session's turn on that goal, as the controller's loop runs it — load
  the session, plan from the goal, run the turn through the driver (claim, the turn's
  tool channel opened as ``run`` opens one for every turn, the no-op host in a git
  workspace, the outcome, the snapshot) — in a process that holds the goal
  (:class:`benchmarks._common.TurnLoop`, the in-process turn of ``turn_bench``); the
  session works the goal's first todo, which its turns never finish;
* **the agent's `goal` tool**: in one more turn of each round, the host (in process)
  calls the turn's ``goal`` tool twice through :class:`~turnkeeper.tools.service.ToolService`,
  as the tool server an agent CLI starts for the turn calls it: the *first* call of
  the turn's server, and a *later* one (what an agent waits for each time it asks);
* **show the goal**: ``Project.goals.show`` on a freshly opened project (a cold read,
  as ``goal show`` is);
* **status**: ``Project.status()`` on a freshly opened project;
* the goal's projection size in bytes (what is rewritten on every write today), and
  the size of the state ``goal show --json`` prints: its first page (``page_of``).

The goal is grown to its size through the service itself, in one decided batch (all
the ``AddTodo`` / ``RecordEvidence`` proposals decided on the evolving state, one
append): the same events and projection a user's thousands of writes would leave,
without paying for them one by one in the setup. Sizes rotate within each round so
machine noise hits them alike. Reported: medians, and each size's ratio to the
smallest goal (the target is within 2x).
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import (
    TurnLoop,
    announce_machine,
    benchmark_arguments,
    chosen_settings,
    git_workspace,
    progress_printer,
    run_in_directory,
    table_console,
    timed,
)
from benchmarks.noop_host import NoopHost
from turnkeeper import Project
from turnkeeper.hosts import TurnRequest
from turnkeeper.hosts.base import Emit
from turnkeeper.kernel.decide import decide_goal
from turnkeeper.kernel.events import GoalEvent
from turnkeeper.kernel.model import GoalState
from turnkeeper.kernel.proposals import (
    AddTodo,
    ClaimTodo,
    CompleteTodo,
    Fence,
    GoalProposal,
    RecordEvidence,
    TodoSpec,
)
from turnkeeper.runtime.log.streams import decide_and_append
from turnkeeper.runtime.services.goal_pages import page_of
from turnkeeper.runtime.services.goals import GOAL_CODEC, GoalService, goal_stream, index_entries
from turnkeeper.store import EventStore, open_store
from turnkeeper.tools.service import ToolService

GOAL = "g-size"
TURNS_PER_ROUND = 5


@dataclass
class Settings:
    rounds: int
    todo_sizes: tuple[int, ...]
    evidence_size: int


FULL = Settings(rounds=15, todo_sizes=(10, 1_000, 10_000), evidence_size=100_000)
QUICK = Settings(rounds=7, todo_sizes=(10, 1_000, 10_000), evidence_size=20_000)
SMOKE = Settings(rounds=2, todo_sizes=(10, 200), evidence_size=300)


@dataclass
class Size:
    """One goal's figures, in milliseconds (medians) and bytes."""

    label: str
    todos: int
    evidence: int
    projection_bytes: int = 0
    shown_bytes: int = 0
    add_todo_ms: list[float] = field(default_factory=list)
    record_evidence_ms: list[float] = field(default_factory=list)
    warm_add_todo_ms: list[float] = field(default_factory=list)
    warm_record_evidence_ms: list[float] = field(default_factory=list)
    turn_ms: list[float] = field(default_factory=list)
    first_tool_ms: list[float] = field(default_factory=list)
    later_tool_ms: list[float] = field(default_factory=list)
    show_ms: list[float] = field(default_factory=list)
    status_ms: list[float] = field(default_factory=list)

    def medians(self) -> dict[str, float]:
        return {
            "add_todo_ms": statistics.median(self.add_todo_ms),
            "record_evidence_ms": statistics.median(self.record_evidence_ms),
            "warm_add_todo_ms": statistics.median(self.warm_add_todo_ms),
            "warm_record_evidence_ms": statistics.median(self.warm_record_evidence_ms),
            "turn_ms": statistics.median(self.turn_ms),
            "first_tool_ms": statistics.median(self.first_tool_ms),
            "later_tool_ms": statistics.median(self.later_tool_ms),
            "show_ms": statistics.median(self.show_ms),
            "status_ms": statistics.median(self.status_ms),
        }


def _grow(store: EventStore, goal_id: str, proposals: Iterator[GoalProposal]) -> None:
    """Decide every proposal on the evolving goal and append them all at once."""
    now = datetime.now(UTC)

    def decide(state: GoalState | None) -> list[GoalEvent]:
        events: list[GoalEvent] = []
        for proposal in proposals:
            decided = decide_goal(state, proposal, now)
            for event in decided:
                state = GOAL_CODEC.evolve_event(state, event)
            events += decided
        return events

    decide_and_append(store, GOAL_CODEC, goal_stream(goal_id), decide, index=index_entries)


def _todos(n: int, prefix: str) -> Iterator[GoalProposal]:
    for i in range(n):
        yield AddTodo(todo=TodoSpec(todo_id=f"{prefix}{i}", title=f"Write part {i} of the parser"))


def _evidence(n: int, prefix: str) -> Iterator[GoalProposal]:
    for i in range(n):
        yield RecordEvidence(
            evidence_id=f"{prefix}{i}",
            command="pytest -q tests/test_parser.py",
            key="tests",
            revision="0" * 40,
            tree="1" * 40,
            exit_code=0,
            output_digest="2" * 64,
            output_tail="42 passed in 1.20s",
            freshness_seconds=3600,
        )


def _project(root: Path, todos: int, evidence: int) -> Path:
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text(".turnkeeper/\n")
    with Project.init(root) as project:
        project.goals.add("Ship the parser", goal_id=GOAL)
        _grow(project.store, GOAL, _todos(todos, "t"))
        _grow(project.store, GOAL, _evidence(evidence, "e"))
        if evidence:
            _grow(project.store, GOAL, _relied_on(f"e{evidence - 1}"))
    return root


def _relied_on(evidence_id: str) -> Iterator[GoalProposal]:
    """A todo that requires the records' key, done on ``evidence_id``."""
    spec = TodoSpec(todo_id="relies", title="Relies on the tests", required_evidence=["tests"])
    yield AddTodo(todo=spec)
    until = datetime.now(UTC) + timedelta(hours=1)
    yield ClaimTodo(todo_id="relies", owner="bench", lease_expires_at=until)
    fence = Fence(owner="bench", epoch=1)  # the todo's first claim
    yield CompleteTodo(todo_id="relies", fence=fence, evidence_ids=[evidence_id])


class ToolCallingHost(NoopHost):
    """The no-op turn, whose agent, while ``calling`` is set, calls the turn's ``goal``
    tool twice (in this process, as the tool server would) and keeps how long each took."""

    def __init__(self) -> None:
        super().__init__()
        self.calling = False
        self.calls_ms: list[tuple[float, float]] = []

    def _reply(self, request: TurnRequest, emit: Emit) -> dict[str, Any]:
        if self.calling and request.tools is not None:
            tools = ToolService(request.tools.env)
            self.calls_ms.append((_timed_ms(tools.goal), _timed_ms(tools.goal)))
        return super()._reply(request, emit)


def _turn_loop(root: Path, todos: int, evidence: int) -> TurnLoop:
    """A session on a goal of the size, in a store of its own beside the project: the
    loop's goal starts with the todo its turns work, then grows like the project's."""
    workspace = git_workspace(root / "turn-ws")
    # Each turn opens its tool channel, as every turn of ``run`` does.
    loop = TurnLoop(
        open_store(root / "turns.db"),
        workspace,
        "size",
        ToolCallingHost(),
        tools_dir=root / "turns",
    )
    _grow(loop.store, loop.goal_id, _todos(todos - 1, "t"))
    _grow(loop.store, loop.goal_id, _evidence(evidence, "e"))
    if evidence:
        _grow(loop.store, loop.goal_id, _relied_on(f"e{evidence - 1}"))
    return loop


def _timed_ms(op: Callable[[], object]) -> float:
    started = time.perf_counter()
    op()
    return (time.perf_counter() - started) * 1000


def _round(size: Size, root: Path, warm: Project, loop: TurnLoop, n: int) -> None:
    with Project.open(root) as project:
        size.show_ms.append(_timed_ms(lambda: project.goals.show(GOAL)))
        shown, _ = page_of(project.goals.show(GOAL))
        size.shown_bytes = len(shown.model_dump_json())
    with Project.open(root) as project:
        size.status_ms.append(_timed_ms(project.status))
        size.add_todo_ms.append(
            _timed_ms(lambda: project.todos.add(GOAL, f"One more todo {n}", todo_id=f"x{n}"))
        )
        record = next(_evidence(1, f"x{n}-"))
        goals = GoalService(project.store)
        size.record_evidence_ms.append(_timed_ms(lambda: goals.submit(GOAL, record)))
        projection = project.store.read_projection(goal_stream(GOAL))
        size.projection_bytes = len(projection.state) if projection is not None else 0
    # The cold writes above came from another process's view: the long-lived one reads
    # them in first (untimed), as it would have seen them arrive, so what is timed is
    # the write alone, not a conflict and a read of the whole goal.
    warm.goals.show(GOAL)
    size.turn_ms += [us / 1000 for us in timed(loop.step, TURNS_PER_ROUND)]
    host = loop.host
    assert isinstance(host, ToolCallingHost)
    host.calling = True
    try:
        loop.step()  # its tool calls are timed, not the turn
    finally:
        host.calling = False
    first, later = host.calls_ms.pop()
    size.first_tool_ms.append(first)
    size.later_tool_ms.append(later)
    size.warm_add_todo_ms.append(
        _timed_ms(lambda: warm.todos.add(GOAL, f"One more todo {n}", todo_id=f"w{n}"))
    )
    record = next(_evidence(1, f"w{n}-"))
    goals = GoalService(warm.store)
    size.warm_record_evidence_ms.append(_timed_ms(lambda: goals.submit(GOAL, record)))


def measure(settings: Settings, work: Path, say: Callable[[str], None]) -> dict[str, Any]:
    info = announce_machine(work, say)
    sizes = [Size(f"{n} todos", n, 0) for n in settings.todo_sizes]
    sizes.append(Size(f"{settings.evidence_size} evidence", 10, settings.evidence_size))
    roots = []
    for n, size in enumerate(sizes):
        say(f"growing a goal to {size.label}")
        roots.append(_project(work / f"p{n}", size.todos, size.evidence))
    loops = [
        _turn_loop(root, size.todos, size.evidence) for root, size in zip(roots, sizes, strict=True)
    ]
    warm = [Project.open(root) for root in roots]
    try:
        # The goal read once, as a long-lived process has it.
        for project, loop in zip(warm, loops, strict=True):
            project.goals.show(GOAL)
            timed(loop.step, TURNS_PER_ROUND)
        for r in range(settings.rounds):
            # Every size's goals live in this one process, where a command or a controller
            # holds one: a full pass of the cyclic collector over all of them (~0.1 s)
            # would land in whichever measurement crossed its threshold. What is held so
            # far is put out of the collector's sight (gc.freeze), untimed.
            gc.collect()
            gc.freeze()
            order = list(range(len(sizes)))
            order = order[r % len(order) :] + order[: r % len(order)]  # rotate: noise hits all
            for i in order:
                _round(sizes[i], roots[i], warm[i], loops[i], r)
            say(f"round {r + 1}/{settings.rounds}")
    finally:
        for project in warm:
            project.close()
        for loop in loops:
            loop.release()
            loop.store.close()
    base = sizes[0].medians()
    rows = []
    for size in sizes:
        medians = size.medians()
        rows.append(
            {
                "size": size.label,
                "todos": size.todos,
                "evidence": size.evidence,
                "projection_bytes": size.projection_bytes,
                "shown_bytes": size.shown_bytes,
                **medians,
                "ratios": {k: medians[k] / base[k] for k in medians},
            }
        )
    return {"machine": info, "rounds": settings.rounds, "sizes": rows}


def render(results: dict[str, Any], console: Console) -> None:
    table = Table(title="one more write on a goal of each size (medians, ms; ratio to smallest)")
    columns = (
        "goal",
        "projection",
        "shown",
        "add a todo",
        "record evidence",
        "add a todo (warm)",
        "record evidence (warm)",
        "a turn (warm)",
        "goal tool (first)",
        "goal tool (later)",
        "goal show",
        "status",
    )
    for column in columns:
        table.add_column(column, justify="right" if column != "goal" else "left")
    for row in results["sizes"]:
        ratios = row["ratios"]

        def cell(key: str, row: dict[str, Any] = row, ratios: dict[str, float] = ratios) -> str:
            return f"{row[key]:.2f} ({ratios[key]:.1f}x)"

        table.add_row(
            row["size"],
            f"{row['projection_bytes'] / 1024:.0f} KiB",
            f"{row['shown_bytes'] / 1024:.0f} KiB",
            cell("add_todo_ms"),
            cell("record_evidence_ms"),
            cell("warm_add_todo_ms"),
            cell("warm_record_evidence_ms"),
            cell("turn_ms"),
            cell("first_tool_ms"),
            cell("later_tool_ms"),
            cell("show_ms"),
            cell("status_ms"),
        )
    console.print(table)


def main() -> None:
    parser = benchmark_arguments(__doc__, "7 rounds, 20,000 evidence records")
    args = parser.parse_args()
    settings = chosen_settings(args, FULL, QUICK, SMOKE)
    say = progress_printer(args.json)
    results = run_in_directory(None, "goal-size-", lambda work: measure(settings, work, say))
    if args.json:
        sys.stdout.write(json.dumps(results, indent=2) + "\n")
    else:
        render(results, table_console())


if __name__ == "__main__":
    main()
