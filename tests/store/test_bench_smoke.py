"""The benchmark runs end to end (``--quick``); no timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.append_bench", "--quick", *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_benchmark_quick_prints_the_table() -> None:
    proc = _run()
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "turnkeeper append benchmark" in out
    labels = ("(a) bare", "(b) SqlEventStore.append", "(b2) SqlEventStore.append_many")
    for label in (*labels, "16 session(s)", "2 processes"):
        assert label in out
    assert "round 1/" in out  # progress was printed while it ran


def test_benchmark_json() -> None:
    proc = _run("--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    keys = {"bare_commit_us", "append_us", "ratio", "append_many_us", "many_ratio"}
    assert keys | {"thread_rates", "process_rate"} <= set(data)
