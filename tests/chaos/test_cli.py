"""``turnkeeper chaos`` as a user runs it: a subprocess, JSON out, exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _chaos(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "chaos", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_chaos_json_reports_one_crash_point(tmp_path: Path) -> None:
    done = _chaos(
        tmp_path,
        "--mode",
        "enumerated",
        "--only",
        "enum-completed",
        "--seed",
        "7",
        "--dir",
        str(tmp_path / "runs"),
        "--keep",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["seed"] == 7
    assert report["crash_points"] == {"all": ["completed"], "hits": {"completed": 1}, "missed": []}
    total = report["rows"]["total"]
    assert (total["scenarios"], total["kills"], total["violations"]) == (1, 1, 0)
    (scenario,) = report["scenarios"]
    assert scenario["name"] == "enum-completed"
    assert Path(scenario["dir"]).is_dir()  # --keep
    assert "enum-completed: ok" in done.stderr  # progress, one line per scenario


def test_chaos_rejects_an_unknown_mode(tmp_path: Path) -> None:
    done = _chaos(tmp_path, "--mode", "nonsense")
    assert done.returncode == 2
    assert "unknown mode" in done.stderr
