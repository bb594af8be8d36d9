"""The real ``turnkeeper run``, as users start it, measured from outside.

* :func:`make_project` — a project made by the real ``turnkeeper init`` in a git
  repository, with ``sessions`` sessions, each on a goal of its own with one todo that
  never completes (or, for working turns — :func:`working_host` — with a todo for
  every turn, each completed by its turn), each working in a git repository of its
  own (copies of one template repository made by ``git init`` and one commit: a copy
  is what a clone holds, without a git process per workspace). The goals, todos and
  sessions are written through the same services ``goal add``, ``todo add`` and
  ``session create`` use, on the project's store, so the store holds what those
  commands would write.
* :class:`RunProcess` — ``turnkeeper run`` (the installed executable) in a child
  process, under GNU time (``/usr/bin/time -f '%e %U %S %M'``: a small C parent, so
  its ``ru_maxrss`` is the controller's own), its ``/proc/<pid>/stat`` and
  ``status`` sampled while it runs (the controller's own CPU and its reaped
  children's apart, its memory high-water mark), optionally under
  ``py-spy record -f raw --threads``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks._common import Say, git_workspace
from benchmarks.turn_log import read_turns
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store import open_store

GNU_TIME = Path("/usr/bin/time")
TIME_FORMAT = "%e %U %S %M"  # wall s, user s, sys s, max RSS KiB
PY_SPY = Path(sys.executable).with_name("py-spy")
PROFILE_RATE_HZ = 500  # py-spy samples per second (of the thread holding the GIL)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Bounds on every wait of this module.
COMMAND_TIMEOUT_S = 120.0
START_TIMEOUT_S = 10.0
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


# A turn that does work: the host appends a line to a file of its workspace, a
# different line every turn (its turn id), so every turn leaves a changed workspace
# and takes a new snapshot; exit 0 completes its todo.
WORKING_LINE = 'echo "{turn_id}" >> work.log'


def working_host(seconds: float | None = None) -> list[str]:
    """The working host's command; with ``seconds``, it sleeps that long first (a
    ``sleep`` child of the shell): a turn of that much host time."""
    pause = "" if seconds is None else f"sleep {seconds:g}; "
    return ["sh", "-c", pause + WORKING_LINE]


def turnkeeper_command() -> list[str]:
    """The console script installed beside this interpreter: what a user runs."""
    script = Path(sys.executable).with_name("turnkeeper")
    return [str(script)] if script.exists() else [sys.executable, "-m", "turnkeeper.cli.main"]


def user_env(code: Path | None = None) -> dict[str, str]:
    """A user's shell: no ``TURNKEEPER_*`` settings, a git identity; ``code``: the
    directory holding the ``turnkeeper`` package that runs (``PYTHONPATH``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env.update(GIT_IDENTITY)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return env


@dataclass
class Project:
    root: Path
    database: Path
    session_ids: list[str]
    build_s: float


def make_project(
    work: Path, sessions: int, host_command: list[str], say: Say, *, todos: int = 0
) -> Project:
    """``work/project`` made by ``turnkeeper init``, with ``sessions`` sessions on the
    ``subprocess`` host, each on its own goal, each in its own git workspace under
    ``work/workspaces``.

    ``todos`` 0: the host is ``{"command": host_command, "complete_todo": "never"}``
    on one todo that is never done, so the sessions keep turning for as long as
    ``run`` lets them. ``todos`` N: each goal has N todos and the host's exit 0
    completes the turn's todo (``complete_todo: "on_success"``), so every turn finishes
    one: a goal needs more todos than its session's turns, or it closes and its session
    stops before the run's budget is spent."""
    t0 = time.perf_counter()
    root = git_workspace(work / "project")
    subprocess.run(
        [*turnkeeper_command(), "init"],
        cwd=root,
        env=user_env(),
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    database = root / ".turnkeeper" / "turnkeeper.db"
    template = git_workspace(work / "workspace-template")
    store = open_store(f"sqlite:///{database}")
    ids = []
    try:
        goals, service = GoalService(store), SessionService(store)
        for i in range(sessions):
            workspace = work / "workspaces" / f"ws-{i:04d}"
            shutil.copytree(template, workspace, symlinks=True)
            goal_id, todo_id = f"goal-{i:04d}", f"todo-{i:04d}"
            goals.create(CreateGoal(goal_id=goal_id, title=f"fleet goal {i}"))
            if todos == 0:
                goals.submit(goal_id, AddTodo(todo=TodoSpec(todo_id=todo_id, title="never done")))
            for j in range(todos):
                spec = TodoSpec(todo_id=f"{todo_id}-{j:05d}", title=f"step {j}")
                goals.submit(goal_id, AddTodo(todo=spec))
            rule = "never" if todos == 0 else "on_success"
            state = service.create(
                goal_id, workspace, "subprocess", {"command": host_command, "complete_todo": rule}
            )
            ids.append(state.session_id)
    finally:
        store.close()
    build_s = time.perf_counter() - t0
    say(f"  project with {sessions} session(s), host {host_command}, built in {build_s:.1f} s")
    return Project(root=root, database=database, session_ids=ids, build_s=build_s)


# -- the run process -------------------------------------------------------------------


@dataclass(frozen=True)
class ProcSample:
    """One reading of the controller's ``/proc/<pid>/stat`` and ``status``."""

    at: float  # time.time()
    own_cpu_s: float  # utime + stime: the controller's threads
    children_cpu_s: float  # cutime + cstime: hosts and git processes it reaped
    hwm_kib: int  # VmHWM: its resident set's high-water mark
    threads: int


def read_proc(pid: int) -> ProcSample | None:
    """The controller's CPU and memory now; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rpartition(")")[2].split()
    # After the command name: state is field 3, utime 14 ... num_threads 20 (1-based).
    utime, stime, cutime, cstime = (int(fields[i - 3]) for i in (14, 15, 16, 17))
    hwm = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), "0")
    return ProcSample(
        at=time.time(),
        own_cpu_s=(utime + stime) / CLOCK_TICKS,
        children_cpu_s=(cutime + cstime) / CLOCK_TICKS,
        hwm_kib=int(hwm),
        threads=int(fields[20 - 3]),
    )


def cpu_between(samples: list[ProcSample], t0: float, t1: float) -> tuple[float, float, float]:
    """(own CPU s, children's CPU s, wall s) between the samples nearest ``t0`` and
    ``t1``: the controller's cost over a window, start-up and shutdown left out."""
    if len(samples) < 2:
        return 0.0, 0.0, 0.0
    first = min(samples, key=lambda s: abs(s.at - t0))
    last = min(samples, key=lambda s: abs(s.at - t1))
    if first is last:
        # A window shorter than the sampling period (a small run on a busy machine):
        # the samples around it, so the reading spans the window rather than nothing.
        first = max((s for s in samples if s.at <= t0), key=lambda s: s.at, default=samples[0])
        last = min((s for s in samples if s.at >= t1), key=lambda s: s.at, default=samples[-1])
        if first is last:
            first, last = samples[0], samples[-1]
    return (
        last.own_cpu_s - first.own_cpu_s,
        last.children_cpu_s - first.children_cpu_s,
        last.at - first.at,
    )


@dataclass
class RunOutcome:
    returncode: int
    started_at: float  # time.time() just before the child was started
    wall_s: float
    # From GNU time: user and sys include every reaped child (hosts, git).
    user_s: float = 0.0
    sys_s: float = 0.0
    max_rss_kib: int = 0
    summary: dict[str, Any] = field(default_factory=dict)  # run --json's last line
    samples: list[ProcSample] = field(default_factory=list)
    profiles: dict[str, Path] = field(default_factory=dict)  # phase -> py-spy's raw output


def _children_of(pid: int) -> list[int]:
    """``pid``'s children: from ``/proc/<pid>/task/*/children`` where the kernel has
    it, else by the parent pid of every process."""
    found = []
    tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
    for task in tasks:
        try:
            found += [int(p) for p in task.read_text().split()]
        except OSError:
            continue
    if tasks:
        return found
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # the process ended while /proc was read: it is no child to count
        if parent == pid:
            found.append(int(stat.parent.name))
    return found


def profiler_available(say: Callable[[str], None]) -> bool:
    """Whether py-spy is installed beside this Python; when it is not, ``say`` why the
    benchmark goes on without its profile (the measurements do not need it)."""
    if PY_SPY.exists():
        return True
    say(f"py-spy is not installed beside {sys.executable}: no profile (pip install py-spy)")
    return False


class RunProcess:
    """``turnkeeper run ARGS`` in ``root``, started now; :meth:`wait` or :meth:`kill`."""

    def __init__(
        self,
        root: Path,
        args: list[str],
        logs: Path,
        *,
        timed: bool = True,
        profile: str | None = None,
        sample_every_s: float = 0.1,
        code: Path | None = None,
        under: Sequence[str] = (),
    ) -> None:
        """``profile``: the name of a first profiled phase, py-spy attached from the
        start (see :meth:`profile`); ``code``: which ``turnkeeper`` runs (:func:`user_env`);
        ``under``: a command the run is started under that runs it as its own process
        (valgrind; not with ``timed``, whose child the controller is)."""
        self._time_file = logs.with_suffix(".time")
        self._out = logs.with_suffix(".out")
        self._err = logs.with_suffix(".err")
        command = [*under, *turnkeeper_command(), "run", *args]
        self.timed = timed and not under and GNU_TIME.exists()
        if self.timed:
            command = [str(GNU_TIME), "-f", TIME_FORMAT, "-o", str(self._time_file), *command]
        self._files: list[IO[bytes]] = [self._out.open("wb"), self._err.open("wb")]
        self.started_at = time.time()
        self._t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            command,
            cwd=root,
            env=user_env(code),
            stdin=subprocess.DEVNULL,
            stdout=self._files[0],
            stderr=self._files[1],
        )
        self.pid = self._controller_pid()
        self.samples: list[ProcSample] = []
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, args=(sample_every_s,), daemon=True)
        self._sampler.start()
        self._logs = logs
        self.profiles: dict[str, Path] = {}
        self._profiler: subprocess.Popen[bytes] | None = None
        if profile is not None:
            self.profile(profile)

    def _controller_pid(self) -> int:
        """The controller's pid: GNU time's child (it forks, then execs turnkeeper)."""
        if not self.timed:
            return self.proc.pid
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            children = _children_of(self.proc.pid)
            if children:
                return children[0]
            time.sleep(0.005)
        raise RuntimeError(f"GNU time (pid {self.proc.pid}) started no controller:\n{self.log()}")

    def _sample(self, every_s: float) -> None:
        while not self._stop.is_set():
            sample = read_proc(self.pid)
            if sample is None:
                return
            self.samples.append(sample)
            self._stop.wait(every_s)

    def profile(self, phase: str) -> None:
        """From now on, profile into the phase ``phase`` (ending the previous phase's
        py-spy, which writes its output on SIGINT). py-spy samples the thread holding
        the GIL (``--gil``), so the samples are where the interpreter's time goes;
        ``--nonblocking``: the controller is never paused. It ends by itself when
        the controller exits."""
        if not PY_SPY.exists():
            raise RuntimeError(f"py-spy is not installed beside {sys.executable}")
        self._end_profile()
        into = self._logs.with_suffix(f".{phase}.pyspy.txt")
        options = ["-f", "raw", "--threads", "--gil", "--nonblocking", "-r", str(PROFILE_RATE_HZ)]
        self._profiler = subprocess.Popen(
            [str(PY_SPY), "record", *options, "-p", str(self.pid), "-o", str(into)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.profiles[phase] = into

    def _end_profile(self) -> None:
        if self._profiler is None:
            return
        if self._profiler.poll() is None:
            self._profiler.send_signal(signal.SIGINT)
        self._profiler.wait(timeout=COMMAND_TIMEOUT_S)
        self._profiler = None

    def running(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the controller (our own child's child, by pid)."""
        if self.running():
            os.kill(self.pid, sig)

    def kill(self) -> float:
        """SIGKILL the controller (by pid); the time.time() it was sent."""
        at = time.time()
        self.signal(signal.SIGKILL)
        return at

    def wait(self, timeout_s: float) -> RunOutcome:
        """Wait for the run to end (SIGKILLed past ``timeout_s``: then it raises)."""
        try:
            returncode = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(timeout=COMMAND_TIMEOUT_S)
            raise RuntimeError(f"turnkeeper run still running after {timeout_s:.0f} s") from None
        finally:
            wall = time.perf_counter() - self._t0
            self._stop.set()
            self._sampler.join(timeout=COMMAND_TIMEOUT_S)
            for f in self._files:
                f.close()
        outcome = RunOutcome(
            returncode=returncode, started_at=self.started_at, wall_s=wall, samples=self.samples
        )
        if self._profiler is not None:
            self._profiler.wait(timeout=COMMAND_TIMEOUT_S)  # it ends with the controller
        outcome.profiles = {k: v for k, v in self.profiles.items() if v.exists()}
        if self.timed and self._time_file.exists():
            parts = self._time_file.read_text().split()[-4:]
            if len(parts) == 4:
                outcome.wall_s, outcome.user_s, outcome.sys_s = map(float, parts[:3])
                outcome.max_rss_kib = int(parts[3])
        outcome.summary = _summary(self._out)
        return outcome

    def log(self) -> str:
        out = self._out.read_text(errors="replace")[-3000:] if self._out.exists() else ""
        err = self._err.read_text(errors="replace")[-3000:] if self._err.exists() else ""
        return f"--- stdout\n{out}\n--- stderr\n{err}"


def started_run(
    project: Project,
    args: list[str],
    logs: Path,
    *,
    profile: bool,
    sessions: int,
    timeout_s: float,
    code: Path | None = None,
) -> RunProcess:
    """``turnkeeper run args`` started in the project; ``profile``: under py-spy, its
    steady turns in the phase ``steady`` (:func:`profile_phases`, which this waits for)."""
    run = RunProcess(
        project.root, args, logs, profile="first_round" if profile else None, code=code
    )
    if profile:
        profile_phases(run, project.database, sessions, timeout_s)
    return run


def profile_phases(run: RunProcess, database: Path, sessions: int, timeout_s: float) -> None:
    """Profile ``run`` in two phases: ``first_round`` from its start (it must have been
    started with ``profile="first_round"``) and ``steady`` from the moment every one of
    its ``sessions`` sessions has begun its second turn of this run (the steady
    window's start)."""
    deadline = time.monotonic() + timeout_s
    while run.running() and time.monotonic() < deadline:
        log = read_turns(database)
        began = [sum(t.accepted >= run.started_at for t in ts) for ts in log.values()]
        if len(began) >= sessions and min(began) >= 2:
            run.profile("steady")
            return
        time.sleep(0.05)


def _summary(out: Path) -> dict[str, Any]:
    """``run --json``'s summary: its last line, if the run got as far as printing it."""
    lines = out.read_text(errors="replace").splitlines()
    try:
        last = json.loads(lines[-1]) if lines else {}
    except ValueError:  # a run killed mid-line
        return {}
    return last if isinstance(last, dict) and "turns" in last else {}


def finished(outcome: RunOutcome, run: RunProcess, turns: int) -> RunOutcome:
    """``outcome`` if the run exited 0 having run ``turns`` turns; else raise with its log."""
    ran = outcome.summary.get("turns")
    if outcome.returncode != 0 or ran != turns:
        raise RuntimeError(
            f"turnkeeper run exited {outcome.returncode} after {ran} of {turns} turns\n{run.log()}"
        )
    return outcome
