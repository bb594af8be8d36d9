"""Child side of the ``scripted`` host: ``python -m turnkeeper.hosts.scripted_agent``.

Reads ``{"request": TurnRequest, "config": ScriptedHostConfig}`` JSON on stdin and
prints jsonl events. See :mod:`turnkeeper.hosts.scripted` for the script format.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from turnkeeper.hosts.base import TurnRequest
from turnkeeper.hosts.scripted import (
    AppendStep,
    CheckpointStep,
    CrashStep,
    EmitStep,
    FaultStep,
    GarbageStep,
    MessageStep,
    ScriptedHostConfig,
    ShellStep,
    SleepStep,
    Step,
    WriteStep,
)
from turnkeeper.json_types import JsonDict, JsonValue

PAUSE_DIR = ".turnkeeper-pause"


class ScriptFailedError(Exception):
    def __init__(self, error_kind: str, message: str) -> None:
        super().__init__(message)
        self.error_kind = error_kind


def emit(kind: str, data: JsonDict) -> None:
    sys.stdout.write(json.dumps({"kind": kind, "data": data}) + "\n")
    sys.stdout.flush()


def append_line(path: Path, record: JsonDict) -> None:
    """One ``write`` of one whole line: a SIGKILL leaves it complete or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_session(path: Path, handle: str) -> list[JsonDict]:
    """The session transcript; ``ScriptFailedError(protocol)`` if missing or truncated."""
    if not path.exists():
        raise ScriptFailedError("protocol", f"host session {handle} not found: no file {path}")
    raw = path.read_bytes()
    if not raw.endswith(b"\n"):
        raise ScriptFailedError(
            "protocol", f"host session file {path} is truncated (no final newline)"
        )
    records: list[JsonDict] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise ScriptFailedError(
                "protocol", f"host session file {path} is corrupt at line {number}"
            ) from None
        records.append(record)
    if not records or records[0].get("type") != "session.created":
        raise ScriptFailedError("protocol", f"host session file {path} has no session header")
    return records


class Agent:
    def __init__(self, request: TurnRequest, config: ScriptedHostConfig) -> None:
        self.request = request
        self.config = config
        assert config.state_dir is not None  # the host resolves it before spawning
        self.state_dir = Path(config.state_dir)
        # Paths and command records, as the result reports them (JSON lists).
        self.files_changed: list[JsonValue] = []
        self.commands: list[JsonValue] = []

    def run(self) -> int:
        req = self.request
        append_line(
            self.state_dir / "runs.jsonl",
            {"turn_id": req.turn_id, "attempt": req.attempt, "pid": os.getpid(), "kind": req.kind},
        )
        try:
            handle, session_file = self.bind_session()
            turn = self.config.script.select(req)
            if turn is None:
                raise ScriptFailedError("exit_code", f"no scripted turn matches turn {req.turn_id}")
            append_line(
                session_file,
                {
                    "type": "turn.started",
                    "turn_id": req.turn_id,
                    "attempt": req.attempt,
                    "kind": req.kind,
                    "instructions": req.instructions,
                },
            )
            for step in turn.steps:
                self.step(step)
        except ScriptFailedError as exc:
            emit("error", {"fatal": True, "error_kind": exc.error_kind, "message": str(exc)})
            return 1 if exc.error_kind == "protocol" else 2
        result: JsonDict = {
            "summary": f"ran {len(turn.steps)} scripted step(s)",
            "files_changed": self.files_changed,
            "commands": self.commands,
            "handle": handle,
            **turn.result,
        }
        append_line(
            session_file, {"type": "turn.completed", "turn_id": req.turn_id, "result": result}
        )
        emit("result", result)
        return 0

    def bind_session(self) -> tuple[str, Path]:
        handle = self.request.host_session_handle
        sessions = self.state_dir / "sessions"
        if handle is None:
            handle = self.config.handle or f"scripted-{uuid.uuid4()}"
            path = sessions / f"{handle}.jsonl"
            append_line(
                path,
                {"type": "session.created", "handle": handle, "turn_id": self.request.turn_id},
            )
            emit("session.bound", {"handle": handle, "resumed": False})
            return handle, path
        path = sessions / f"{handle}.jsonl"
        records = read_session(path, handle)
        started = [r["turn_id"] for r in records if r.get("type") == "turn.started"]
        completed = {r["turn_id"] for r in records if r.get("type") == "turn.completed"}
        emit(
            "session.bound",
            {
                "handle": handle,
                "resumed": True,
                "previous_turns": len(started),
                # Turns that started but never completed: what a real agent would
                # be told to reconcile (the lost step is not replayed blindly).
                "interrupted_turns": [t for t in started if t not in completed],
            },
        )
        return handle, path

    def step(self, step: Step) -> None:
        ws = self.request.workspace
        if isinstance(step, WriteStep | AppendStep):
            target = ws / step.path
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("w" if isinstance(step, WriteStep) else "a") as fh:
                fh.write(step.content)
            self.files_changed.append(step.path)
            emit("file.changed", {"path": step.path, "op": step.op})
        elif isinstance(step, ShellStep):
            self.shell(step)
        elif isinstance(step, MessageStep):
            emit("message", {"text": step.text})
        elif isinstance(step, EmitStep):
            emit(step.kind, step.data)
        elif isinstance(step, SleepStep):
            time.sleep(step.seconds)
        elif isinstance(step, CheckpointStep):
            self.checkpoint(step)
        elif isinstance(step, GarbageStep):
            sys.stdout.write(step.text + "\n")
            sys.stdout.flush()
        elif isinstance(step, CrashStep):
            os._exit(step.exit_code)
        elif isinstance(step, FaultStep):
            self.fault(step.op)

    def shell(self, step: ShellStep) -> None:
        # Like agent CLIs' shell tools: a process session of its own, so the command
        # outlives a SIGKILL of the agent. Output is captured, never our stdout.
        if step.detach:
            proc = subprocess.Popen(
                ["sh", "-c", step.command],
                cwd=self.request.workspace,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            record: JsonDict = {"command": step.command, "detached": True, "pid": proc.pid}
        else:
            try:
                done = subprocess.run(
                    ["sh", "-c", step.command],
                    cwd=self.request.workspace,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=step.timeout,
                    start_new_session=True,
                    check=False,
                )
                exit_code: int | None = done.returncode
                output = (done.stdout + done.stderr).decode(errors="replace")[-4000:]
            except subprocess.TimeoutExpired:
                exit_code, output = None, f"timed out after {step.timeout}s"
            record = {"command": step.command, "exit_code": exit_code, "output": output}
        self.commands.append(record)
        emit("command", record)

    def checkpoint(self, step: CheckpointStep) -> None:
        emit("checkpoint", {"name": step.name, "pid": os.getpid()})
        if not step.pause:
            return
        marker = self.request.workspace / PAUSE_DIR / step.name
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        while marker.exists():  # a test kills us here, or deletes the file to go on
            time.sleep(0.02)

    def fault(self, op: str) -> None:
        sys.stdout.flush()
        if op == "hang":
            while True:
                time.sleep(3600)
        if op == "segfault":
            # No core file in the workspace; Python installs no SIGSEGV handler.
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            os.kill(os.getpid(), signal.SIGSEGV)
        elif op == "kill_self":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)  # the signal is delivered before this returns


def main() -> int:
    payload = json.load(sys.stdin)
    request = TurnRequest.model_validate(payload["request"])
    config = ScriptedHostConfig.model_validate(payload["config"])
    return Agent(request, config).run()


if __name__ == "__main__":
    sys.exit(main())
