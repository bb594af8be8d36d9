"""``turnkeeper chaos`` as a user runs it: a subprocess, JSON out, exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.usage.import_blocker import VARIABLE
from turnkeeper.cli.chaos import HARNESS_PACKAGE

REPO = Path(__file__).resolve().parents[2]


def _chaos(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")} | (env or {})
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


def test_chaos_without_the_harness_names_what_to_install(tmp_path: Path) -> None:
    """The harness is a package beside turnkeeper: an install without it fails typed."""
    hook = tmp_path / "hook"
    hook.mkdir()
    # Every process of the command starts with the harness's package unimportable.
    (hook / "sitecustomize.py").write_text(
        "from tests.usage.import_blocker import install\n\ninstall()\n"
    )
    blocked = {"PYTHONPATH": f"{hook}:{REPO}", VARIABLE: HARNESS_PACKAGE}
    check = subprocess.run(
        [sys.executable, "-c", f"import {HARNESS_PACKAGE}"],
        env=os.environ | blocked,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 1 and "No module named" in check.stderr, check.stderr
    for mode in ("enumerated", "workers"):
        done = _chaos(tmp_path, "--mode", mode, "--json", env=blocked)
        assert done.returncode == 6, (mode, done.stdout, done.stderr)  # FAILED_PRECONDITION
        assert "Traceback" not in done.stderr, done.stderr
        error = json.loads(done.stdout)["error"]
        assert (error["code"], error["reason"]) == ("FAILED_PRECONDITION", "missing_extra")
        assert error["details"]["feature"] == "turnkeeper chaos", error
        assert error["details"]["install"] == "pip install 'turnkeeper[chaos]'", error
