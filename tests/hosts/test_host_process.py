"""How a host's process is started and served, with a cgroup (where there is one) and
without: what the child gets (descriptors, signals, directory, environment), and
what the turn learns of its pipes and its exit whatever order they end in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.conftest import MakeRequest
from turnkeeper.errors import Unavailable
from turnkeeper.hosts import HostErrorKind, HostSpawnFailed, cgroups, containment, host_process
from turnkeeper.hosts.base import TurnLimits
from turnkeeper.hosts.subprocess_host import SubprocessHost, SubprocessRun


@pytest.fixture(params=["auto", "subreaper"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs in a turn cgroup (``auto``, where this machine has one) and as
    the subreaper's, without one."""
    monkeypatch.setenv(containment.CONTAINMENT_ENV, request.param)
    return str(request.param)


def run(make_request: MakeRequest, config: dict[str, Any], **request: Any) -> SubprocessRun:
    return SubprocessHost(config).start(make_request(**request))


def texts(r: SubprocessRun) -> list[str]:
    return [str(e.data["text"]) for e in r.events(0)]


def test_the_host_gets_no_descriptor_of_ours_but_its_pipes(
    make_request: MakeRequest, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An inheritable descriptor, as one this process was started with would be: the
    # first spawn of a process makes those close-on-exec, and this one is the first.
    monkeypatch.setattr(host_process, "_swept", [])
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        r = run(make_request, {"command": ["sh", "-c", "ls /proc/$$/fd"]})
        outcome = r.wait(10)
        still_inheritable = os.get_inheritable(write_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert outcome.succeeded, outcome.message
    assert sorted(texts(r)) == ["0", "1", "2"]
    # Behind the cgroup's wrapper (posix_spawn) the descriptor was made close-on-exec;
    # Popen closes it in the child and leaves ours as it was.
    assert still_inheritable is (outcome.containment != "cgroup")


def test_the_host_gets_sigpipe_and_sigxfsz_at_their_defaults(
    make_request: MakeRequest, mode: str
) -> None:
    r = run(make_request, {"command": ["sh", "-c", "grep SigIgn /proc/$$/status"]})
    assert r.wait(10).succeeded
    ignored = int(texts(r)[0].split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))
    assert not ignored & (1 << (signal.SIGXFSZ - 1))


def test_the_host_runs_in_its_workspace_with_the_environment_it_was_given(
    make_request: MakeRequest, workspace: Path, mode: str
) -> None:
    script = 'pwd -P; echo "${OLDPWD-no OLDPWD}"; echo "$X"'
    r = run(make_request, {"command": ["sh", "-c", script], "env": {"X": "x"}})
    assert r.wait(10).succeeded
    assert texts(r) == [str(workspace.resolve()), "no OLDPWD", "x"]
    r = run(make_request, {"command": ["sh", "-c", script], "env": {"OLDPWD": "/given"}})
    assert r.wait(10).succeeded
    assert texts(r)[1] == "/given"


def test_a_host_that_exits_without_reading_its_input_still_ends_its_turn(
    make_request: MakeRequest, mode: str
) -> None:
    # More than a pipe holds: the write meets a reader that is gone.
    config = {"command": ["sh", "-c", "exit 3"], "stdin": "instructions"}
    outcome = run(make_request, config, instructions="x" * (1 << 20)).wait(10)
    assert outcome.error_kind is HostErrorKind.EXIT_CODE
    assert outcome.exit_code == 3


def test_a_host_that_closes_its_output_early_is_still_waited_for(
    make_request: MakeRequest, mode: str
) -> None:
    script = "echo early; exec >&- 2>&-; sleep 0.3; exit 7"
    outcome = run(make_request, {"command": ["sh", "-c", script]}).wait(10)
    assert outcome.exit_code == 7
    assert outcome.last_seq == 1


def test_large_output_arrives_whole_and_a_signal_is_reported(
    make_request: MakeRequest, mode: str
) -> None:
    code = (
        "import os, signal, sys\n"
        "sys.stdout.write(''.join(f'line {i}\\n' for i in range(20000)))\n"
        "sys.stdout.write('last')\n"
        "sys.stdout.flush()\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
    )
    r = run(
        make_request, {"command": [sys.executable, "-c", code]}, limits=TurnLimits(max_events=30000)
    )
    outcome = r.wait(20)
    assert outcome.error_kind is HostErrorKind.SIGNAL
    assert outcome.signal == signal.SIGUSR1
    lines = texts(r)
    assert len(lines) == 20001
    assert lines[-2:] == ["line 19999", "last"]


needs_cgroup = pytest.mark.skipif(
    cgroups.unavailable_reason() is not None, reason="no writable cgroup2 here"
)


@needs_cgroup
def test_a_wrapper_that_cannot_be_spawned_is_a_spawn_failure_and_leaves_no_cgroup(
    make_request: MakeRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(containment, "SHELL", "/nonexistent/sh")
    request = make_request()
    with pytest.raises(HostSpawnFailed, match="No such file or directory") as failed:
        SubprocessHost({"command": ["true"]}).start(request)
    assert failed.value.outcome.error_kind is HostErrorKind.SPAWN
    assert cgroups.find(request.turn_id) is None


def _no_posix_spawn_setsid(*args: Any) -> int:
    raise NotImplementedError("setsid is unavailable on this platform")


@needs_cgroup
@pytest.mark.parametrize("without", ["a descriptor listing", "posix_spawn's setsid"])
def test_the_wrapper_is_started_as_any_command_where_it_cannot_be_spawned(
    make_request: MakeRequest, workspace: Path, monkeypatch: pytest.MonkeyPatch, without: str
) -> None:
    if without == "a descriptor listing":
        monkeypatch.setattr(host_process, "_FD_DIR", "/nonexistent/fd")
        monkeypatch.setattr(host_process, "_swept", [])
    else:
        monkeypatch.setattr(host_process, "_posix_spawn", _no_posix_spawn_setsid)
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        r = run(make_request, {"command": ["sh", "-c", "pwd -P; ls /proc/$$/fd"]})
        outcome = r.wait(10)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert outcome.succeeded and outcome.containment == "cgroup", outcome.message
    assert texts(r) == [str(workspace.resolve()), "0", "1", "2"]


def test_a_workspace_that_cannot_be_entered_is_a_spawn_failure(
    make_request: MakeRequest, workspace: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # As root every directory can be entered: the check is what is tested here.
    real_access = os.access

    def access(path: Any, how: int, **kwargs: Any) -> bool:
        # The workspace by any name of it ("<workspace>/." too): none can be searched.
        denied = os.path.normpath(os.fspath(path)) == os.path.normpath(workspace)
        return False if denied else real_access(path, how, **kwargs)

    monkeypatch.setattr(os, "access", access)
    with pytest.raises(HostSpawnFailed, match="cannot be entered") as failed:
        run(make_request, {"command": ["true"]})
    assert failed.value.outcome.error_kind is HostErrorKind.SPAWN


def test_the_wrapper_fails_a_workspace_gone_since_the_check_with_its_reason(
    tmp_path: Path,
) -> None:
    # What is left between the check and the shell's cd: the workspace going away.
    gone_workspace = str(tmp_path / "gone")
    argv = [containment.SHELL, "-c", containment.JOIN_ENTER_AND_EXEC, os.devnull]
    done = subprocess.run(
        [*argv, gone_workspace, "", "true"], capture_output=True, timeout=10, check=False
    )
    assert done.returncode == 125
    assert f"cannot enter its workspace {gone_workspace}" in done.stderr.decode()


def test_a_spawned_hosts_status_taken_by_another_waiter_is_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = host_process.start(
        [containment.SHELL, "-c", "exit 0"],
        {},
        cwd=str(tmp_path),
        stdin_pipe=False,
        enters_cwd=True,
    )
    try:
        os.waitpid(proc.pid, 0)  # what the owned-child registry keeps anyone from doing
        assert proc.wait() == host_process.STATUS_LOST
        assert "exit status is lost" in caplog.text
    finally:
        proc.close()


def test_every_waiter_gets_the_outcome_and_a_wait_that_ends_first_says_so(
    make_request: MakeRequest,
) -> None:
    r = run(make_request, {"command": ["sh", "-c", "sleep 0.3; exit 4"]})
    with pytest.raises(Unavailable):
        r.wait(0)
    with pytest.raises(Unavailable):
        r.wait(-1)
    with ThreadPoolExecutor(3) as pool:
        outcomes = list(pool.map(lambda _: r.wait(10), range(3)))
    assert [o.exit_code for o in outcomes] == [4, 4, 4]
    assert r.wait(0) is outcomes[0]


@needs_cgroup
def test_the_descriptors_are_listed_once_per_process_not_at_every_spawn(
    make_request: MakeRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A listing costs a system call per open descriptor: hundreds with hundreds of hosts.
    monkeypatch.setattr(host_process, "_swept", [])
    listings: list[str] = []
    real_listdir = os.listdir

    def listdir(path: Any) -> list[str]:
        if os.fspath(path) == host_process._FD_DIR:
            listings.append(os.fspath(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    for _ in range(3):
        assert run(make_request, {"command": ["true"]}).wait(10).succeeded
    assert len(listings) == 1
