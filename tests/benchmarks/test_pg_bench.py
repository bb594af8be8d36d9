"""The PostgreSQL benchmark at its ``--smoke`` size, against the test server: it runs
end to end (real turns on a PostgreSQL store, real ``turnkeeper run --worker``
processes), reports figures that hang together, and drops every database it made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.pg import PostgresDatabase, execute

ROOT = Path(__file__).resolve().parents[2]


def _run(server: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.pg_bench", "--smoke", "--json"]
    proc = subprocess.run(
        [*command, "--database-url", server],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)  # stdout is the JSON and nothing else
    return result


def test_pg_bench_smoke(postgres_database: PostgresDatabase) -> None:
    res = _run(postgres_database.server)
    latency = res["latency"]
    med = latency["median_us"]
    assert {"bare_insert", "turn", "turn_plain_dir", "append"} <= set(med)
    assert ("dbos_step" in med) != ("dbos_step" in res["skipped"])
    assert all(v > 0 for v in med.values())
    assert latency["ratio_to_bare"]["turn"] == med["turn"] / med["bare_insert"]
    assert latency["durable_commits_per_turn"] >= 1  # intent and outcome at least
    wire = latency["wire"]
    # Counted on the relay: the bare insert is BEGIN, INSERT, COMMIT as psycopg sends
    # them, one commit; every commit of the store goes in one round trip, so the turn
    # takes a round trip per commit at least, and the server committed each of them.
    bare = wire["bare_insert"]
    assert bare["commits"] == 1 and bare["round_trips"] >= 2
    assert wire["append"]["commits"] == 1 and wire["append"]["round_trips"] == 1
    turn = wire["turn"]
    assert turn["round_trips"] >= turn["commits"] >= latency["durable_commits_per_turn"]
    assert turn["server_commits"] >= turn["commits"]
    assert turn["statements"]["COMMIT"] == turn["commits"]
    assert ("dbos_turn" in wire) != ("dbos_step" in res["skipped"])

    settings = res["settings"]
    assert set(res["fleet"]) == {str(k) for k in settings["workers"]}
    for key, points in res["fleet"].items():
        for point in points:
            assert point["workers"] == int(key)
            assert point["turns"] == settings["sessions"] * settings["todos"]
            assert point["turns_per_s"] > 0 and point["window_turns"] > 0
            assert point["database_cores"] >= 0 and point["workers_cores"] > 0
            assert point["database_xacts_per_turn"] > 0
            assert point["limit"] in ("database", "workers")
    assert res["fleet_median_turns_per_s"]["1"] > 0
    for target in res["targets"].values():
        assert set(target) == {"target", "value", "met"}

    prefix = res["database_prefix"]
    assert prefix.startswith("tk_pgbench_")
    left = execute(
        postgres_database.server,
        "SELECT datname FROM pg_database WHERE datname LIKE ?",
        (prefix + "%",),
    )
    assert left == []
