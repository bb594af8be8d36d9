"""The processes of a runner-mode chaos run: one runner, kept running as a supervisor
(systemd's ``Restart=always``) would, and one control plane at a time.

Both are the harness's own children, signalled only by pid while not yet reaped. A
runner that dies — the harness's SIGKILL or its own armed crash point — is restarted
within ~50 ms by a supervising thread, armed with the crash point the plan asks for
next, if any. A control plane is started only once a runner answers (``--runner
require`` refuses to start otherwise).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.runner import runner_available
from turnkeeper.runtime.services.project import STATE_DIR_NAME
from turnkeeper_chaos.procs import wait_until
from turnkeeper_chaos.project import cli_command

RUN_ARGS = ("run", "--json", "--runner", "auto", "--backoff", "1", "--lease", "30")


@dataclass
class Proc:
    role: str  # "runner" or "cp"
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path
    crash_at: str | None
    killed: bool = False

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    @property
    def crashed_at_point(self) -> bool:
        return bool(self.crash_at) and self.proc.returncode == -signal.SIGKILL


class Processes:
    def __init__(self, project: Path, logs: Path, env: Callable[[str | None], dict[str, str]]):
        self.project = project
        self.logs = logs
        self.env = env
        self.lock = threading.RLock()
        self.runner: Proc | None = None
        self.cp: Proc | None = None
        self.ended: list[Proc] = []
        self.victims: Counter[str] = Counter()  # kills by process: cp / runner
        self.point_crashes: Counter[str] = Counter()  # of those, by an armed crash point
        self.runner_arm: str | None = None  # the crash point of the next runner started
        self._n = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _spawn(self, role: str, args: list[str], crash_at: str | None) -> Proc:
        self.logs.mkdir(exist_ok=True)
        self._n += 1
        out, err = self.logs / f"{self._n:03d}-{role}.out", self.logs / f"{self._n:03d}-{role}.err"
        with out.open("wb") as fo, err.open("wb") as fe:
            proc = subprocess.Popen(
                [*cli_command(), *args],
                cwd=self.project,
                env=self.env(crash_at),
                stdin=subprocess.DEVNULL,
                stdout=fo,
                stderr=fe,
            )
        return Proc(role, proc, out, err, crash_at)

    # --- the runner, supervised ---------------------------------------------------------

    def supervise(self) -> None:
        """Start the runner and keep it running (until :meth:`stop_runner`)."""
        self._keep_runner()
        self._thread = threading.Thread(target=self._supervisor, name="runner-supervisor")
        self._thread.daemon = True
        self._thread.start()

    def _supervisor(self) -> None:
        while not self._stop.wait(0.05):
            self._keep_runner()

    def _keep_runner(self) -> None:
        with self.lock:
            self._reap_one(self.runner)
            if self.runner is None and not self._stop.is_set():
                arm, self.runner_arm = self.runner_arm, None
                self.runner = self._spawn("runner", ["runner", "serve"], arm)

    def runner_answers(self, timeout: float = 30.0) -> bool:
        state = self.project / STATE_DIR_NAME
        return wait_until(lambda: runner_available(state, timeout=1.0), timeout, poll=0.05)

    def stop_runner(self) -> None:
        """Stop supervising; SIGTERM the runner (it ends its turns) and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self.lock:
            p = self.runner
            if p is None or p.proc.poll() is not None:
                self._reap_one(p)
                return
            p.proc.send_signal(signal.SIGTERM)
            try:
                p.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill("runner")
                return
            self._retire(p)

    # --- the control plane --------------------------------------------------------------

    def start_cp(self, crash_at: str | None = None) -> bool:
        """A control plane, once a runner answers; False if none did within 30s."""
        assert self.cp is None
        if not self.runner_answers():
            return False
        self.cp = self._spawn("cp", list(RUN_ARGS), crash_at)
        return True

    def agents_running(self, agent: str) -> int:
        from turnkeeper_chaos.procs import cmdline

        return sum(
            1 for name in os.listdir("/proc") if name.isdigit() and agent in cmdline(int(name))
        )

    # --- kills --------------------------------------------------------------------------

    def kill(self, role: str) -> bool:
        """SIGKILL the runner or the control plane, if it runs; whether one was killed."""
        with self.lock:
            p = self.runner if role == "runner" else self.cp
            if p is None or p.proc.poll() is not None:
                self._reap_one(p)
                return False
            # Our own child, not yet reaped: its pid cannot name another process.
            p.proc.send_signal(signal.SIGKILL)
            p.proc.wait()
            p.killed = True
            self.victims[role] += 1
            self._retire(p)
            return True

    def reap_cp(self) -> Proc | None:
        """The control plane if it ended by itself (then forgotten), else None."""
        with self.lock:
            p = self.cp
            return p if self._reap_one(p) else None

    def _reap_one(self, p: Proc | None) -> bool:
        if p is None or p.proc.poll() is None:
            return False
        if p.crashed_at_point:
            self.victims[p.role] += 1  # its armed crash point fired: a kill too
            self.point_crashes[p.role] += 1
        self._retire(p)
        return True

    def _retire(self, p: Proc) -> None:
        self.ended.append(p)
        if p is self.runner:
            self.runner = None
        if p is self.cp:
            self.cp = None

    def end_all(self) -> None:
        self._stop.set()
        for role in ("cp", "runner"):
            self.kill(role)

    def wait_for_exit(self, p: Proc, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while p.proc.poll() is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True
