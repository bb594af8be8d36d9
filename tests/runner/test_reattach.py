"""A control plane SIGKILLed mid-turn; a new one reattaches to the runner and reads on.

The first client is a real process that starts the turn through ``RunnerHost``, reads
events and acknowledges each. The test SIGKILLs it (its own child, by pid) halfway;
the turn keeps running in the runner. A new client attaches and reads from the
acknowledged seq: every later event once, in order, then the outcome.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.runner.conftest import REPO, Project
from turnkeeper.errors import FailedPrecondition
from turnkeeper.hosts import HostStatus, process_tree

CLIENT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from turnkeeper.hosts import TurnRequest
    from turnkeeper.runner import RunnerClient, RunnerHost
    state_dir, config = Path(sys.argv[1]), json.loads(sys.argv[2])
    request = TurnRequest.model_validate_json(sys.argv[3])
    run = RunnerHost("subprocess", config, RunnerClient(state_dir)).start(request)
    print(json.dumps({"identity": run.identity.model_dump(mode="json")}), flush=True)
    for event in run.events(0):
        print(json.dumps({"seq": event.seq, "i": event.data.get("i")}), flush=True)
        run.ack(event.seq)
        print(json.dumps({"acked": event.seq}), flush=True)
    """
)


def test_a_new_client_reads_on_from_the_ack_after_the_first_was_killed(project: Project) -> None:
    project.runner()
    n = 12
    config = project.config(n=n, delay=0.15)
    request = project.request()
    payload = request.model_dump_json()
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(project.state_dir), json.dumps(config), payload],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdout is not None
    seen: list[int] = []
    while True:
        line = json.loads(client.stdout.readline())
        if "seq" in line:
            seen.append(line["seq"])
        if line.get("acked", 0) >= 4:
            break
    client.send_signal(signal.SIGKILL)
    client.wait(timeout=10)
    client.stdout.close()

    with project.client() as successor:
        info = successor.turn(request.turn_id)
        assert info.state == "live"  # the turn outlived its control plane
        assert 4 <= info.acked_seq <= max(seen)
        run = successor.attach(request.turn_id)
        assert run.is_alive()
        later = list(run.events(info.acked_seq))
        outcome = run.wait(timeout=30)

    seqs = [e.seq for e in later]
    assert seqs == list(range(info.acked_seq + 1, n + 2))  # each once, in order
    assert [e.data["i"] for e in later[:-1]] == list(range(info.acked_seq + 1, n + 1))
    assert later[-1].kind == "result"
    assert outcome.status is HostStatus.SUCCEEDED
    assert outcome.last_seq == n + 1
    assert outcome.result == {"summary": f"done {n}"}
    assert project.start_count() == 1
    assert not process_tree.is_alive(run.identity)

    # Another reader (another restart) gets the same end.
    with project.client() as third:
        assert third.outcome(request.turn_id).outcome == outcome
        assert [e.seq for e in third.events(request.turn_id, info.acked_seq)] == seqs


def test_acks_are_cumulative_and_bounded_and_close_needs_them_all(project: Project) -> None:
    project.runner()
    request = project.request()
    with project.client() as client:
        client.start_turn("subprocess", project.config(n=3, delay=0), request)
        end = client.outcome(request.turn_id, timeout=30)
        assert end.outcome.last_seq == 4
        assert end.end_reason is None
        turn_id = request.turn_id

        with pytest.raises(FailedPrecondition) as beyond:
            client.ack(turn_id, 5)
        assert beyond.value.reason == "ack_beyond_produced"
        with pytest.raises(FailedPrecondition) as not_acked:
            client.close_turn(turn_id)
        assert not_acked.value.reason == "turn_not_acked"

        assert client.ack(turn_id, 2) == 2
        assert client.ack(turn_id, 2) == 2  # the same ack again: its stored answer
        with pytest.raises(FailedPrecondition) as back:
            client.ack(turn_id, 1)
        assert back.value.reason == "ack_regressed"
        # Acknowledged events are pruned: replay starts after the ack.
        with pytest.raises(FailedPrecondition) as pruned:
            list(client.events(turn_id, 0))
        assert pruned.value.reason == "events_pruned"
        assert [e.seq for e in client.events(turn_id, 2)] == [3, 4]

        client.ack(turn_id, 4)
        client.close_turn(turn_id)
        assert all(t.turn_id != turn_id for t in client.hello().turns)


def test_a_live_turn_cannot_be_closed(project: Project) -> None:
    project.runner()
    request = project.request()
    with project.client() as client:
        client.start_turn("subprocess", project.config(n=1, delay=0, HANG="1"), request)
        with pytest.raises(FailedPrecondition) as live:
            client.close_turn(request.turn_id)
        assert live.value.reason == "turn_not_finished"
        report = client.kill(request.turn_id)
        assert report.complete
        end = client.outcome(request.turn_id, timeout=30)
    assert end.outcome.status is HostStatus.FAILED
    assert end.outcome.signal == signal.SIGKILL
