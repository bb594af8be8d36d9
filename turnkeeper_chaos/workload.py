"""The work every chaos scenario does: the cheapest goal that still exercises effects.

Goal ``g`` has todo ``t1`` ("write a", needs evidence ``a-exists``) and todo ``t2``
("write b", depends on ``t1``, needs ``b-exists``) — or ``t1`` alone, the cheapest
goal that still exercises effects (``todos=1``). The ``scripted`` agent works each
in one turn: it starts a detached shell child (like an agent CLI's shell tool; the
host ends it when the turn ends, recovery by its marker when the control plane
died), writes the todo's file, and returns the todo done with evidence and two
``http`` effects against the harness's counting service. Two turns, four effect
keys, every boundary of the turn transaction crossed twice.

Variants replace the first attempt on the last todo: a **paused** turn (stops mid-turn,
forever, until something kills it), or a **host fault** (crash, segfault, hang,
garbage, kill_self) after half its work. Any later attempt is the plain turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import JsonValue

from turnkeeper.effects import EFFECTS_CONFIG_KEY
from turnkeeper_chaos.service import UNCONFIRMABLE

GOAL_ID = "g"
PAUSE_NAME = "chaos-pause"
EFFECTS_PER_TURN = 2
STRAGGLER = "sleep 120"


@dataclass(frozen=True)
class TodoWork:
    todo_id: str
    title: str
    path: str
    content: str
    evidence: str
    depends_on: tuple[str, ...] = ()


TODOS = (
    TodoWork("t1", "write a", "a.txt", "A\n", "a-exists"),
    TodoWork("t2", "write b", "b.txt", "B\n", "b-exists", depends_on=("t1",)),
)

# The ways a host can fail while the control plane stays alive, as scripted-agent steps.
HOST_FAULTS: dict[str, dict[str, JsonValue]] = {
    "kill_self": {"op": "kill_self"},  # the host SIGKILLed
    "segfault": {"op": "segfault"},
    "crash": {"op": "crash", "exit_code": 3},
    "hang": {"op": "hang"},  # past the run's --host-timeout
    "garbage": {"op": "garbage"},  # a line that is not JSON on the event stream
}
# What the failed turn's receipt must say for each fault.
FAULT_ERROR_KINDS = {
    "kill_self": "signal",
    "segfault": "signal",
    "crash": "exit_code",
    "hang": "timeout",
    "garbage": "protocol",
}
HANG_TIMEOUT_SECONDS = 8


def _effects(todo: TodoWork, unconfirmable: bool) -> list[JsonValue]:
    effects: list[JsonValue] = []
    for n in range(EFFECTS_PER_TURN):
        body: dict[str, JsonValue] = {"todo": todo.todo_id, "n": n}
        if unconfirmable and n == 0:
            body[UNCONFIRMABLE] = True
        effects.append({"provider": "http", "request": {"body": body}})
    return effects


def plain_turn(
    todo: TodoWork, *, unconfirmable: bool = False, host_sleep: float = 0.1
) -> dict[str, JsonValue]:
    """The todo's work, done: file, evidence, two effects (any attempt)."""
    steps: list[JsonValue] = [
        {"op": "shell", "command": STRAGGLER, "detach": True},
        {"op": "sleep", "seconds": host_sleep},
        {"op": "write", "path": todo.path, "content": todo.content},
    ]
    return {
        "match": {"todo": todo.title},
        "steps": steps,
        "result": {
            "todo_done": True,
            "evidence": [{"key": todo.evidence, "command": f"test -f {todo.path}"}],
            "effects": _effects(todo, unconfirmable),
        },
    }


def paused_turn(todo: TodoWork) -> dict[str, JsonValue]:
    """The first attempt on ``todo`` writes half its work, leaves a detached child and
    pauses until killed: the moment the harness SIGKILLs the control plane."""
    return {
        "match": {"todo": todo.title, "attempt": 1},
        "steps": [
            {"op": "write", "path": todo.path, "content": "partial\n"},
            {"op": "shell", "command": STRAGGLER, "detach": True},
            {"op": "checkpoint", "name": PAUSE_NAME, "pause": True},
        ],
        "result": {"todo_done": True},
    }


def fault_turn(todo: TodoWork, fault: str) -> dict[str, JsonValue]:
    """The first attempt on ``todo`` writes half its work, then its host fails."""
    return {
        "match": {"todo": todo.title, "attempt": 1},
        "steps": [
            {"op": "write", "path": todo.path, "content": "partial\n"},
            {"op": "shell", "command": STRAGGLER, "detach": True},
            HOST_FAULTS[fault],
        ],
        "result": {"todo_done": True},
    }


@dataclass(frozen=True)
class Workload:
    """Which variant a scenario's agent runs."""

    pause_last: bool = False  # the first attempt on the last todo pauses
    fault: str | None = None  # the first attempt on the last todo fails its host
    unconfirmable: bool = False  # the first effect of the first todo cannot be read back
    host_sleep: float = 0.1  # seconds each plain turn's host works
    todos: int = len(TODOS)  # how many of TODOS the goal has (1: the cheapest goal)

    @property
    def todo_list(self) -> tuple[TodoWork, ...]:
        return TODOS[: max(1, min(self.todos, len(TODOS)))]

    @property
    def effect_keys_per_goal(self) -> int:
        return EFFECTS_PER_TURN * len(self.todo_list)

    def script(self) -> list[JsonValue]:
        todos = self.todo_list
        turns: list[JsonValue] = []
        if self.pause_last:
            turns.append(paused_turn(todos[-1]))
        if self.fault is not None:
            turns.append(fault_turn(todos[-1], self.fault))
        for todo in todos:
            unconfirmable = self.unconfirmable and todo is todos[0]
            turns.append(plain_turn(todo, unconfirmable=unconfirmable, host_sleep=self.host_sleep))
        return turns

    def host_config(self, state_dir: Path, provider: dict[str, JsonValue]) -> dict[str, JsonValue]:
        return {
            "state_dir": str(state_dir),
            "script": {"turns": self.script()},
            EFFECTS_CONFIG_KEY: {"providers": {"http": provider}},
        }

    @property
    def run_args(self) -> tuple[str, ...]:
        if self.fault == "hang":
            return ("--host-timeout", str(HANG_TIMEOUT_SECONDS))
        return ()
