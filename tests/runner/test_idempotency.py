"""Command ids: a retry gets the stored answer, a reused id is refused, and a command
the runner died executing is indeterminate, never executed again.

Host starts are counted through the file the agent script appends to.
"""

from __future__ import annotations

import pytest

from tests.runner.conftest import Project
from turnkeeper.crashpoints import ENV_VAR as CRASH_AT
from turnkeeper.errors import Aborted, AlreadyExists, Unavailable
from turnkeeper.hosts import HostSpawnFailed, HostStatus, process_tree


def test_a_retried_start_turn_starts_one_host(project: Project) -> None:
    project.runner()
    request = project.request()
    config = project.config(n=2, delay=0.05)
    with project.client() as first:
        identity = first.start_turn("subprocess", config, request, command_id="cmd-1")
    with project.client() as second:  # a control plane that never saw the answer
        again = second.start_turn("subprocess", config, request, command_id="cmd-1")
        assert again == identity
        second.outcome(request.turn_id, timeout=30)
        # Same id, other bytes: refused, and nothing started.
        other = request.model_copy(update={"instructions": "something else"})
        with pytest.raises(AlreadyExists) as reused:
            second.start_turn("subprocess", config, other, command_id="cmd-1")
        assert reused.value.reason == "command_id_reused"
        # Another id for the same turn: the turn exists already.
        with pytest.raises(AlreadyExists) as exists:
            second.start_turn("subprocess", config, request, command_id="cmd-2")
        assert exists.value.reason == "turn_exists"
        # Still the stored answer once the turn was closed and forgotten.
        second.ack(request.turn_id, 3)
        second.close_turn(request.turn_id)
        assert second.start_turn("subprocess", config, request, command_id="cmd-1") == identity
    assert project.start_count() == 1


def test_a_spawn_failure_is_typed_and_stored(project: Project) -> None:
    project.runner()
    request = project.request()
    config = {"command": [str(project.root / "no-such-agent")]}
    with project.client() as client:
        with pytest.raises(HostSpawnFailed) as failed:
            client.start_turn("subprocess", config, request, command_id="bad")
        with pytest.raises(HostSpawnFailed) as again:
            client.start_turn("subprocess", config, request, command_id="bad")
        assert again.value.message == failed.value.message
        assert all(t.turn_id != request.turn_id for t in client.hello().turns)


def test_a_command_pending_when_the_runner_died_is_indeterminate(project: Project) -> None:
    runner = project.runner(**{CRASH_AT: "runner.command_pending"})
    request = project.request()
    config = project.config(n=2, delay=0)
    with project.client() as client, pytest.raises(Unavailable):
        # The runner journals the command pending and SIGKILLs itself.
        client.start_turn("subprocess", config, request, command_id="cmd-crash")
    runner.wait(timeout=10)
    assert runner.returncode == -9

    project.runner()
    with project.client() as client:
        with pytest.raises(Aborted) as indeterminate:
            client.start_turn("subprocess", config, request, command_id="cmd-crash")
        assert indeterminate.value.reason == "command_indeterminate"
        assert all(t.turn_id != request.turn_id for t in client.hello().turns)
    assert project.start_count() == 0  # never executed


def test_a_runner_dying_after_the_host_started_loses_the_turn(project: Project) -> None:
    runner = project.runner(**{CRASH_AT: "runner.host_started"})
    request = project.request()
    config = project.config(n=50, delay=0.1)
    with project.client() as client, pytest.raises(Unavailable):
        client.start_turn("subprocess", config, request, command_id="cmd-crash")
    runner.wait(timeout=10)

    # The restarted runner ends what is left of the turn (a host still between fork
    # and its parent-death signal may have outlived the runner a moment).
    project.runner()
    assert process_tree.find_marked_processes(request.turn_id) == []
    started = project.start_count()
    assert started <= 1
    with project.client() as client:
        with pytest.raises(Aborted):
            client.start_turn("subprocess", config, request, command_id="cmd-crash")
        end = client.outcome(request.turn_id, timeout=10)
    assert end.end_reason == "runner_lost"
    assert end.outcome.status is HostStatus.FAILED
    assert project.start_count() == started  # the retry started nothing
