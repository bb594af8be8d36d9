"""Host kind ``scripted``: a deterministic fake agent for tests and the demo.

It is a real subprocess (``python -m turnkeeper.hosts.scripted_agent``) driven
through the subprocess host with jsonl events, so it is killed, timed out and
found by marker exactly like an agent CLI. Config (JSON)::

    {
      "state_dir": "/tmp/host-state",          # default <workspace>/.turnkeeper/host-state/scripted
      "handle": "scripted-fixed",              # default scripted-<uuid4>, bound on the first turn
      "script": {
        "turns": [
          {"match": {"todo": "write docs", "attempt": 1, "kind": "start"},
           "steps": [
             {"op": "write", "path": "docs/a.md", "content": "hello\n"},
             {"op": "shell", "command": "sleep 600", "detach": true},
             {"op": "checkpoint", "name": "before-crash", "pause": true},
             {"op": "crash", "exit_code": 3}
           ],
           "result": {"todo_done": true,
                      "evidence": [{"key": "tests", "command": "pytest -q"}]}}
        ],
        "default": {"steps": [{"op": "message", "text": "nothing to do"}]}
      }
    }

A turn runs the steps of the first entry whose ``match`` fields (todo title,
attempt, turn kind, turn id; omitted = any) all equal the request's, else
``default``; with neither the agent fails (exit code 2). Steps:

``write`` / ``append`` (path, content), ``shell`` (command; in a session of its own
like agent CLIs' shell tools; ``detach`` = do not wait), ``message`` (text), ``emit``
(kind, data), ``sleep`` (seconds), ``checkpoint`` (name; emits a ``checkpoint``
event and, with ``pause``, creates ``<workspace>/.turnkeeper-pause/<name>`` and waits
until a test deletes it) and the faults ``crash`` (exit_code), ``segfault``,
``hang``, ``garbage`` (text: a non-JSON line), ``kill_self`` (SIGKILL).

Host state dir: ``runs.jsonl`` gets one line per run (turn id, attempt, pid,
kind) before any step; ``sessions/<handle>.jsonl`` is the host session artifact,
a transcript a continuation resumes from (missing or truncated → failed/protocol).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from turnkeeper.hosts.base import HostSpawnFailed, TurnRequest
from turnkeeper.hosts.python_host import python_env
from turnkeeper.hosts.subprocess_config import SubprocessHostConfig, validate_config
from turnkeeper.hosts.subprocess_host import SubprocessRun, spawn
from turnkeeper.hosts.workspace_folder import workspace_folder
from turnkeeper.json_types import JsonDict
from turnkeeper.vocabulary import TurnKind


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WriteStep(_Step):
    op: Literal["write"]
    path: str
    content: str = ""


class AppendStep(_Step):
    op: Literal["append"]
    path: str
    content: str


class ShellStep(_Step):
    op: Literal["shell"]
    command: str
    detach: bool = False
    timeout: float | None = None


class MessageStep(_Step):
    op: Literal["message"]
    text: str


class EmitStep(_Step):
    op: Literal["emit"]
    kind: str
    data: JsonDict = Field(default_factory=dict)


class SleepStep(_Step):
    op: Literal["sleep"]
    seconds: float = Field(ge=0)


class CheckpointStep(_Step):
    op: Literal["checkpoint"]
    name: str = Field(pattern=r"^[\w.-]+$")
    pause: bool = False


class CrashStep(_Step):
    op: Literal["crash"]
    exit_code: int = Field(default=1, ge=1, le=255)


class FaultStep(_Step):
    op: Literal["segfault", "hang", "kill_self"]


class GarbageStep(_Step):
    op: Literal["garbage"]
    text: str = "this is not json {"


Step = Annotated[
    WriteStep
    | AppendStep
    | ShellStep
    | MessageStep
    | EmitStep
    | SleepStep
    | CheckpointStep
    | CrashStep
    | FaultStep
    | GarbageStep,
    Field(discriminator="op"),
]


class TurnMatch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    todo: str | None = None
    attempt: int | None = None
    kind: TurnKind | None = None
    turn_id: str | None = None

    def matches(self, request: TurnRequest) -> bool:
        wanted = {
            "todo": (self.todo, request.todo_title),
            "attempt": (self.attempt, request.attempt),
            "kind": (self.kind, request.kind),
            "turn_id": (self.turn_id, request.turn_id),
        }
        return all(want is None or want == have for want, have in wanted.values())


class ScriptedTurn(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    match: TurnMatch = Field(default_factory=TurnMatch)
    steps: list[Step] = Field(default_factory=list)
    # Merged over what the agent computes (files_changed, commands, summary, ...).
    result: JsonDict = Field(default_factory=dict)


class Script(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    turns: list[ScriptedTurn] = Field(default_factory=list)
    default: ScriptedTurn | None = None

    def select(self, request: TurnRequest) -> ScriptedTurn | None:
        for turn in self.turns:
            if turn.match.matches(request):
                return turn
        return self.default


class ScriptedHostConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    script: Script = Field(default_factory=Script)
    state_dir: str | None = None
    handle: str | None = None
    tolerate_malformed: bool = False
    kill_stragglers: bool = True
    python: str = Field(default_factory=lambda: sys.executable)


def state_dir_for(cfg: ScriptedHostConfig, workspace: Path) -> Path:
    if cfg.state_dir:
        return Path(cfg.state_dir).expanduser().resolve()
    return (workspace / ".turnkeeper" / "host-state" / "scripted").resolve()


class ScriptedHost:
    kind = "scripted"

    def __init__(self, config: Mapping[str, object] | None = None) -> None:
        self._config = dict(config or {})
        validate_config(ScriptedHostConfig, self._config)

    def session_artifact(self, handle: str, workspace: Path) -> Path | None:
        """The scripted agent's session file (hosts/scripted_agent.py writes it)."""
        cfg: ScriptedHostConfig = validate_config(ScriptedHostConfig, self._config)
        return state_dir_for(cfg, workspace) / "sessions" / f"{handle}.jsonl"

    def start(self, request: TurnRequest) -> SubprocessRun:
        cfg: ScriptedHostConfig = validate_config(
            ScriptedHostConfig, self._config, request.host_config
        )
        if cfg.state_dir is None and request.workspace.is_dir():
            try:  # its state in the workspace: out of the workspace's `git add -A`
                workspace_folder(request.workspace)
            except OSError as exc:
                raise HostSpawnFailed(
                    f"cannot keep the agent's state in {request.workspace}: {exc}"
                ) from exc
        # Resolve the state dir here so the agent and the test agree on one path.
        cfg = cfg.model_copy(update={"state_dir": str(state_dir_for(cfg, request.workspace))})
        sub = SubprocessHostConfig(
            command=[cfg.python, "-m", "turnkeeper.hosts.scripted_agent"],
            event_format="jsonl",
            stdin="request",
            env=python_env(),
            tolerate_malformed=cfg.tolerate_malformed,
            kill_stragglers=cfg.kill_stragglers,
        )
        payload: JsonDict = {
            "request": request.for_host(),
            "config": cfg.model_dump(mode="json"),
        }
        return spawn(request, sub, stdin_request=payload)
