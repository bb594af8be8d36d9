"""``turnkeeper runner start|status|stop``, run as the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.runner.conftest import REPO, Project, gone
from turnkeeper.errors import EXIT_CODES, ErrorCode
from turnkeeper.hosts import process_tree
from turnkeeper.runner.paths import RunnerPaths


def _cli(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "runner", *args],
        cwd=REPO,
        env={**os.environ, "TURNKEEPER_DIR": str(project.root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_start_status_and_stop(project: Project) -> None:
    not_running = _cli(project, "status", "--json")
    assert not_running.returncode == EXIT_CODES[ErrorCode.UNAVAILABLE]
    assert json.loads(not_running.stdout)["error"]["reason"] == "runner_not_running"

    started = _cli(project, "start", "--json")
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    assert info["started"] is True
    pid = info["pid"]
    runner = process_tree.identify(pid, "runner")
    try:
        again = json.loads(_cli(project, "start", "--json").stdout)
        assert again["started"] is False
        assert again["pid"] == pid

        request = project.request()
        with project.client() as client:
            host = client.start_turn("subprocess", project.config(n=1, HANG="1"), request)
        status = json.loads(_cli(project, "status", "--json").stdout)
        assert status["pid"] == pid
        assert status["turns_live"] == 1
        assert status["journal_bytes"] > 0

        refused = _cli(project, "stop", "--json")
        assert refused.returncode == EXIT_CODES[ErrorCode.FAILED_PRECONDITION]
        assert json.loads(refused.stdout)["error"]["reason"] == "runner_has_live_turns"
        assert process_tree.is_alive(host)

        stopped = _cli(project, "stop", "--force", "--json")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert json.loads(stopped.stdout)["killed_turns"] == [request.turn_id]
        assert gone(host.pid, host.start_time)
        assert gone(runner.pid, runner.start_time)
        assert not RunnerPaths(project.state_dir).socket.exists()
        assert json.loads(_cli(project, "stop", "--json").stdout) == {
            "running": False,
            "stopped": False,
        }
    finally:
        if not gone(runner.pid, runner.start_time):
            os.kill(runner.pid, 9)  # the runner this test started
