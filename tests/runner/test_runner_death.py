"""A SIGKILLed runner takes its hosts with it, and the proof function accounts for
every turn it left: by pid + start time + boot id, never signalling a stranger."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.runner.conftest import Project, gone, wait_until
from turnkeeper.errors import FailedPrecondition
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.hosts import MARKER_ENV, HostStatus, process_tree
from turnkeeper.runner import prove_hosts_ended
from turnkeeper.runner.journal import Journal
from turnkeeper.runner.paths import RunnerPaths


def test_a_killed_runners_hosts_are_gone_and_proven_so(project: Project) -> None:
    runner = project.runner()
    request = project.request()
    with project.client() as client:
        identity = client.start_turn("subprocess", project.config(n=200, DETACH="1"), request)
        events = client.events(request.turn_id)
        assert [next(events).seq for _ in range(2)] == [1, 2]
        events.close()
        with pytest.raises(FailedPrecondition) as alive:
            prove_hosts_ended(project.state_dir)  # a live runner owns its turns
        assert alive.value.reason == "runner_alive"

    def detached_children() -> list[int]:
        return [
            pid
            for pid in process_tree.find_marked_processes(request.turn_id)
            if process_tree.read_cmdline(pid) == "sleep 600"
        ]

    wait_until(lambda: len(detached_children()) == 1, what="the detached grandchild")
    (detached,) = detached_children()
    detached_stat = process_tree.read_stat(detached)
    assert detached_stat is not None

    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=10)

    # The host had a parent-death signal: it died with the runner, by itself.
    wait_until(lambda: gone(identity.pid, identity.start_time), what="the host to die")
    # Its setsid grandchild had none: it still runs, marked with the turn.
    assert not gone(detached, detached_stat.start_time)

    (proof,) = prove_hosts_ended(project.state_dir)
    assert proof.turn_id == request.turn_id
    assert proof.identity == identity
    assert proof.host == "gone"
    assert proof.ended
    assert detached in {k.pid for k in proof.killed}
    assert gone(detached, detached_stat.start_time)
    assert process_tree.find_marked_processes(request.turn_id) == []

    # The next runner records the turn as lost; a control plane reads why.
    project.runner()
    with project.client() as client:
        end = client.outcome(request.turn_id, timeout=10)
        assert client.turn(request.turn_id).state == "finished"
    assert end.end_reason == "runner_lost"
    assert end.outcome.status is HostStatus.FAILED
    assert end.outcome.last_seq >= 2


def _journal_live_turn(project: Project, turn_id: str, identity: ProcessIdentity) -> None:
    paths = RunnerPaths(project.state_dir)
    paths.ensure()
    journal = Journal(paths.journal)
    try:
        journal.add_turn(turn_id, "subprocess")
        journal.turn_started(turn_id, identity)
    finally:
        journal.close()


def test_a_pid_now_owned_by_another_process_is_blocked_and_never_signalled(
    project: Project,
) -> None:
    turn_id = project.request().turn_id
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        stat = process_tree.read_stat(stranger.pid)
        assert stat is not None
        # The journal names this pid with another start time: the runner's host was
        # another process, since gone, whose pid was reused.
        recorded = ProcessIdentity(
            pid=stranger.pid,
            start_time=stat.start_time - 1,
            boot_id=process_tree.boot_id(),
            marker=turn_id,
        )
        _journal_live_turn(project, turn_id, recorded)
        (proof,) = prove_hosts_ended(project.state_dir)
        assert proof.host == "blocked"
        assert proof.killed == []
        assert proof.ended
        assert stranger.poll() is None  # untouched
    finally:
        stranger.kill()
        stranger.wait()


def test_a_host_that_outlived_its_runner_is_killed_by_the_proof(project: Project) -> None:
    turn_id = project.request().turn_id
    survivor = subprocess.Popen(["sleep", "60"], env={**os.environ, MARKER_ENV: turn_id})
    try:
        identity = process_tree.identify(survivor.pid, turn_id)
        _journal_live_turn(project, turn_id, identity)
        (proof,) = prove_hosts_ended(project.state_dir)
        assert proof.host == "killed"
        assert proof.ended
        assert [k.pid for k in proof.killed] == [survivor.pid]
        assert survivor.wait(timeout=10) == -signal.SIGKILL
    finally:
        if survivor.poll() is None:
            survivor.kill()
            survivor.wait()
