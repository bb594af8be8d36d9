"""The LangGraph saver benchmark runs (``--smoke``): every saver ran every step of the
same conversation and was measured. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.pg import server_url, session_database

REPO = Path(__file__).resolve().parents[2]


def test_the_saver_benchmark_runs_every_saver() -> None:
    session_database()  # the server is there (else skipped, or failed where required)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.langgraph_saver_bench", "--smoke", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "TURNKEEPER_BENCH_PG_URL": server_url()},
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    steps = results["settings"]["steps"]
    assert [row["name"] for row in results["rows"]] == [
        "turnkeeper, SQLite",
        "LangGraph SqliteSaver",
        "turnkeeper, PostgreSQL",
        "LangGraph PostgresSaver",
    ]
    for row in results["rows"]:
        assert row["messages"] == 2 * steps  # each step: the user's message and the reply
        assert row["median_ms"] > 0
        assert row["bytes_per_step"] > 0
