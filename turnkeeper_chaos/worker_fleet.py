"""The workers chaos mode's worker processes: a fixed number of slots, each running one
``run --worker`` at a time, that the harness kills (SIGKILL, by the pid of its own
child) and starts again; and how to tell whether a worker is in the middle of a turn
(an agent process descends from it), so a kill lands mid-turn.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from turnkeeper_chaos.procs import cmdline


@dataclass
class WorkerProcess:
    slot: int
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path
    started: float
    killed: bool = False


class Fleet:
    """The worker processes: ``workers`` slots, each always running one (until ended)."""

    def __init__(
        self, command: list[str], *, cwd: Path, env: Callable[[], dict[str, str]], logs: Path
    ) -> None:
        self._command, self._cwd, self._env, self._logs = command, cwd, env, logs
        self.live: dict[int, WorkerProcess] = {}
        self.ended: list[WorkerProcess] = []
        self._n = 0

    def start(self, slot: int) -> None:
        self._logs.mkdir(exist_ok=True)
        self._n += 1
        out = self._logs / f"worker{slot}-{self._n:03d}.out"
        err = self._logs / f"worker{slot}-{self._n:03d}.err"
        with out.open("wb") as fo, err.open("wb") as fe:
            proc = subprocess.Popen(
                self._command,
                cwd=self._cwd,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=fo,
                stderr=fe,
            )
        self.live[slot] = WorkerProcess(slot, proc, out, err, time.monotonic())

    def reap(self) -> list[WorkerProcess]:
        gone = [p for p in self.live.values() if p.proc.poll() is not None]
        for p in gone:
            del self.live[p.slot]
            self.ended.append(p)
        return gone

    def kill(self, slot: int) -> None:
        p = self.live[slot]
        # Our own child, not yet reaped: its pid cannot name another process.
        p.proc.send_signal(signal.SIGKILL)
        p.proc.wait()
        p.killed = True

    def killed_pids(self) -> frozenset[int]:
        return frozenset(p.proc.pid for p in self.ended if p.killed)

    def stop_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.live and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.2)
        for p in list(self.live.values()):
            p.proc.send_signal(signal.SIGTERM)
        for p in list(self.live.values()):
            try:
                p.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill(p.slot)
        self.reap()


def runs_an_agent(pid: int, agent: str) -> bool:
    """Whether an agent process (``agent`` in its command line) descends from ``pid``."""
    for name in os.listdir("/proc"):
        if name.isdigit() and agent in cmdline(int(name)) and pid in ancestors(int(name)):
            return True
    return False


def ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        try:
            raw = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            break
        pid = int(raw[raw.rindex(b")") + 2 :].split()[1])
        chain.append(pid)
    return chain
