"""Fixtures for runner tests: a real ``turnkeeper runner serve`` process per test, a
shell agent that prints JSONL events slowly, turn requests with unique ids.

Teardown stops each runner this test started (by its pid) and ends every process
carrying the marker of a turn the test created.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from turnkeeper.hosts import TurnKind, TurnRequest, process_tree
from turnkeeper.runner import RunnerClient, runner_available

REPO = Path(__file__).resolve().parents[2]

# Prints N events ({"kind": "note", "data": {"i": i}}) DELAY seconds apart, then a
# result; every start appends a line to $STARTS (how tests count host starts).
AGENT = """\
echo "start $$" >> "$STARTS"
[ -z "$DETACH" ] || setsid sh -c 'exec sleep 600' </dev/null >/dev/null 2>&1 &
i=1
while [ "$i" -le "$N" ]; do
  printf '{"kind":"note","data":{"i":%d,"pad":"%s"}}\\n' "$i" "$PAD"
  [ "$DELAY" = 0 ] || sleep "$DELAY"
  i=$((i+1))
done
[ -z "$HANG" ] || sleep 600
printf '{"kind":"result","data":{"summary":"done %s"}}\\n' "$N"
"""


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.02)


def gone(pid: int, start_time: int) -> bool:
    stat = process_tree.read_stat(pid)
    return stat is None or stat.start_time != start_time or stat.dead


@dataclass
class Project:
    root: Path
    turns: list[str] = field(default_factory=list)
    runners: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def state_dir(self) -> Path:
        return self.root / ".turnkeeper"

    @property
    def starts(self) -> Path:
        return self.root / "starts.log"

    def start_count(self) -> int:
        return len(self.starts.read_text().splitlines()) if self.starts.exists() else 0

    def client(self, timeout: float = 30.0) -> RunnerClient:
        return RunnerClient(self.state_dir, timeout=timeout)

    def runner(self, **env: str) -> subprocess.Popen[bytes]:
        """``turnkeeper runner serve`` for this project; returns once it answers."""
        log = (self.state_dir / f"serve-{len(self.runners)}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "turnkeeper.cli.main", "runner", "serve"],
            cwd=REPO,
            env={**os.environ, "TURNKEEPER_DIR": str(self.root), **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.runners.append(proc)
        wait_until(
            lambda: proc.poll() is not None or runner_available(self.state_dir),
            what="the runner to answer",
        )
        assert proc.poll() is None, self.runner_log()
        return proc

    def runner_log(self) -> str:
        return "".join(p.read_text() for p in sorted(self.state_dir.glob("serve-*.log")))

    def config(self, n: int = 5, delay: float = 0.1, **env: str) -> dict[str, Any]:
        script = self.root / "agent.sh"
        script.write_text(AGENT)
        values = {"STARTS": str(self.starts), "N": str(n), "DELAY": str(delay), "PAD": ""}
        return {
            "command": ["sh", str(script)],
            "event_format": "jsonl",
            "env": {**values, **env},
        }

    def request(self, **overrides: Any) -> TurnRequest:
        fields: dict[str, Any] = {
            "turn_id": f"rt-{uuid.uuid4()}",
            "session_id": "sess-1",
            "generation": 0,
            "attempt": 1,
            "kind": TurnKind.START,
            "instructions": "count",
            "workspace": self.root / "ws",
            **overrides,
        }
        request = TurnRequest(**fields)
        self.turns.append(request.turn_id)
        return request


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    root = tmp_path / "project"
    (root / ".turnkeeper").mkdir(parents=True)
    (root / "ws").mkdir()
    made = Project(root)
    yield made
    for proc in made.runners:
        _stop(proc)
    for turn_id in made.turns:
        process_tree.kill_turn_processes(turn_id)
