"""Smoke test of the snapshot benchmark (benchmarks/snapshot_bench.py): it runs at its
``--smoke`` size in a subprocess and prints JSON with the keys its README relies on.
No timing is asserted: only that both ways still run, and that the in-process way
started no git process while git's way did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_snapshot_benchmark_runs_both_ways() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.snapshot_bench", "--smoke", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert {"machine", "settings", "wall_ms", "cpu_ms", "children_cpu_ms", "targets"} <= set(res)
    for figures in (res["wall_ms"], res["cpu_ms"], res["children_cpu_ms"]):
        assert set(figures) == {"in_process", "git_processes"}
    assert res["children_cpu_ms"]["in_process"] == 0.0  # no process started
    assert res["children_cpu_ms"]["git_processes"] > 0.0
    target = res["targets"]["snapshot_cpu_ms_with_children"]
    assert set(target) == {"target", "value", "met"} and isinstance(target["met"], bool)
