"""The turn-files measurement (benchmarks/turn_files.py) runs one real turn and reports
the turnkeeper files it executed: checked here on its ``--json`` output, in a
subprocess, against the files on disk. No figure is hard-coded: they change with the
code, only their consistency is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pydantic import TypeAdapter

from benchmarks.turn_files import SUBSET, Measurement, Window

ROOT = Path(__file__).resolve().parents[2]
# The turn's driver and its commits must run in any turn; steps.py is the turn's
# declaration, read by people and tests, so it need not run.
REQUIRED = ("turnkeeper/runtime/turn/driver.py", "turnkeeper/runtime/turn/commits.py")


def _run(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.turn_files", "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _check_window(window: Window, package: Path) -> set[str]:
    paths = {f.path for f in window.file_list}
    assert set(REQUIRED) <= paths
    assert window.files == len(window.file_list) > 0
    assert window.lines == sum(f.lines for f in window.file_list) > 0
    assert window.functions == sum(f.functions for f in window.file_list) > 0
    for figure in window.file_list:
        path = package.parent / figure.path
        assert path.is_file(), figure.path
        assert figure.lines == len(path.read_bytes().splitlines()), figure.path
    inside = [
        f for f in window.file_list if f.path.startswith(tuple(f"turnkeeper/{s}/" for s in SUBSET))
    ]
    assert window.subset == {
        "files": len(inside),
        "lines": sum(f.lines for f in inside),
        "functions": sum(f.functions for f in inside),
    }
    assert 0 < window.subset["files"] <= window.files
    return paths


def _check(measured: Measurement) -> None:
    package = Path(measured.package)
    assert package == ROOT / "turnkeeper"
    assert measured.threads_traced >= 1
    turn = _check_window(measured.turn, package)
    run = _check_window(measured.run, package)
    # The turn is part of the run: what it ran, the run ran.
    assert turn <= run
    assert measured.turn.functions <= measured.run.functions


def test_one_turn_reports_the_files_it_ran() -> None:
    _check(TypeAdapter(Measurement).validate_json(_run()))


def test_before_measures_the_given_package_in_a_child() -> None:
    """``--before`` pointed at this checkout measures it again in a child process."""
    both = json.loads(_run("--before", str(ROOT)))
    assert set(both) == {"before", "now"}
    for name in ("before", "now"):
        _check(TypeAdapter(Measurement).validate_python(both[name]))
