"""The README's first command: the demo must run to a passed audit through both kills."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.pg import PostgresDatabase, execute, server_url, with_database


def test_demo_completes_through_host_and_control_plane_kills() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert (
        "failed (signal: host died (SIGKILL))" in out
    )  # the host SIGKILL became a failed turn ...
    assert "resumed after failed turn" in out  # ... resolved through its recovery record
    assert "taking over the lease of dead controller" in out
    assert "killed_process" in out and "turn_marked_lost" in out
    assert "orphans of the killed turn still alive: none" in out
    assert "Terminal audit: terminal" in out
    assert "goal completed through both crashes" in out


def test_demo_on_postgresql_runs_in_a_database_of_its_own_and_drops_it(
    postgres_database: PostgresDatabase,
) -> None:
    """``demo --database-url`` as the README gives it: the whole scenario on the server,
    in a fresh database that is gone afterwards."""
    server = with_database(server_url(), postgres_database.name)
    before = _demo_databases()
    proc = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "demo", "--database-url", server],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "(PostgreSQL)" in out
    assert "taking over the lease of dead controller" in out
    assert "Terminal audit: terminal" in out
    assert "goal completed through both crashes" in out
    assert _demo_databases() == before  # its own database was dropped


def _demo_databases() -> set[str]:
    rows = execute(
        server_url(),
        "SELECT datname FROM pg_database WHERE datname LIKE %s",
        ("turnkeeper_demo_%",),
    )
    return {str(r[0]) for r in rows}


def test_demo_with_the_runner_loses_no_turn_to_the_control_planes_kill() -> None:
    """``demo --runner``: the agent belongs to the runner, survives the control plane's
    SIGKILL, and the restarted control plane reattaches to the same turn."""
    proc = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "demo", "--runner"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "belongs to the runner and keeps running" in out
    assert "reattached at seq" in out
    assert "finished 1 reattached" in out
    assert "turns lost to the crashes: 0" in out
    assert "the control plane's SIGKILL lost no turn" in out
    assert "orphans of the killed turn still alive: none" in out
