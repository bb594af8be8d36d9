"""How much of turnkeeper one turn executes: the source files, their lines, the functions.

Run ``python -m benchmarks.turn_files`` (``--json`` for machine-readable output,
``--before DIR`` to measure an older ``turnkeeper/`` package held in ``DIR`` too and
print both side by side). Made, for example, with::

    mkdir /tmp/turn-files-before
    git archive c4470c5 | tar -x -C /tmp/turn-files-before

The scenario is one real turn through the public API only, so that it runs on older
code as well: ``Project.init`` in a fresh git repository (a temp dir on the project's
disk, under ``.cache/``), ``goals.add``, ``todos.add``, ``sessions.create`` with the
``scripted`` host (a real agent subprocess) whose turn writes a file and marks its
todo done, then ``run(max_turns=1)``. The tool checks that the file was written and
the todo is done, else it fails: a turn that broke early would touch less code.

Only the run is traced, not the setup before it: ``sys.setprofile`` and
``threading.setprofile`` (every thread the run starts) record the code objects
called. A file counts when any of its code ran; its lines are its physical lines.
Two windows are reported:

* ``run``: the whole ``Project.run`` (recovery, the controller, the turn, shutdown);
* ``turn``: while ``TurnDriver.run_turn`` is on a stack — the turn itself, and
  whatever other threads of the run did meanwhile (its lease keeper, the host's
  output readers).

Each window also gives the subset under ``runtime/turn``, ``kernel``, ``store`` and
``hosts`` (the turn's own code, its two kernels' and its storage and host layers).
"Functions" are the distinct named functions and methods called (module bodies,
lambdas and comprehensions are left out); "import-only files" are files of which
nothing but the module body ran during the window (a module imported lazily then).

The agent's own process is not traced: the figures are the control plane's.
This module imports nothing but the standard library, pydantic and ``turnkeeper`` (from
whichever ``turnkeeper`` is first on the path), so it runs against older code as is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

if TYPE_CHECKING:
    from turnkeeper.json_types import JsonDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SUBSET = ("runtime/turn", "kernel", "store", "hosts")
TODO_TITLE = "Write the note"
NOTE = "note.md"
SCRIPT: JsonDict = {
    "turns": [
        {
            "match": {"todo": TODO_TITLE},
            "steps": [
                {"op": "write", "path": NOTE, "content": "the note\n"},
                {"op": "message", "text": f"wrote {NOTE}"},
            ],
            "result": {"summary": f"wrote {NOTE}", "todo_done": True},
        }
    ]
}
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "turn-files",
    "GIT_AUTHOR_EMAIL": "turn-files@example.invalid",
    "GIT_COMMITTER_NAME": "turn-files",
    "GIT_COMMITTER_EMAIL": "turn-files@example.invalid",
}


@dataclass
class FileFigure:
    path: str  # relative to the directory holding ``turnkeeper/``
    lines: int
    functions: int


@dataclass
class Window:
    files: int = 0
    lines: int = 0
    functions: int = 0
    import_only_files: int = 0
    subset: dict[str, int] = field(default_factory=dict)
    file_list: list[FileFigure] = field(default_factory=list)


@dataclass
class Measurement:
    package: str
    python: str
    threads_traced: int
    turn: Window
    run: Window


class CallRecorder:
    """The profile function: the code objects called, all of the run and in the turn.

    ``sys.setprofile`` reports each Python call (and each resumption of a generator);
    only ``call`` events are kept, plus the ``return`` of the turn's own entry point,
    which closes the turn's window. Set-adds only, so the run stays cheap to trace.
    """

    def __init__(self, turn_entry: CodeType) -> None:
        self.turn_entry = turn_entry
        self.active = False
        self.in_turn = 0
        self.run_codes: set[CodeType] = set()
        self.turn_codes: set[CodeType] = set()
        self.threads: set[int] = set()

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.active:
            return
        code = frame.f_code
        if event == "call":
            if code is self.turn_entry:
                self.in_turn += 1
            self.run_codes.add(code)
            self.threads.add(threading.get_ident())
            if self.in_turn:
                self.turn_codes.add(code)
        elif event == "return" and code is self.turn_entry:
            self.in_turn -= 1


@contextmanager
def traced(recorder: CallRecorder) -> Iterator[None]:
    """Every thread started inside the block, and this one, report to ``recorder``."""
    previous = sys.getprofile()
    recorder.active = True
    threading.setprofile(recorder)
    sys.setprofile(recorder)
    try:
        yield
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)
        # Threads of the run still alive (daemons) keep the function: it records no more.
        recorder.active = False


def _physical_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def window(codes: set[CodeType], package: Path) -> Window:
    """The files of ``package`` that ``codes`` belong to, with their lines and functions."""
    functions: dict[Path, set[tuple[str, int]]] = {}
    bodies: set[Path] = set()
    root = package.resolve()
    for code in codes:
        path = Path(code.co_filename)
        if not path.is_absolute() or not path.resolve().is_relative_to(root):
            continue
        path = path.resolve()
        if code.co_name == "<module>":
            bodies.add(path)
            continue
        named = functions.setdefault(path, set())
        if not code.co_name.startswith("<"):
            named.add((code.co_qualname, code.co_firstlineno))
    result = Window()
    for path in sorted(bodies | set(functions)):
        relative = path.relative_to(root.parent).as_posix()
        figure = FileFigure(relative, _physical_lines(path), len(functions.get(path, ())))
        result.file_list.append(figure)
        if path not in functions:
            result.import_only_files += 1
    result.files = len(result.file_list)
    result.lines = sum(f.lines for f in result.file_list)
    result.functions = sum(f.functions for f in result.file_list)
    prefixes = tuple(f"turnkeeper/{part}/" for part in SUBSET)
    inside = [f for f in result.file_list if f.path.startswith(prefixes)]
    result.subset = {
        "files": len(inside),
        "lines": sum(f.lines for f in inside),
        "functions": sum(f.functions for f in inside),
    }
    return result


def _git_repository(path: Path) -> None:
    path.mkdir()
    (path / "README").write_text("a project measured by benchmarks/turn_files.py\n")
    env = {**os.environ, **_GIT_ENV}
    for args in (["init", "-q"], ["add", "README"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)


def measure(directory: Path) -> Measurement:
    """Set up a project in ``directory``, then run and trace its one turn."""
    import turnkeeper
    from turnkeeper import Project
    from turnkeeper.runtime.turn.driver import TurnDriver

    root = directory / "project"
    _git_repository(root)
    package = Path(turnkeeper.__file__).resolve().parent
    recorder = CallRecorder(TurnDriver.run_turn.__code__)
    with Project.init(root) as project:
        goal_id = project.goals.add(TODO_TITLE).goal.id
        todo = project.todos.add(goal_id, TODO_TITLE, todo_id="note").id
        project.sessions.create(goal_id, host="scripted", host_config={"script": SCRIPT})
        with traced(recorder):
            project.run(max_turns=1)
        # The turn must have done its work, else the figures are a broken turn's.
        status = str(project.todos.show(todo).status.value)
    if status != "done" or not (root / NOTE).is_file():
        raise SystemExit(f"the measured turn did not finish its work: todo {status}")
    if not recorder.turn_codes:
        raise SystemExit("TurnDriver.run_turn never ran during the run")
    return Measurement(
        package=str(package),
        python=sys.version.split()[0],
        threads_traced=len(recorder.threads),
        turn=window(recorder.turn_codes, package),
        run=window(recorder.run_codes, package),
    )


@contextmanager
def scratch_dir() -> Iterator[Path]:
    """A temp dir under ``.cache/``: the project's disk, never tmpfs."""
    cache = PROJECT_ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="turn-files-", dir=cache))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def measure_here() -> Measurement:
    with scratch_dir() as directory:
        return measure(directory)


def measure_in(before: Path) -> Measurement:
    """The same measurement in a child process whose ``turnkeeper`` is ``before``'s."""
    if not (before / "turnkeeper" / "__init__.py").is_file():
        raise SystemExit(f"{before} holds no turnkeeper/ package")
    # Run this file by path from a neutral directory, so neither this checkout's
    # ``turnkeeper`` nor ``before``'s ``benchmarks`` shadows what is measured.
    code = (
        "import runpy, sys; sys.argv = [sys.argv[1], '--json']; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    with scratch_dir() as neutral:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(Path(__file__).resolve())],
            cwd=neutral,
            env={**os.environ, "PYTHONPATH": str(before.resolve())},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if proc.returncode != 0:
        raise SystemExit(f"measuring {before} failed:\n{proc.stderr[-3000:]}")
    result = TypeAdapter(Measurement).validate_json(proc.stdout)
    if not Path(result.package).is_relative_to(before.resolve()):
        raise SystemExit(f"the child measured {result.package}, not the package in {before}")
    return result


def _row(label: str, win: Window) -> list[str]:
    subset = win.subset
    return [
        label,
        str(win.files),
        str(win.lines),
        str(win.functions),
        str(win.import_only_files),
        f"{subset['files']} / {subset['lines']} / {subset['functions']}",
    ]


def render(results: dict[str, Measurement]) -> str:
    """A plain table: one row per window and measured package."""
    head = ["", "files", "lines", "functions", "import-only", "turn/kernel/store/hosts"]
    rows = [head]
    for label, measured in results.items():
        rows.append(_row(f"TurnDriver.run_turn ({label})", measured.turn))
    for label, measured in results.items():
        rows.append(_row(f"Project.run ({label})", measured.run))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.append(
        "last column: files / lines / functions under turnkeeper/{" + ",".join(SUBSET) + "}"
    )
    for label, measured in results.items():
        lines.append(f"{label}: {measured.package} (Python {measured.python})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--before", type=Path, help="a directory holding an older turnkeeper/")
    parser.add_argument("--json", action="store_true", help="print JSON, with the file lists")
    args = parser.parse_args(argv)
    now = measure_here()
    results = (
        {"now": now} if args.before is None else {"before": measure_in(args.before), "now": now}
    )
    if args.json:
        # One package: its measurement; with --before: {"before": ..., "now": ...}.
        out = asdict(now) if args.before is None else {k: asdict(v) for k, v in results.items()}
        print(json.dumps(out, indent=2))
    else:
        print(render(results))


if __name__ == "__main__":
    main()
