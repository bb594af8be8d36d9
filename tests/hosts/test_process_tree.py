"""Process identity, the marker search and tree killing, on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator

import pytest

from tests.hosts.conftest import gone, wait_until
from turnkeeper.hosts import MARKER_ENV, process_tree


@pytest.fixture
def turn_id() -> Iterator[str]:
    tid = f"pt-{uuid.uuid4()}"
    yield tid
    process_tree.kill_turn_processes(tid)


def spawn(cmd: str, marker: str | None, **env: str) -> subprocess.Popen[bytes]:
    """A marked process in a session of its own, registered as owned the way hosts
    register theirs: an earlier test may have made this process a subreaper, whose
    reaper reaps dead unregistered children in other sessions (then ``Popen.wait``
    would report 0, not the signal)."""
    environ = {**os.environ, **env}
    if marker is not None:
        environ[MARKER_ENV] = marker
    with process_tree.spawn_lock:
        proc = subprocess.Popen(
            ["sh", "-c", cmd], env=environ, stdout=subprocess.PIPE, start_new_session=True
        )
        process_tree.register_owned_child(proc.pid)
    return proc


def test_identity_matches_live_process_and_not_a_forged_one() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        ident = process_tree.identify(proc.pid, "m")
        assert process_tree.is_same_process(ident)
        assert process_tree.is_alive(ident)
        # Same pid, other start time: what a recycled pid looks like.
        recycled = ident.model_copy(update={"start_time": ident.start_time + 1})
        assert not process_tree.is_same_process(recycled)
        # Same pid and start time on another boot.
        other_boot = ident.model_copy(update={"boot_id": "00000000-0000-0000-0000-000000000000"})
        assert not process_tree.is_same_process(other_boot)
    finally:
        proc.kill()
        proc.wait()
    assert not process_tree.is_same_process(ident)  # reaped: gone for good


def test_stat_parses_comm_with_spaces_and_parens(tmp_path: object) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        executable=sys.executable,
    )
    try:
        stat = process_tree.read_stat(proc.pid)
        assert stat is not None
        assert stat.ppid == os.getpid()
        assert stat.start_time > 0
    finally:
        proc.kill()
        proc.wait()


def test_identify_gone_process_is_not_found() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    from turnkeeper.errors import NotFound

    with pytest.raises(NotFound):
        process_tree.identify(proc.pid, "m")


def test_marker_search_finds_setsid_grandchild_after_parent_died(turn_id: str) -> None:
    parent = spawn("setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!", turn_id)
    out, _ = parent.communicate(timeout=10)
    sleep_pid = int(out)
    assert parent.returncode == 0  # the parent is dead; the sleep was orphaned
    wait_until(lambda: sleep_pid in process_tree.find_marked_processes(turn_id), what="marker")
    stat = process_tree.read_stat(sleep_pid)
    assert stat is not None
    assert stat.ppid != parent.pid
    report = process_tree.kill_turn_processes(turn_id)
    assert [k.pid for k in report.killed] == [sleep_pid]
    assert report.killed[0].reason == "marker"
    assert report.complete
    assert gone(sleep_pid, stat.start_time)
    assert process_tree.find_marked_processes(turn_id) == []


def test_descendants_and_tree_kill_include_children_that_scrubbed_the_marker(
    turn_id: str,
) -> None:
    # The children drop the marker from their environment: only the tree finds them.
    root = spawn(f"env -u {MARKER_ENV} sleep 600 & env -u {MARKER_ENV} sleep 600 & wait", turn_id)
    ident = process_tree.identify(root.pid, turn_id)

    def scrubbed_children() -> list[int]:
        # Until env has exec'd sleep, a forked child still carries the marker.
        kids = process_tree.list_descendants(root.pid)
        ready = len(kids) == 2 and all(
            "sleep" in process_tree.read_cmdline(p) and process_tree.read_marker(p) is None
            for p in kids
        )
        return kids if ready else []

    wait_until(lambda: bool(scrubbed_children()), what="children")
    children = scrubbed_children()
    starts = {pid: process_tree.read_stat(pid).start_time for pid in children}  # type: ignore[union-attr]

    report = process_tree.kill_turn_processes(turn_id, ident)
    assert {k.pid: k.reason for k in report.killed} == {
        root.pid: "identity",
        **dict.fromkeys(children, "descendant"),
    }
    assert root.wait(timeout=5) == -9
    assert all(gone(pid, start) for pid, start in starts.items())
    # Idempotent: nothing left to kill.
    assert process_tree.kill_turn_processes(turn_id, ident).killed == []


def test_a_search_of_the_turns_own_processes_starts_from_the_host(turn_id: str) -> None:
    # search_all=False (a contained host that exited) still ends the host's tree.
    root = spawn(f"env -u {MARKER_ENV} sleep 600 & wait", turn_id)
    ident = process_tree.identify(root.pid, turn_id)
    wait_until(lambda: len(process_tree.list_descendants(root.pid)) == 1, what="child")
    report = process_tree.kill_turn_processes(turn_id, ident, search_all=False)
    assert sorted(k.reason for k in report.killed) == ["descendant", "identity"]
    assert root.wait(timeout=5) == -9


def test_a_search_with_nothing_to_start_from_is_not_made(
    turn_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No host, no cgroup, no orphan: the search of the turn's own processes could find
    # nothing, and is skipped; the report is empty and complete, as the search's was.
    def no_search(*args: object, **kwargs: object) -> object:
        raise AssertionError("searched")

    monkeypatch.setattr(process_tree, "_collect_targets", no_search)
    report = process_tree.kill_turn_processes(turn_id, search_all=False)
    assert (report.killed, report.survivors, report.complete) == ([], [], True)


def test_kill_never_touches_foreign_processes(turn_id: str) -> None:
    unmarked = subprocess.Popen(["sleep", "30"])
    other_turn = spawn("exec sleep 30", f"other-{uuid.uuid4()}")
    try:
        ident = process_tree.identify(unmarked.pid, turn_id)
        forged = ident.model_copy(update={"start_time": ident.start_time + 7})
        report = process_tree.kill_turn_processes(turn_id, forged)
        assert report.killed == []
        assert process_tree.is_alive(ident)
        assert process_tree.is_alive(process_tree.identify(other_turn.pid, "x"))
        assert os.getpid() not in process_tree.find_marked_processes(turn_id)
    finally:
        for proc in (unmarked, other_turn):
            proc.kill()
            proc.wait()


def test_own_process_and_ancestors_are_protected() -> None:
    # Pure check of the protection set; never combined with a kill (a faked marker
    # plus a kill would make every process on the machine a target).
    protected = process_tree._protected_pids(process_tree.process_table())
    assert {1, os.getpid(), os.getppid()} <= protected


def test_empty_turn_id_is_rejected() -> None:
    from turnkeeper.errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        process_tree.kill_turn_processes("")
    with pytest.raises(InvalidArgument):
        process_tree.find_marked_processes("  ")


SUBREAPER_SCRIPT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from turnkeeper.hosts import process_tree
    assert process_tree.become_subreaper(reap_interval=0.05)
    assert process_tree.is_child_subreaper()
    env = {**os.environ, "TURNKEEPER_TURN_ID": sys.argv[1]}
    # The intermediate sh dies at once; its setsid child must be adopted by us.
    sh = subprocess.run(["sh", "-c", "setsid sleep 0.5 </dev/null >/dev/null 2>&1 & echo $!"],
                        env=env, capture_output=True, check=True)
    orphan = int(sh.stdout)
    stat = process_tree.read_stat(orphan)
    print("adopted", stat is not None and stat.ppid == os.getpid(), flush=True)
    deadline = time.monotonic() + 10
    while process_tree.read_stat(orphan) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    print("reaped", process_tree.read_stat(orphan) is None, flush=True)
    # A plain subprocess in our own session keeps its exit status (not stolen).
    print("status", subprocess.run(["sh", "-c", "sleep 0.3; exit 3"]).returncode, flush=True)
    """
)


def test_subreaper_adopts_and_reaps_orphans_without_stealing_statuses(turn_id: str) -> None:
    # Run in a child interpreter: becoming a subreaper is process-wide and permanent.
    done = subprocess.run(
        [sys.executable, "-c", SUBREAPER_SCRIPT, turn_id],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["adopted True", "reaped True", "status 3"]
