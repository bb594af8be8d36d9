"""Command benchmark: how long a user waits for ``--help``, ``status`` and ``session list``.

Run ``python -m benchmarks.commands_bench`` (``--quick``: fewer rounds; ``--smoke``: a
tiny project, for the tests; ``--json`` for machine-readable output; ``--before COMMIT``
or ``--before DIR`` to time the same commands on that commit's code, or on the
``turnkeeper/`` package in DIR, too, interleaved with this code's).
Everything runs on the project's own disk (a temp dir under ``.cache/``), never tmpfs.

* A project of 1,000 sessions and ~100,000 events on 4 goals of 50 todos each is built
  through the store API (:mod:`benchmarks.commands_project`): real events, checksums,
  projections and index entries, cloned from sessions recorded through the real runtime.
* Each command is the installed ``turnkeeper`` executable in a child process (for
  ``--before`` code older than its ``main`` entry point, a launcher of that code's own
  entry point, ``cli.main:app``), its working directory the project, its stdout a pipe
  (``COLUMNS`` fixed, so the tables are laid out the same every run). Timed: the
  child's whole wall time, Python start-up and imports included — what the user waits
  for.
* Each version runs through ``PYTHONPATH``, checked by asking it where it imports
  ``turnkeeper`` from: "after" is the package this benchmark imported (the checkout,
  or the copy it is run from), "before" that commit's ``turnkeeper/``, exported with
  ``git archive`` (nothing in the checkout changes). Both get one untimed warm-up run
  per command (it fills their bytecode caches, kept in the scratch dir, and its output
  is compared), then the rounds, the order of the versions alternating every round.
  Code that cannot open the project (a schema migration it does not know) is skipped,
  and the results say why.

Reported: the median and fastest wall time per command and version, the speed-up, and
whether both versions printed the same thing (JSON compared as parsed values).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import turnkeeper
from benchmarks._common import (
    PROJECT_ROOT,
    Say,
    add_columns,
    announce_machine,
    code_version,
    load_average,
    print_results,
    progress_printer,
    render_machine,
    render_targets,
    run_in_directory,
)
from benchmarks.commands_project import ProjectShape, build_project

COMMANDS: dict[str, tuple[str, ...]] = {
    "help": ("--help",),
    "status": ("status",),
    "status_json": ("status", "--json"),
    "session_list_json": ("session", "list", "--json"),
}
JSON_COMMANDS = frozenset({"status_json", "session_list_json"})
TARGET_SECONDS = {"help": 0.15, "status": 0.3}
COMMAND_TIMEOUT_S = 120.0
AFTER, BEFORE = "after", "before"


@dataclass
class Settings:
    shape: ProjectShape
    rounds: int
    columns: int = 120
    before: str | None = None  # a commit whose code is timed beside this one


FULL = Settings(
    shape=ProjectShape(
        sessions=1_000, mid_work=100, goals=4, todos_per_goal=50, target_events=100_000
    ),
    rounds=9,
)
QUICK = replace(FULL, rounds=3)
SMOKE = Settings(
    shape=ProjectShape(
        sessions=12, mid_work=2, goals=2, todos_per_goal=3, target_events=300, mid_work_turns=2
    ),
    rounds=1,
)


@dataclass
class Results:
    machine: dict[str, Any]
    settings: dict[str, Any]
    project: dict[str, Any]
    versions: dict[str, str]
    # version -> command -> {"median_s", "min_s", "runs_s", "output_bytes"}
    timings: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    same_output: dict[str, bool] = field(default_factory=dict)  # with --before only
    speedup: dict[str, float] = field(default_factory=dict)  # before median / after median
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def turnkeeper_executable() -> Path:
    """The ``turnkeeper`` installed next to this Python (the venv's), else on PATH."""
    beside = Path(sys.executable).with_name("turnkeeper")
    if beside.exists():
        return beside
    found = shutil.which("turnkeeper")
    if found is None:
        raise RuntimeError("no turnkeeper executable: install the project (pip install -e .)")
    return Path(found)


def export_code(commit: str, into: Path) -> Path:
    """``commit``'s ``turnkeeper/`` package under ``into``, through ``git archive``."""
    archive = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "archive", "--format=tar", commit, "turnkeeper"],
        capture_output=True,
        check=True,
        timeout=COMMAND_TIMEOUT_S,
    ).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def this_code() -> Path:
    """The directory holding the ``turnkeeper`` package this benchmark imported: the code
    measured as "after" (the checkout, or any copy the benchmark is run from)."""
    return Path(turnkeeper.__file__).resolve().parent.parent


def child_env(work: Path, version: str, code: Path, columns: int) -> dict[str, str]:
    """A user's environment: bytecode is cached (in the scratch dir, per version), the
    table width is fixed, and ``code`` holds the ``turnkeeper`` package that runs."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.pop("TURNKEEPER_DIR", None)
    env.pop("TURNKEEPER_DATABASE_URL", None)
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache" / version)
    env["COLUMNS"] = str(columns)
    env["PYTHONPATH"] = str(code)
    return env


def code_of(before: str, work: Path) -> Path:
    """``--before``: a directory holding a ``turnkeeper/`` package, or a commit to export."""
    given = Path(before)
    if (given / "turnkeeper" / "__init__.py").is_file():
        return given.resolve()
    return export_code(before, work / "before-code")


def imported_from(env: dict[str, str], cwd: Path) -> Path:
    """Where ``turnkeeper`` is imported from under ``env``: proof of which code runs."""
    proc = subprocess.run(
        [sys.executable, "-c", "import turnkeeper; print(turnkeeper.__file__)"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    return Path(proc.stdout.strip()).parent


class CommandFailedError(RuntimeError):
    """A timed command exited non-zero: its figures would mean nothing."""


def command_line(env: dict[str, str]) -> list[str]:
    """What runs ``turnkeeper`` for the code in ``env``'s PYTHONPATH: the installed
    executable when that code defines the same entry point (``cli.main:main``), else a
    launcher calling the entry point that code's own ``pyproject.toml`` installed
    (``cli.main:app`` before ``main`` existed) — each version as its users start it."""
    main_py = Path(env["PYTHONPATH"]) / "turnkeeper" / "cli" / "main.py"
    if "\ndef main(" in main_py.read_text():
        return [str(turnkeeper_executable())]
    launcher = (
        "import sys; sys.argv[0] = 'turnkeeper'; "
        "from turnkeeper.cli.main import app; sys.exit(app())"
    )
    return [sys.executable, "-c", launcher]


def run_command(args: tuple[str, ...], cwd: Path, env: dict[str, str]) -> tuple[float, bytes]:
    """One command in a child process: its wall time and its stdout. Fails loudly."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*command_line(env), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        check=False,
        timeout=COMMAND_TIMEOUT_S,
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise CommandFailedError(
            f"turnkeeper {' '.join(args)} exited {proc.returncode}: "
            f"{proc.stderr.decode(errors='replace').strip()[-2000:]}"
        )
    return elapsed, proc.stdout


def _same(command: str, a: bytes, b: bytes) -> bool:
    if command in JSON_COMMANDS:
        return bool(json.loads(a) == json.loads(b))
    return a == b


def run(settings: Settings, say: Say, directory: Path | None = None) -> Results:
    def body(work: Path) -> Results:
        info = announce_machine(work, say)
        say(f"building {settings.shape.sessions:,} sessions ...")
        built = build_project(work, settings.shape, say)
        say(
            f"  {built.events:,} events in {built.sessions:,} sessions on {built.goals} goals, "
            f"{built.db_bytes / 2**20:,.1f} MiB, built in {built.build_s:.1f} s"
        )
        codes = {AFTER: this_code()}
        versions = {AFTER: code_version() if codes[AFTER] == PROJECT_ROOT else str(codes[AFTER])}
        if settings.before is not None:
            codes[BEFORE] = code_of(settings.before, work)
            versions[BEFORE] = settings.before
        envs = {}
        for version, code in codes.items():
            envs[version] = child_env(work, version, code, settings.columns)
            where = imported_from(envs[version], built.root)
            if where != code / "turnkeeper":
                raise RuntimeError(f"{version}: expected {code}/turnkeeper, imported {where}")
        res = Results(
            machine=info,
            settings=asdict(settings),
            project={k: str(v) if isinstance(v, Path) else v for k, v in asdict(built).items()},
            versions=versions,
        )
        if settings.before is None:
            res.skipped[BEFORE] = "no --before COMMIT given"
        outputs: dict[str, dict[str, bytes]] = {}
        for version, env in list(envs.items()):
            say(f"warming up {version} ({versions[version]}) ...")
            try:
                outputs[version] = {
                    name: run_command(args, built.root, env)[1] for name, args in COMMANDS.items()
                }
            except CommandFailedError as failed:
                if version == AFTER:
                    raise
                # Older code may refuse this database (a schema it does not know yet):
                # then there is nothing to compare, and the results say why.
                res.skipped[BEFORE] = f"its code cannot run on this project: {failed}"
                say(f"  before: skipped ({failed})")
                del envs[version]
        runs: dict[str, dict[str, list[float]]] = {v: {c: [] for c in COMMANDS} for v in envs}
        order = list(envs)
        for r in range(settings.rounds):
            for name, args in COMMANDS.items():
                for version in order:
                    runs[version][name].append(run_command(args, built.root, envs[version])[0])
            order.reverse()
            say(f"  round {r + 1}/{settings.rounds}")
        for version in envs:
            res.timings[version] = {
                name: {
                    "median_s": statistics.median(times),
                    "min_s": min(times),
                    "runs_s": times,
                    "output_bytes": len(outputs[version][name]),
                }
                for name, times in runs[version].items()
            }
        if BEFORE in envs:
            for name in COMMANDS:
                res.same_output[name] = _same(name, outputs[BEFORE][name], outputs[AFTER][name])
                res.speedup[name] = (
                    res.timings[BEFORE][name]["median_s"] / res.timings[AFTER][name]["median_s"]
                )
        res.machine["loadavg_end"] = load_average()
        for name, limit in TARGET_SECONDS.items():
            value = res.timings[AFTER][name]["median_s"]
            res.targets[f"{name}_under_{limit}s"] = {
                "target": f"turnkeeper {' '.join(COMMANDS[name])} under {limit} s "
                f"at {built.sessions:,} sessions",
                "value": value,
                "met": value < limit,
            }
        return res

    return run_in_directory(directory, "commands-bench-", body)


def render(res: Results, console: Console) -> None:
    project = res.project
    table = Table(
        title=f"command wall time, {project['sessions']:,} sessions / {project['events']:,} "
        f"events (medians of {res.settings['rounds']} runs, child processes)"
    )
    before = BEFORE in res.timings
    add_columns(
        table,
        "command",
        *(("before", "after", "speed-up", "same output") if before else ("median",)),
        "fastest",
        "stdout",
    )
    for name, args in COMMANDS.items():
        after = res.timings[AFTER][name]
        cells = [f"turnkeeper {' '.join(args)}"]
        if before:
            cells += [
                f"{res.timings[BEFORE][name]['median_s']:.3f} s",
                f"{after['median_s']:.3f} s",
                f"{res.speedup[name]:.2f}x",
                "yes" if res.same_output[name] else "NO",
            ]
        else:
            cells.append(f"{after['median_s']:.3f} s")
        cells += [f"{after['min_s']:.3f} s", f"{after['output_bytes']:,} B"]
        table.add_row(*cells)
    console.print(table)
    versions = ", ".join(f"{k}: {v}" for k, v in res.versions.items())
    console.print(f"code: {versions}; COLUMNS={res.settings['columns']}")
    for why in res.skipped.values():
        console.print(f"before: skipped ({why})")
    render_targets(res.targets, console)
    render_machine(res.machine, console)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: for the tests")
    parser.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    parser.add_argument("--rounds", type=int, default=None, help="timed runs per command")
    parser.add_argument(
        "--before", default=None, help="also time this commit's code (or a DIR holding one)"
    )
    parser.add_argument("--columns", type=int, default=None, help="COLUMNS for the tables")
    args = parser.parse_args(argv)
    settings = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.rounds is not None:
        settings = replace(settings, rounds=args.rounds)
    if args.before is not None:
        settings = replace(settings, before=args.before)
    if args.columns is not None:
        settings = replace(settings, columns=args.columns)
    res = run(settings, progress_printer(to_stderr=args.json))
    print_results(res, args.json, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
