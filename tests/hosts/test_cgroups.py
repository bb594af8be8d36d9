"""A cgroup v2 per turn, on the real hierarchy: create, place, kill, remove; fall back.

The cgroup tests need a writable cgroup2 (root on a cgroup v2 or hybrid machine);
where there is none they are skipped with the reason. Every process here is one
the test started; cleanup ends the turns' processes by their turn ids.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.conftest import MakeRequest, gone, wait_until
from turnkeeper.hosts import HostErrorKind, HostSpawnFailed, cgroups, containment, process_tree
from turnkeeper.hosts.subprocess_host import SubprocessHost

REPO = Path(__file__).resolve().parents[2]
UNAVAILABLE = cgroups.unavailable_reason()
needs_cgroup = pytest.mark.skipif(
    UNAVAILABLE is not None, reason=f"no writable cgroup2 here: {UNAVAILABLE}"
)


@pytest.fixture
def turn_id() -> Iterator[str]:
    tid = f"cg-{uuid.uuid4()}"
    yield tid
    process_tree.kill_turn_processes(tid)


@pytest.fixture
def no_cgroup2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A machine with cgroup v1 only: no cgroup2 line in mountinfo, no ``0::`` line."""
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n")
    own = tmp_path / "cgroup"
    own.write_text("1:cpu:/\n")
    monkeypatch.setattr(cgroups, "MOUNTINFO", mountinfo)
    monkeypatch.setattr(cgroups, "OWN_CGROUP", own)
    return "no cgroup2 file system is mounted"


def _place(cgroup: cgroups.TurnCgroup, command: str) -> subprocess.Popen[bytes]:
    """A process that joins ``cgroup`` and then runs ``command`` (sh).

    Registered as an owned child, as hosts register theirs: an earlier test may have
    made this process a subreaper whose reaper reaps unregistered children in other
    sessions, and a reaped child's ``Popen.wait`` would report 0, not its signal."""
    with process_tree.spawn_lock:
        proc = subprocess.Popen(
            ["sh", "-c", f'echo 0 > "$0"; {command}', str(cgroup.procs_file)],
            start_new_session=True,
        )
        process_tree.register_owned_child(proc.pid)
    return proc


def test_mountinfo_and_membership_parsing() -> None:
    mountinfo = (
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "41 31 0:38 / /sys/fs/cgroup/uni\\040fied rw,relatime - cgroup2 cgroup2 rw\n"
    )
    assert cgroups.cgroup2_mount(mountinfo) == (Path("/sys/fs/cgroup/uni fied"), "/")
    assert cgroups.cgroup2_mount(mountinfo.splitlines()[1]) is None
    assert cgroups.own_cgroup("4:memory:/x\n0::/user.slice/a.scope\n") == "/user.slice/a.scope"
    assert cgroups.own_cgroup("4:memory:/x\n") is None
    # A turn id that could escape its directory or pass for an interface file is hashed.
    assert cgroups.turn_cgroup_name("t-1_a") == "t-1_a"
    for odd in ("../up", "cgroup.kill", "a/b", "x" * 300):
        name = cgroups.turn_cgroup_name(odd)
        assert name.startswith("turn-") and "/" not in name and "." not in name


@needs_cgroup
def test_create_place_kill_remove(turn_id: str) -> None:
    cgroup = cgroups.create(turn_id)
    assert cgroup.path.parent.name == cgroups.TURNS_DIR
    assert cgroup.exists() and not cgroup.populated()
    # A member that double-forks and one that scrubs its environment and leaves the
    # session: still members.
    proc = _place(cgroup, "( (sleep 600 &) & ); env -i setsid sleep 601 & exec sleep 602")
    wait_until(lambda: len(cgroup.pids()) == 3, what="three members")
    members = {pid: process_tree.read_stat(pid) for pid in cgroup.pids()}
    assert proc.pid in members
    assert all(cgroups.in_our_turn_cgroup(pid) for pid in members)
    assert not cgroups.in_our_turn_cgroup(os.getpid())

    ended = cgroups.end(cgroup, protected={os.getpid()}, timeout=10)
    assert set(ended.members) == set(members)
    assert ended.survivors == [] and ended.removed, ended.problem
    assert not cgroup.exists()
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert all(gone(pid, stat.start_time) for pid, stat in members.items() if stat)


@needs_cgroup
def test_without_cgroup_kill_members_are_frozen_and_killed_one_by_one(
    turn_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kernel before 5.14 has no cgroup.kill: freeze, then SIGKILL each member.
    monkeypatch.setattr(cgroups.TurnCgroup, "kill_all", lambda self: False)
    cgroup = cgroups.create(turn_id)
    proc = _place(cgroup, "sleep 600 & sleep 601 & wait")
    wait_until(lambda: len(cgroup.pids()) == 3, what="three members")
    ended = cgroups.end(cgroup, protected=set(), timeout=10)
    assert len(ended.members) == 3 and ended.removed
    assert proc.wait(timeout=10) == -signal.SIGKILL


@needs_cgroup
def test_a_cgroup_holding_a_protected_process_is_never_killed_whole(turn_id: str) -> None:
    cgroup = cgroups.create(turn_id)
    keep = _place(cgroup, "exec sleep 600")
    other = _place(cgroup, "exec sleep 601")
    try:
        wait_until(lambda: len(cgroup.pids()) == 2, what="two members")
        ended = cgroups.end(cgroup, protected={keep.pid}, timeout=5)
        assert set(ended.members) == {other.pid}
        assert other.wait(timeout=10) == -signal.SIGKILL
        assert keep.poll() is None  # untouched, not even frozen for good
        assert not ended.removed and "holds ours" in ended.problem
    finally:
        keep.kill()
        keep.wait()


@needs_cgroup
def test_a_host_runs_in_its_turn_cgroup_and_everything_ends_with_the_turn(
    make_request: MakeRequest,
) -> None:
    script = "cat /proc/self/cgroup; env -i setsid sleep 600 >/dev/null 2>&1 & echo started"
    request = make_request()
    run = SubprocessHost({"command": ["sh", "-c", script], "drain_seconds": 0.2}).start(request)
    outcome = run.wait(20)
    assert outcome.succeeded, outcome.message
    assert outcome.containment == "cgroup"
    lines = [str(e.data["text"]) for e in run.events(0)]
    name = cgroups.turn_cgroup_name(request.turn_id)
    assert any(
        line.startswith("0::") and line.endswith(f"/{cgroups.TURNS_DIR}/{name}") for line in lines
    )
    assert len(outcome.stragglers_killed) == 1  # the scrubbed setsid sleep
    assert containment.turn_cgroup(request.turn_id) is None  # removed with the turn


@needs_cgroup
def test_old_empty_turn_cgroups_are_pruned_and_populated_ones_kept(
    turn_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = cgroups.create(f"{turn_id}-stale")
    busy = cgroups.create(f"{turn_id}-busy")
    fresh = cgroups.create(f"{turn_id}-fresh")
    member = _place(busy, "exec sleep 600")
    try:
        wait_until(lambda: busy.pids() == [member.pid], what="member")
        long_ago = time.time() - 3600
        for old in (stale, busy):
            os.utime(old.path, (long_ago, long_ago))
        # The next turn's cgroup prunes old empty siblings once the prune is due (at
        # most once a minute, not per turn): make it due now.
        monkeypatch.setattr(cgroups, "_next_prune", [0.0])
        cgroups.create(turn_id)
        assert not stale.exists()
        assert busy.exists() and busy.pids() == [member.pid]
        assert fresh.exists()  # empty, but young: a host may be about to join it
    finally:
        member.kill()
        member.wait()
        for cgroup in (busy, fresh):
            cgroup.remove()


def test_without_cgroup2_auto_falls_back_and_cgroup_is_a_spawn_failure(
    make_request: MakeRequest, no_cgroup2: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome = SubprocessHost({"command": ["true"]}).start(make_request()).wait(10)
    assert outcome.succeeded
    expected = "subreaper" if process_tree.is_child_subreaper() else "none"
    assert outcome.containment == expected

    monkeypatch.setenv(containment.CONTAINMENT_ENV, "cgroup")
    with pytest.raises(HostSpawnFailed) as failed:
        SubprocessHost({"command": ["true"]}).start(make_request())
    assert failed.value.outcome.error_kind is HostErrorKind.SPAWN
    assert "TURNKEEPER_CONTAINMENT=cgroup" in failed.value.message
    assert no_cgroup2 in failed.value.message


def test_an_unknown_containment_is_a_spawn_failure(
    make_request: MakeRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(containment.CONTAINMENT_ENV, "jail")
    with pytest.raises(HostSpawnFailed, match="'jail' is not one of auto, cgroup, subreaper"):
        SubprocessHost({"command": ["true"]}).start(make_request())


UNPRIVILEGED = textwrap.dedent(
    """
    import json, os, sys
    from turnkeeper.hosts import HostSpawnFailed, TurnKind, TurnRequest
    from turnkeeper.hosts.subprocess_host import SubprocessHost
    def request(turn):
        return TurnRequest(turn_id=turn, session_id="s", generation=1, attempt=1,
                           kind=TurnKind.START, instructions="", workspace=sys.argv[1])
    out = {"uid": os.getuid()}
    run = SubprocessHost({"command": ["true"]}).start(request(sys.argv[2]))
    out["auto"] = run.wait(20).containment
    os.environ["TURNKEEPER_CONTAINMENT"] = "cgroup"
    try:
        SubprocessHost({"command": ["true"]}).start(request(sys.argv[3]))
        out["cgroup"] = "started"
    except HostSpawnFailed as failed:
        out["cgroup"] = failed.message
    print(json.dumps(out))
    """
)


AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root")
def _importable_by_nobody() -> bool:
    """Whether the unprivileged user can run this Python and import this checkout (not
    from a directory only root can enter, such as one `mktemp -d` made)."""
    probe = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", "import turnkeeper"],
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=60,
        check=False,
    )
    return probe.returncode == 0


def test_an_unwritable_cgroup2_falls_back(make_request: MakeRequest) -> None:
    # A real unwritable hierarchy: the same machine, seen by an unprivileged user, who
    # must be able to run this interpreter and read this checkout.
    if not _importable_by_nobody():
        pytest.skip("this checkout or its Python is in a directory only root can enter")
    workspace = Path(tempfile.mkdtemp(prefix="tk-unprivileged-"))
    try:
        workspace.chmod(0o777)
        turns = [make_request().turn_id, make_request().turn_id]
        done = subprocess.run(
            [*AS_NOBODY, sys.executable, "-c", UNPRIVILEGED, str(workspace), *turns],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["uid"] == 65534
        assert out["auto"] == "none"  # not contained, and the turn still ran
        assert "TURNKEEPER_CONTAINMENT=cgroup" in out["cgroup"], out
    finally:
        shutil.rmtree(workspace)


CRASHING_CONTROL_PLANE = textwrap.dedent(
    """
    import sys
    from turnkeeper.hosts import TurnRequest
    from turnkeeper.hosts.subprocess_host import SubprocessHost
    request = TurnRequest.model_validate_json(sys.argv[1])
    # The host leaves a sleeper without the marker in a session of its own, then exits
    # a little later: once it has, neither the marker nor the tree leads to the sleeper.
    script = "env -i setsid sleep 600 >/dev/null 2>&1 & echo $!; sleep 1"
    run = SubprocessHost({"command": ["sh", "-c", script]}).start(request)
    for event in run.events(0):
        print(event.data["text"], flush=True)
    """
)


@needs_cgroup
def test_kill_turn_processes_ends_the_cgroup_a_crashed_control_plane_left(
    make_request: MakeRequest,
) -> None:
    request = make_request()
    control_plane = subprocess.Popen(
        [sys.executable, "-c", CRASHING_CONTROL_PLANE, request.model_dump_json()],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert control_plane.stdout is not None
    sleeper = int(control_plane.stdout.readline())
    control_plane.send_signal(signal.SIGKILL)  # the control plane this test started
    control_plane.wait(timeout=10)
    control_plane.stdout.close()

    stat = process_tree.read_stat(sleeper)
    assert stat is not None and not stat.dead
    cgroup = cgroups.find(request.turn_id)
    assert cgroup is not None and sleeper in cgroup.pids()
    # Wait for the host to exit: from then on only the cgroup knows the sleeper.
    wait_until(lambda: cgroup.pids() == [sleeper], what="the host to exit")
    assert process_tree.find_marked_processes(request.turn_id) == []

    started = time.monotonic()
    report = process_tree.kill_turn_processes(request.turn_id)  # what recovery calls
    assert time.monotonic() - started < 10
    assert [(k.pid, k.reason) for k in report.killed] == [(sleeper, "cgroup")]
    assert report.complete
    assert gone(sleeper, stat.start_time)
    assert not cgroup.exists()
    assert cgroups.find(request.turn_id) is None


@needs_cgroup
def test_a_member_of_a_cgroup_nested_in_an_otherwise_empty_one_is_ended(turn_id: str) -> None:
    # The turn's own cgroup holds no process, one it made does: the end does not take
    # it for empty (rmdir refuses it), it kills that member and removes both.
    cgroup = cgroups.create(turn_id)
    inner = cgroups.TurnCgroup(turn_id, os.path.join(cgroup.directory, "inner"))
    os.mkdir(inner.directory)
    proc = _place(inner, "exec sleep 600")
    wait_until(lambda: inner.pids() == [proc.pid], what="the nested member")
    assert cgroup._members([cgroup.directory]) == []
    ended = cgroups.end(cgroup, protected={os.getpid()}, timeout=5)
    assert ended.removed and list(ended.members) == [proc.pid]
    assert proc.wait(5) == -signal.SIGKILL
    process_tree.unregister_owned_child(proc.pid)
    assert not cgroup.exists()


@needs_cgroup
def test_an_empty_turn_cgroup_is_removed_without_freezing_or_killing(
    turn_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The usual end of a turn: the host exited and left nothing; its cgroup (and one it
    # made inside) is removed straight away.
    cgroup = cgroups.create(turn_id)
    (cgroup.path / "inner").mkdir()

    def refuse(self: cgroups.TurnCgroup, name: str, value: str) -> bool:
        raise AssertionError(f"wrote {name} of an empty cgroup")

    monkeypatch.setattr(cgroups.TurnCgroup, "_write", refuse)
    ended = cgroups.end(cgroup, protected={os.getpid()}, timeout=5)
    assert ended.removed and ended.members == {} and not cgroup.exists()


@needs_cgroup
def test_a_turns_directory_removed_under_a_running_process_is_made_again(
    turn_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whether the turns directory exists is remembered, not asked each turn: when it
    # went away (an operator's cleanup), the next turn makes it again.
    monkeypatch.setattr(cgroups, "TURNS_DIR", f"turnkeeper.turns-{uuid.uuid4().hex[:8]}")
    first = cgroups.create(f"{turn_id}-1")
    parent = first.path.parent
    assert cgroups.end(first, protected=set(), timeout=5).removed
    parent.rmdir()
    second = cgroups.create(f"{turn_id}-2")
    try:
        assert second.exists() and second.path.parent == parent
    finally:
        second.remove()
        parent.rmdir()


def test_our_cgroup_is_read_again_once_the_last_reading_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not read at every turn, but a move of this process is seen within a second.
    own = tmp_path / "cgroup"
    own.write_text("0::/first\n")
    monkeypatch.setattr(cgroups, "OWN_CGROUP", own)
    assert cgroups._own_cgroup() == "/first"
    own.write_text("0::/second\n")
    assert cgroups._own_cgroup() == "/first"
    monkeypatch.setattr(cgroups, "_OWN_MAX_AGE", 0.0)
    assert cgroups._own_cgroup() == "/second"
