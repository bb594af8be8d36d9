"""What the benchmarks share: a scratch directory on the project's disk, the machine's
description, timing helpers, a commit counter, a project driven turn by turn, and the
reporting of results (targets, the machine, JSON or tables)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

from benchmarks.noop_host import NoopHost
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import NextTurn, plan_next_turn
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.turn.planning import goal_view
from turnkeeper.store import SqlEventStore

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Long enough that no lease expires during a benchmark; the driver renews while a host runs.
LEASE_SECONDS = 7 * 24 * 3600.0

Say = Callable[[str], None]
Result = TypeVar("Result")
Settings = TypeVar("Settings")


def add_columns(table: Table, first: str, *numbers: str) -> None:
    """A result table's columns: a label, then figures aligned right."""
    table.add_column(first)
    for name in numbers:
        table.add_column(name, justify="right")


def table_console() -> Console:
    """Where the result tables go: stdout, wide enough for them when it is not a terminal."""
    return Console(width=None if sys.stdout.isatty() else 160)


def progress_printer(to_stderr: bool) -> Say:
    """Progress lines; on stderr when stdout carries JSON."""
    console = Console(stderr=to_stderr)
    return lambda line: console.print(line, highlight=False)


@contextmanager
def scratch_dir(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A temp dir under ``.cache/`` — the project's disk, never tmpfs."""
    cache = PROJECT_ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=cache))
    try:
        yield directory
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)


def run_in_directory(directory: Path | None, prefix: str, body: Callable[[Path], Result]) -> Result:
    """``body(directory)``; without a directory, ``body`` in a scratch dir of its own
    (see :func:`scratch_dir`), removed after."""
    if directory is not None:
        return body(directory)
    with scratch_dir(prefix) as work:
        return body(work)


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[name] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mount_of(path: Path) -> tuple[str, str]:
    """(device, filesystem type) of the mount holding ``path``: the longest mount point
    in /proc/mounts that contains it; ``unknown`` for what cannot be read."""
    best, found = "", ("unknown", "unknown")
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return found
    target = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) < 3 or len(parts[1]) < len(best):
            continue
        if target == parts[1] or target.startswith(parts[1].rstrip("/") + "/"):
            best, found = parts[1], (parts[0], parts[2])
    return found


def filesystem_of(path: Path) -> str:
    """The filesystem type holding ``path`` (``ext4``, ``tmpfs``, ...)."""
    return _mount_of(path)[1]


def code_version() -> str:
    """The commit measured, and whether turnkeeper/ had uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "turnkeeper"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+uncommitted changes" if dirty else head


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def machine(directory: Path) -> dict[str, Any]:
    """What the figures came from: CPUs, memory, the disk and how loaded the box was."""
    mem = _meminfo()
    usage = shutil.disk_usage(directory)
    return {
        "host": socket.gethostname(),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": _cpu_model(),
        "memory_total": gib(mem.get("MemTotal", 0)),
        "memory_available": gib(mem.get("MemAvailable", 0)),
        "disk_device": _mount_of(directory)[0],
        "disk_filesystem": filesystem_of(directory),
        "disk_size": gib(usage.total),
        "disk_free": gib(usage.free),
        "tmp_filesystem": filesystem_of(Path("/tmp")),
        "directory": str(directory),
        "loadavg": load_average(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "code": code_version(),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages now: how busy the machine was."""
    return [round(x, 2) for x in os.getloadavg()]


def describe_machine(info: dict[str, Any]) -> str:
    load = ", ".join(f"{x:.2f}" for x in info["loadavg"])
    return (
        f"{info['nproc']} CPUs ({info['cpu']}), {info['memory_total']} RAM "
        f"({info['memory_available']} available), disk {info['disk_device']} "
        f"{info['disk_filesystem']} {info['disk_size']} ({info['disk_free']} free), "
        f"load average {load}, Python {info['python']}, code {info.get('code', '?')}"
    )


def announce_machine(work: Path, say: Say) -> dict[str, Any]:
    """The machine's description (see :func:`machine`), said first as progress lines."""
    info = machine(work)
    say(f"working in {work} ({info['disk_filesystem']} on {info['disk_device']})")
    say(f"machine: {describe_machine(info)}")
    return info


def timed(op: Callable[[], Any], n: int) -> list[float]:
    """Run ``op`` ``n`` times; each run's wall time in microseconds."""
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        op()
        out.append((clock() - t0) / 1000)
    return out


def count_events(db: Path) -> int:
    """The events in a store's SQLite file, read with plain ``sqlite3``."""
    conn = sqlite3.connect(db)
    try:
        (n,) = conn.execute("SELECT COUNT(*) FROM events").fetchone()
        return int(n)
    finally:
        conn.close()


def git_workspace(path: Path) -> Path:
    """A git repository with one commit: what a session's workspace looks like."""
    path.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }
    (path / "README").write_text("benchmark workspace\n")
    for args in (["init", "-q"], ["add", "README"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)
    return path


@dataclass
class CommitCounter:
    """Counts the store writer's commits, split by whether they waited for the disk.

    Wraps the writer's batch commit (a group commit is one commit however many
    appends it carries). Falls back to the writer's public ``commits`` counter,
    durable and cheap together, if the private hook is not there.
    """

    store: SqlEventStore
    durable: int = 0
    cheap: int = 0
    exact: bool = False
    _base: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        writer = self.store.writer
        original = getattr(writer, "_commit_batch", None)
        if original is None:
            self._base = writer.commits
            return
        self.exact = True

        def counted(batch: list[Any]) -> None:
            if any(getattr(r, "durable", True) for r in batch):
                self.durable += 1
            else:
                self.cheap += 1
            original(batch)

        writer._commit_batch = counted  # type: ignore[method-assign]

    def reset(self) -> None:
        self.durable = self.cheap = 0
        self._base = self.store.writer.commits

    @property
    def total(self) -> int:
        if self.exact:
            return self.durable + self.cheap
        return self.store.writer.commits - self._base


class TurnLoop:
    """One goal with one todo that never finishes, one session on it, driven a turn at a
    time exactly as the controller's loop does: load the session, plan the next turn
    from the goal, run it through the turn driver."""

    def __init__(
        self,
        store: SqlEventStore,
        workspace: Path,
        name: str,
        host: NoopHost | None = None,
        *,
        owner: str | None = None,
        goal_id: str | None = None,
        todo_id: str | None = None,
        session_id: str | None = None,
        tools_dir: Path | None = None,
    ) -> None:
        """``tools_dir``: open each turn's tool channel there, as ``run`` does for every
        turn (None: no channel, the turn of an embedder that gives its agents no tools)."""
        self.store = store
        self.host = host or NoopHost()
        config = ControllerConfig(
            lease_seconds=LEASE_SECONDS, host_loader=self.host.loader, tools_dir=tools_dir
        )
        self.controller = Controller(store, config, owner=owner)
        goals = self.controller.goals
        self.goal_id = goal_id or f"goal-{name}"
        goals.create(CreateGoal(goal_id=self.goal_id, title=f"benchmark goal {name}"))
        goals.submit(
            self.goal_id,
            AddTodo(todo=TodoSpec(todo_id=todo_id or f"todo-{name}", title="never done")),
        )
        session = self.controller.sessions.create(
            self.goal_id, workspace, self.host.kind, session_id=session_id
        )
        self.session_id = session.session_id
        self.controller.acquire(self.session_id)
        self.turns = 0

    def step(self) -> None:
        """One controller-loop turn: load, plan, run. Raises if it did not succeed."""
        ctl, sid = self.controller, self.session_id
        session = ctl.sessions.load(sid)
        now = ctl.sessions.now()
        plan = plan_next_turn(
            session, goal_view(ctl.goals.load(session.goal_id), session, now), now
        )
        if not isinstance(plan, NextTurn):
            raise RuntimeError(f"session {sid} stopped: {plan}")
        result = ctl.driver.run_turn(session, plan)
        if not result.succeeded:
            raise RuntimeError(f"turn {result.turn_id} failed: {result.outcome}")
        self.turns += 1

    def release(self) -> None:
        self.controller.release(self.session_id)


# -- profiling -------------------------------------------------------------------------

# Where a turn's time goes, by the file a function lives in (first match wins).
PROFILE_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "git subprocess (workspace probe)",
        (
            "subprocess.py",
            "runtime/workspaces/workspace.py",
            "selectors",
            "_posixsubprocess",
            "select.poll",
            "posix.waitpid",
            "posix.read",
        ),
    ),
    ("SQLAlchemy (read path)", ("/sqlalchemy/",)),
    ("pydantic (models, JSON)", ("/pydantic/", "pydantic_core", "/json/")),
    ("sqlite3 C calls (execute, fsync'd commit)", ("sqlite3.Cursor", "sqlite3.Connection")),
    ("threads and locks", ("threading.py", "_thread.", "lock' objects")),
    ("turnkeeper store (python)", ("turnkeeper/store/",)),
    ("turnkeeper kernel (python)", ("turnkeeper/kernel/",)),
    ("turnkeeper runtime (python)", ("turnkeeper/runtime/",)),
    (
        "hosts, /proc scans",
        (
            "turnkeeper/hosts/",
            "benchmarks/noop_host.py",
            "posix.listdir",
            "io.open",
            "_io.",
            "pathlib.py",
        ),
    ),
)


def profile_ops(op: Callable[[], Any], n: int, top: int = 40, per: int = 1) -> dict[str, Any]:
    """cProfile ``n`` runs of ``op``: self time per category and the top functions by
    cumulative time, in microseconds per unit (``n * per`` units: turns, sessions)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    for _ in range(n):
        op()
    profiler.disable()
    units = n * per
    wall = (time.perf_counter() - t0) * 1e6 / units
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    categories: dict[str, float] = {name: 0.0 for name, _ in PROFILE_CATEGORIES}
    categories["other"] = 0.0
    rows = []
    for (filename, line, func), (_cc, ncalls, tottime, cumtime, _callers) in raw.items():
        where = f"{filename}:{line}({func})"
        for name, needles in PROFILE_CATEGORIES:
            if any(needle in where for needle in needles):
                categories[name] += tottime
                break
        else:
            categories["other"] += tottime
        short = filename.replace(str(PROJECT_ROOT) + "/", "")
        if "site-packages/" in short:
            short = short.split("site-packages/", 1)[1]
        rows.append((cumtime, tottime, ncalls, f"{short}:{line}({func})"))
    rows.sort(reverse=True)
    return {
        "ops": units,
        "wall_us_per_op": wall,
        "self_us_per_op": {k: v * 1e6 / units for k, v in categories.items()},
        "top_cumulative": [
            {
                "function": name,
                "calls_per_op": calls / units,
                "cum_us_per_op": cum * 1e6 / units,
                "self_us_per_op": tot * 1e6 / units,
            }
            for cum, tot, calls, name in rows[:top]
        ],
    }


def render_profile(profile: dict[str, Any], console: Console, unit: str) -> None:
    table = Table(title=f"where the time goes per {unit} (cProfile, {profile['ops']} of them)")
    table.add_column("category (self time)")
    table.add_column(f"us per {unit}", justify="right")
    for name, us in sorted(profile["self_us_per_op"].items(), key=lambda kv: -kv[1]):
        table.add_row(name, f"{us:,.0f}")
    table.add_row("wall time under the profiler", f"{profile['wall_us_per_op']:,.0f}")
    console.print(table)
    top = Table(title="top functions by cumulative time")
    top.add_column("function")
    top.add_column("calls each", justify="right")
    top.add_column("cum us each", justify="right")
    for row in profile["top_cumulative"]:
        top.add_row(row["function"], f"{row['calls_per_op']:.1f}", f"{row['cum_us_per_op']:,.0f}")
    console.print(top)


# -- reporting -------------------------------------------------------------------------


def judged(
    value: float, *, at_most: float | None = None, at_least: float | None = None, unit: str = ""
) -> Any:
    """A target as the reports carry it: what was wanted, what was measured, met or not."""
    if at_most is not None:
        wanted = f"<= {at_most:g}{unit}"
        return {"target": wanted, "value": float(value), "met": value <= at_most}
    assert at_least is not None
    wanted = f">= {at_least:g}{unit}"
    return {"target": wanted, "value": float(value), "met": value >= at_least}


def render_targets(targets: dict[str, dict[str, Any]], console: Console) -> None:
    """One line per target: what was wanted, what was measured, met or missed."""
    for name, target in targets.items():
        mark = "[green]met[/green]" if target["met"] else "[red]missed[/red]"
        console.print(f"target {name}: {target['target']}: {target['value']:.3f} {mark}")


def render_machine(info: dict[str, Any], console: Console) -> None:
    """The machine the figures came from, and how loaded it was when they were done."""
    console.print(f"machine: {describe_machine(info)}")
    console.print(f"load average at the end: {info.get('loadavg_end')}")


def benchmark_arguments(doc: str | None, quick: str) -> argparse.ArgumentParser:
    """A benchmark's command line: ``--quick`` (``quick`` says how long it runs),
    ``--smoke`` and ``--json``; the benchmark adds its own options."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--smoke", action="store_true", help="seconds: for the tests")
    parser.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    return parser


def chosen_settings(
    args: argparse.Namespace, full: Settings, quick: Settings, smoke: Settings
) -> Settings:
    """The settings ``--smoke`` or ``--quick`` picked, else the full run's."""
    return smoke if args.smoke else quick if args.quick else full


def run_and_print(
    args: argparse.Namespace,
    settings: Settings,
    run: Callable[[Settings, Say], Any],
    render: Callable[[Any, Console], None],
) -> int:
    """Run the benchmark (progress on stderr under ``--json``) and print its results."""
    print_results(run(settings, progress_printer(to_stderr=args.json)), args.json, render)
    return 0


def print_results(results: Any, as_json: bool, render: Callable[[Any, Console], None]) -> None:
    """A benchmark's results on stdout: as JSON (its progress went to stderr), or as
    the tables ``render`` prints."""
    if as_json:
        sys.stdout.write(json.dumps(asdict(results), indent=2) + "\n")
    else:
        render(results, table_console())
