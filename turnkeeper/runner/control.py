"""Starting, inspecting and stopping a project's runner from another process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NotRequired, TypedDict

from turnkeeper.errors import FailedPrecondition, Unavailable
from turnkeeper.hosts import process_tree
from turnkeeper.hosts.procfs import signal_exact
from turnkeeper.json_types import JsonDict
from turnkeeper.runner.client import RunnerClient
from turnkeeper.runner.paths import RunnerPaths
from turnkeeper.runner.protocol import RunnerIdentity


def start_detached(state_dir: Path, timeout: float = 15.0) -> tuple[RunnerIdentity, bool]:
    """The project's runner, started in a session of its own (``runner serve``, output
    to ``runner/runner.log``) unless one already answers; (identity, started)."""
    paths = RunnerPaths(state_dir)
    try:
        return status(state_dir), False
    except Unavailable:
        pass
    paths.ensure()
    with paths.log.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "turnkeeper.cli.main", "runner", "serve"],
            cwd=paths.state_dir.parent,
            env={**os.environ, "TURNKEEPER_DIR": str(paths.state_dir.parent)},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return status(state_dir), True
        except Unavailable:
            pass
        if proc.poll() is not None:
            tail = paths.log.read_text(errors="replace")[-2000:]
            raise Unavailable(
                f"the runner exited with code {proc.returncode} before it answered",
                reason="runner_start_failed",
                details={"log": str(paths.log), "log_tail": tail},
            )
        time.sleep(0.05)
    raise Unavailable(f"the runner did not answer within {timeout}s", reason="runner_start_timeout")


def status(state_dir: Path, timeout: float = 5.0) -> RunnerIdentity:
    """``hello`` of the project's runner; ``Unavailable`` if none answers."""
    with RunnerClient(state_dir, timeout=timeout) as client:
        return client.hello()


class RunnerSummary(TypedDict):
    """``runner start`` / ``status`` as the CLI prints them (``--json``)."""

    running: bool
    pid: int
    uptime_seconds: float
    turns_live: int
    turns_finished: int
    journal_bytes: int
    turns: list[JsonDict]  # each a TurnInfo as JSON


class StopResult(TypedDict):
    """What ``runner stop`` did: no runner ran, or which one stopped and what it killed."""

    stopped: bool
    running: NotRequired[bool]
    pid: NotRequired[int]
    killed_turns: NotRequired[list[str]]


def summary(identity: RunnerIdentity) -> RunnerSummary:
    live = [t for t in identity.turns if t.state != "finished"]
    return {
        "running": True,
        "pid": identity.pid,
        "uptime_seconds": round(time.time() - identity.started_at, 1),
        "turns_live": len(live),
        "turns_finished": len(identity.turns) - len(live),
        "journal_bytes": identity.journal_bytes,
        "turns": [t.model_dump(mode="json") for t in identity.turns],
    }


def stop(state_dir: Path, *, force: bool = False, timeout: float = 30.0) -> StopResult:
    """SIGTERM the runner and wait until it exited. Refused while turns run, unless
    ``force``: then their trees are killed first."""
    paths = RunnerPaths(state_dir)
    try:
        identity = status(state_dir)
    except Unavailable:
        return {"stopped": False, "running": False}
    live = [t.turn_id for t in identity.turns if t.state != "finished"]
    if live and not force:
        raise FailedPrecondition(
            f"the runner has {len(live)} live turn(s); --force kills them",
            reason="runner_has_live_turns",
            details={"turns": live},
        )
    with RunnerClient(state_dir) as client:
        for turn_id in live:
            client.kill(turn_id)
    recorded = paths.read_pid()
    if recorded is None or recorded.pid != identity.pid:
        raise FailedPrecondition(
            "the runner's pid file does not name the runner that answers",
            reason="runner_pid_mismatch",
        )
    # Signalled through a pidfd opened before the start time is re-checked: never a
    # process that reused the runner's pid.
    signal_exact(identity.pid, identity.start_time, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while process_tree.is_alive(recorded):
        if time.monotonic() > deadline:
            raise Unavailable(
                f"the runner {identity.pid} did not exit within {timeout}s",
                reason="runner_stop_timeout",
            )
        time.sleep(0.05)
    return {"stopped": True, "pid": identity.pid, "killed_turns": live}
