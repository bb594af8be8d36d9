"""``turnkeeper chaos --mode workers``: many workers on one PostgreSQL database, SIGKILLed
and the database restarted under them, and the oracle that judges the run.

The long test is the one that must hold: four workers, 32 sessions, at least 20 worker
SIGKILLs and 3 database restarts (a throwaway cluster of the test's own, restarted by
the command the CLI is given), every invariant intact and nothing left running. The
short ones show the fencing oracle catches what it is there to catch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.pg_cluster import PgCluster, pg_cluster
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session import LeaseAcquired, LeaseRenewed, SessionEvent
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.worker_checks import INV6, SessionChecker, SessionView

__all__ = ["pg_cluster"]
NOW = datetime(2025, 1, 1, tzinfo=UTC)
A = "ctl:host:boot:1:100:5"
B = "ctl:host:boot:1:200:6"


def _checker(tmp_path: Path, runs: list[JsonDict] | None = None) -> SessionChecker:
    view = SessionView(tmp_path, "s", tmp_path, "postgresql://unused", "sid", "g", [], runs or [])
    return SessionChecker(view, CountingService(), frozenset())


def _acquired(owner: str, epoch: int) -> LeaseAcquired:
    return LeaseAcquired(owner=owner, epoch=epoch, expires_at=NOW + timedelta(seconds=9), at=NOW)


def test_fencing_catches_a_stale_holders_renewal(tmp_path: Path) -> None:
    stale = LeaseRenewed(owner=A, epoch=1, expires_at=NOW + timedelta(seconds=9), at=NOW)
    events: list[SessionEvent] = [_acquired(A, 1), _acquired(B, 2), stale]
    checker = _checker(tmp_path)
    checker.check_fencing(events)
    assert [v.invariant for v in checker.result.violations] == [INV6]
    assert "epoch 1 accepted while" in checker.result.violations[0].detail


def test_fencing_catches_a_skipped_epoch(tmp_path: Path) -> None:
    checker = _checker(tmp_path)
    checker.check_fencing([_acquired(A, 1), _acquired(B, 3)])
    assert [v.invariant for v in checker.result.violations] == [INV6]


def test_fencing_accepts_one_holder_after_another(tmp_path: Path) -> None:
    renewed = LeaseRenewed(owner=B, epoch=2, expires_at=NOW + timedelta(seconds=9), at=NOW)
    checker = _checker(tmp_path)
    checker.check_fencing([_acquired(A, 1), _acquired(B, 2), renewed])
    assert checker.result.violations == []


@pytest.mark.timeout(420)
def test_four_workers_32_sessions_20_kills_3_database_restarts(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    restart = pg_cluster.restart_command("fast", down_seconds=2)
    args = [
        *("--database-url", pg_cluster.url(), "--workers", "4", "--sessions", "32"),
        *("--kills", "20", "--restarts", "3", "--restart-database-command", restart),
        *("--seed", "11", "--dir", str(tmp_path / "run"), "--time-limit", "360", "--json"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "chaos", "--mode", "workers", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    assert report["violations"] == [], json.dumps(report, indent=1)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = report["facts"]
    assert facts["kills"] >= 20, facts
    assert facts["kills_mid_turn"] >= 1, facts
    assert facts["database_restarts"] >= 3, facts
    assert facts["unavailable_reports"] >= 1, facts  # the workers saw the outages
    assert facts["orphans"] == 0, facts
    # Every goal closed (checked per session) with all its turns done once.
    assert facts["completed"] >= 32 * 4, facts
    assert facts["effects_applied"] == facts["completed"], facts
    assert facts["host_runs"] <= facts["turns"], facts
