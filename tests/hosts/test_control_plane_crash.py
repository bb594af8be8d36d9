"""A control plane SIGKILLed mid-turn; its successor finds and ends the whole turn.

The "control plane" is a child interpreter that starts a scripted host which
detaches a ``sleep 600`` and pauses. The test SIGKILLs that control plane (its own
child, by pid), then acts as the restarted control plane: it only has the turn id
and the identity the dead one printed ("recorded").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.hosts.conftest import MakeRequest, gone, wait_until
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.hosts import process_tree

CONTROL_PLANE = textwrap.dedent(
    """
    import json, sys, time
    from turnkeeper.hosts import TurnRequest, load_host
    request = TurnRequest.model_validate_json(sys.argv[1])
    config = json.loads(sys.argv[2])
    run = load_host("scripted", config).start(request)
    print(run.identity.model_dump_json(), flush=True)  # "host started" is recorded
    for event in run.events(0):
        print(event.model_dump_json(), flush=True)
    """
)


def test_restarted_control_plane_ends_the_turn_of_its_predecessor(
    tmp_path: Path, workspace: Path, make_request: MakeRequest
) -> None:
    request = make_request()
    steps = [
        {"op": "shell", "command": "exec sleep 600", "detach": True},
        {"op": "checkpoint", "name": "crash-here", "pause": True},
    ]
    config = {"state_dir": str(tmp_path / "state"), "script": {"default": {"steps": steps}}}
    control_plane = subprocess.Popen(
        [sys.executable, "-c", CONTROL_PLANE, request.model_dump_json(), json.dumps(config)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert control_plane.stdout is not None
    identity = ProcessIdentity.model_validate_json(control_plane.stdout.readline())
    wait_until((workspace / ".turnkeeper-pause" / "crash-here").exists, what="pause")

    control_plane.send_signal(signal.SIGKILL)
    control_plane.wait(timeout=10)
    control_plane.stdout.close()

    # The host and its setsid shell child survive their control plane.
    assert process_tree.is_alive(identity)
    marked = process_tree.find_marked_processes(request.turn_id)
    assert identity.pid in marked
    assert len(marked) == 2
    starts = {pid: process_tree.read_stat(pid).start_time for pid in marked}  # type: ignore[union-attr]

    report = process_tree.kill_turn_processes(request.turn_id, identity)
    assert report.complete
    assert {k.pid for k in report.killed} == set(marked)
    assert next(k.reason for k in report.killed if k.pid == identity.pid) == "identity"
    assert all(gone(pid, start) for pid, start in starts.items())
    assert process_tree.find_marked_processes(request.turn_id) == []
    assert not process_tree.is_alive(identity)
    assert os.path.exists(tmp_path / "state" / "runs.jsonl")
