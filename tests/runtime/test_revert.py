"""Revert and durable operations, on the real control plane and scripted host.

The project: ``t1`` completes (one turn, its snapshot taken), then the workspace and
the host session file are damaged and the session is crashed. A revert restores the
snapshot byte for byte (tree hash, host artifact), the next turn resumes the host
session from there; a fault at each revert step (an injected exception, or a real
SIGKILL of the CLI at a ``revert.*`` crash point) is completed by a retry with
exactly one restore; delete supersedes a pending revert and leaves no orphan; each
error code of the operation API is exercised.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.crash_support import (
    FILE_A,
    TITLE_A,
    CrashProject,
    _git,
    assert_goal_completed,
    make_project,
    standard_script,
)
from turnkeeper.crashpoints import REVERT_POINTS
from turnkeeper.errors import (
    EXIT_CODES,
    Aborted,
    AlreadyExists,
    ErrorCode,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from turnkeeper.kernel.session import SetStatus
from turnkeeper.kernel.session.commands import BeginOperation
from turnkeeper.runtime.control.controller import Controller
from turnkeeper.runtime.control.operations import Operations, payload_digest
from turnkeeper.runtime.services.sessions import session_stream
from turnkeeper.runtime.workspaces.snapshots import REF_PREFIX, session_refs, workspace_tree


class InjectedError(Exception):
    """A fault injected at a revert step."""


def resumable_script() -> list[dict[str, Any]]:
    """``t1``'s first turn writes ``a.txt`` but does not finish the todo, so the turn
    after it is a continuation that resumes the host session; then ``t2``."""
    first = {
        "match": {"todo": TITLE_A, "kind": "start"},
        "steps": [{"op": "write", "path": FILE_A, "content": "draft\n"}],
        "result": {"summary": "drafted"},
    }
    return [first, *standard_script()]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[CrashProject]:
    project = make_project(tmp_path / "p", resumable_script())
    (project.repo / ".gitignore").write_text("*.log\n")
    _git(project.repo, "add", ".gitignore")
    _git(project.repo, "commit", "-qm", "ignore logs")
    project.run_control_plane("--max-turns", "1")  # t1 completes with its snapshot
    try:
        yield project
    finally:
        project.cleanup()


def artifact(project: CrashProject) -> Path:
    handle = project.session().host_session_handle
    return project.host_state / "sessions" / f"{handle}.jsonl"


def damage_and_crash(project: CrashProject) -> None:
    """What a crashed turn leaves: changed, added and removed files, a grown host
    session file; then the operator marks the session crashed."""
    (project.repo / "a.txt").unlink()
    (project.repo / "README").write_text("overwritten\n")
    (project.repo / "b.txt").write_text("partial\n")
    (project.repo / "junk").mkdir()
    (project.repo / "junk" / "x.txt").write_text("x\n")
    (project.repo / "keep.log").write_text("ignored, survives\n")
    with artifact(project).open("a") as handle:
        handle.write('{"type": "turn", "partial": tr')  # a crash mid-write: truncated
    project.cli("session", "crash", project.session_id, "--json")
    assert project.session().status == "crashed"


def snapshot_of(project: CrashProject) -> tuple[str, bytes]:
    last = project.session().last_completed
    assert last is not None
    assert last.snapshot.workspace_tree is not None
    assert last.snapshot.host_artifact_copy is not None
    return last.snapshot.workspace_tree, Path(last.snapshot.host_artifact_copy).read_bytes()


def assert_reverted(project: CrashProject, tree: str, copy: bytes) -> None:
    assert workspace_tree(project.repo) == tree
    assert artifact(project).read_bytes() == copy
    assert (project.repo / "keep.log").read_text() == "ignored, survives\n"
    assert not (project.repo / "junk").exists()
    state = project.session()
    assert state.status == "suspended"
    assert state.operation is None


def event_types(project: CrashProject) -> list[str]:
    return [r.type for r in project.session_records()]


def test_revert_restores_the_snapshot_and_the_next_turn_resumes_from_it(
    project: CrashProject,
) -> None:
    tree, copy = snapshot_of(project)
    damage_and_crash(project)
    done = project.cli(
        "session", "revert", project.session_id, "--request-id", "r1", "--json"
    ).json()
    assert done["result"] == "reverted"
    assert done["session"]["status"] == "suspended"
    assert_reverted(project, tree, copy)
    shown = project.cli("operation", "show", "r1", "--json").json()
    assert (shown["kind"], shown["status"], shown["outcome"]) == ("revert", "finished", "reverted")
    assert shown["steps"] == ["restored"]
    # A retry whose answer was lost gets the same result, and changes nothing.
    before = event_types(project)
    again = project.cli("session", "revert", project.session_id, "--request-id", "r1", "--json")
    assert again.json()["result"] == "reverted"
    other = project.cli("session", "revert", project.session_id, "--request-id", "r9", "--json")
    assert other.json()["result"] == "unchanged"  # not crashed: comes back unchanged
    assert event_types(project) == before
    # Resume and run: the next turn resumes the host session from the restored file.
    with project.store() as store:
        controller = Controller(store)
        token = controller.acquire(project.session_id)
        controller.sessions.execute(project.session_id, SetStatus(lease=token, action="resume"))
        controller.release(project.session_id)
    session_file = artifact(project)
    project.run_control_plane()
    assert_goal_completed(project)
    # The continuation on t1 resumed the same host session file (a truncated one would
    # have failed it as a protocol error) and appended to it.
    resumed = session_file.read_bytes()
    assert resumed.startswith(copy)
    assert len(resumed) > len(copy)
    assert b'"partial": tr' not in resumed
    kinds = [run["kind"] for run in project.runs()]
    assert kinds[:2] == ["start", "continuation"], kinds


@pytest.mark.parametrize("point", REVERT_POINTS)
def test_a_fault_at_each_revert_step_is_completed_by_a_retry(
    project: CrashProject, point: str
) -> None:
    tree, copy = snapshot_of(project)
    damage_and_crash(project)

    def fault(name: str) -> None:
        if name == point:
            raise InjectedError(name)

    with project.store() as store, pytest.raises(InjectedError):
        Operations(store, fault=fault).revert(project.session_id, "r1")
    with project.store() as store:
        done = Operations(store).revert(project.session_id, "r1")
    assert done.result == "reverted"
    assert_reverted(project, tree, copy)
    types = event_types(project)
    assert types.count("operation.started") == 1
    assert types.count("operation.step_recorded") == 1  # exactly one restore
    assert types.count("operation.finished") == 1


@pytest.mark.parametrize("point", REVERT_POINTS)
def test_a_sigkilled_revert_is_completed_by_a_retry(project: CrashProject, point: str) -> None:
    tree, copy = snapshot_of(project)
    damage_and_crash(project)
    args = ("session", "revert", project.session_id, "--request-id", "r1", "--json")
    killed = project.cli(*args, crash_at=point)
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    retried = project.cli(*args).json()
    assert retried["result"] == "reverted"
    assert_reverted(project, tree, copy)
    types = event_types(project)
    assert types.count("operation.step_recorded") == 1
    assert types.count("operation.finished") == 1


def test_admission_fails_the_interrupted_turn_with_a_crash_note(project: CrashProject) -> None:
    tree, copy = snapshot_of(project)
    project.run_control_plane(crash_at="turn.accepted")  # t2 accepted, never run
    assert project.session().in_flight is not None
    project.cli("session", "crash", project.session_id, "--json")
    with project.store() as store:
        Operations(store).revert(project.session_id, "r1")
    state = project.session()
    assert state.in_flight is None
    assert state.last_turn_end is not None and state.last_turn_end.outcome == "failed"
    assert state.last_diagnostic is not None
    assert state.last_diagnostic.code == "crashed_turn_reverted"
    assert state.last_diagnostic.turn_id == state.last_turn_end.turn_id
    assert workspace_tree(project.repo) == tree
    assert artifact(project).read_bytes() == copy


def test_delete_supersedes_a_pending_revert_and_leaves_no_orphan(project: CrashProject) -> None:
    damage_and_crash(project)
    sid = project.session_id

    def fault(name: str) -> None:
        if name == "revert.admitted":
            raise InjectedError(name)

    with project.store() as store, pytest.raises(InjectedError):
        Operations(store, fault=fault).revert(sid, "r1")
    assert project.session().operation is not None
    deleted = project.cli("session", "delete", sid, "--request-id", "d1", "--json").json()
    assert deleted["result"] == "deleted"
    assert project.session().status == "deleted"
    assert session_refs(project.repo, sid) == []
    assert not (project.repo / ".turnkeeper" / "snapshots" / sid).exists()
    refs = project.cli("session", "snapshots", sid, "--json").json()["snapshots"]
    assert not any(r["retained"] for r in refs)
    shown = project.cli("operation", "show", "r1", "--json").json()
    assert (shown["outcome"], shown["superseded_by"]) == ("superseded", "d1")
    with project.store() as store:
        ops = Operations(store)
        assert ops.revert(sid, "r1").result == "superseded"  # the retry sees the outcome
        assert ops.delete(sid, "d1").result == "deleted"
        assert ops.delete(sid, "d2").result == "unchanged"
        with pytest.raises(FailedPrecondition) as gone:
            ops.revert(sid, "r2")
    assert gone.value.reason == "session_deleted"
    assert REF_PREFIX not in _git_out(project.repo, "for-each-ref")


def test_a_closed_session_is_deleted_with_everything_it_kept(project: CrashProject) -> None:
    sid = project.session_id
    result = project.run_control_plane()  # the goal closes, and so does the session
    assert result.summary()["stops"] == {sid: "goal_terminal"}, result.describe()
    assert project.session().status == "closed"
    assert project.session().lease.owner is None  # the run gave its lease back
    assert session_refs(project.repo, sid)
    assert (project.repo / ".turnkeeper" / "snapshots" / sid).is_dir()
    refused = project.cli("session", "revert", sid, "--request-id", "r1", "--json")
    assert refused.json()["result"] == "unchanged"  # a closed session is not crashed
    deleted = project.cli("session", "delete", sid, "--request-id", "d1", "--json").json()
    assert (deleted["result"], deleted["session"]["status"]) == ("deleted", "deleted")
    assert session_refs(project.repo, sid) == []
    assert not (project.repo / ".turnkeeper" / "snapshots" / sid).exists()
    assert "refs/turnkeeper/" not in _git_out(project.repo, "for-each-ref")
    shown = project.cli("operation", "show", "d1", "--json").json()
    assert (shown["kind"], shown["outcome"]) == ("delete", "deleted")
    # The goal's work stays: deleting a session removes turnkeeper's copies only.
    assert (project.repo / "a.txt").read_text() == "A\n"
    assert (project.repo / "b.txt").read_text() == "B\n"


def test_a_closed_session_whose_delete_was_interrupted_is_deleted_by_a_retry(
    project: CrashProject,
) -> None:
    sid = project.session_id
    project.run_control_plane()
    assert project.session().status == "closed"
    args = ("session", "delete", sid, "--request-id", "d1", "--json")
    killed = project.cli(*args, crash_at="delete.admitted")
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    state = project.session()
    assert state.status == "closed"
    assert state.operation is not None and state.operation.kind == "delete"
    # Another request joins the pending delete; the dead executor is taken over.
    retried = project.cli("session", "delete", sid, "--request-id", "d2", "--json").json()
    assert retried["result"] == "deleted"
    assert retried["operation"]["root_request_id"] == "d1"
    assert session_refs(project.repo, sid) == []
    assert not (project.repo / ".turnkeeper" / "snapshots" / sid).exists()


def test_a_delayed_caller_with_a_superseded_generation_changes_nothing(
    project: CrashProject,
) -> None:
    damage_and_crash(project)
    sid = project.session_id
    before = event_types(project)
    with project.store() as store:
        controller = Controller(store)
        token = controller.acquire(sid)
        lease_events = store.head(session_stream(sid))
        state = controller.sessions.load(sid)
        stale = BeginOperation(
            lease=token,
            request_id="late",
            kind="revert",
            payload_digest=payload_digest("revert", sid),
            executor=controller.owner,
            lease_expires_at=token_expiry(controller, sid),
            expected_generation=state.generation + 1,
        )
        with pytest.raises(Aborted) as err:
            controller.sessions.execute(sid, stale)
        assert err.value.reason == "stale_generation"
        assert store.head(session_stream(sid)) == lease_events
        controller.release(sid)
    assert event_types(project)[: len(before)] == before
    assert project.session().status == "crashed"


def _git_out(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True, timeout=60
    ).stdout


def token_expiry(controller: Controller, sid: str) -> datetime:
    expires = controller.sessions.load(sid).lease.expires_at
    assert expires is not None
    return expires


# --- every error code of the operation API ----------------------------------------------


def cli_error(project: CrashProject, *args: str) -> tuple[int, dict[str, str]]:
    result = project.cli(*args, "--json", crash_at="")  # crash_at="" : may fail, no kill
    return result.returncode, json.loads(result.stdout)["error"]


def test_operation_api_error_codes(project: CrashProject, tmp_path: Path) -> None:
    sid = project.session_id
    with project.store() as store:
        ops = Operations(store)
        with pytest.raises(InvalidArgument):
            ops.revert(sid, "")
        with pytest.raises(NotFound):
            ops.revert("00000000-0000-4000-8000-00000000dead", "r1")
        with pytest.raises(NotFound):
            ops.show("nope")
        assert ops.revert(sid, "r0").result == "unchanged"  # not crashed
    damage_and_crash(project)
    # The runtime is missing (no repository): FAILED_PRECONDITION, not a crash.
    git_dir = project.repo / ".git"
    git_dir.rename(tmp_path / "moved-git")
    with project.store() as store, pytest.raises(FailedPrecondition) as missing:
        Operations(store).revert(sid, "r1")
    assert missing.value.reason == "runtime_missing"
    (tmp_path / "moved-git").rename(git_dir)
    assert project.session().operation is None  # nothing admitted

    # A pending delete conflicts with a revert: ABORTED.
    def fault(name: str) -> None:
        if name == "delete.admitted":
            raise InjectedError(name)

    with project.store() as store, pytest.raises(InjectedError):
        Operations(store, fault=fault).delete(sid, "d1")
    with project.store() as store, pytest.raises(Aborted) as conflict:
        Operations(store).revert(sid, "r1")
    assert conflict.value.reason == "operation_conflict"
    # Same request id, another payload: ALREADY_EXISTS.
    with project.store() as store, pytest.raises(AlreadyExists):
        Operations(store).revert(sid, "d1")
    # The same through the CLI: codes and exit codes.
    code, error = cli_error(project, "session", "revert", sid, "--request-id", "d1")
    assert (code, error["code"]) == (EXIT_CODES[ErrorCode.ALREADY_EXISTS], "ALREADY_EXISTS")
    code, error = cli_error(project, "session", "revert", sid, "--request-id", "r1")
    assert (code, error["reason"]) == (EXIT_CODES[ErrorCode.ABORTED], "operation_conflict")
    code, error = cli_error(project, "operation", "show", "missing")
    assert (code, error["code"]) == (EXIT_CODES[ErrorCode.NOT_FOUND], "NOT_FOUND")
    # Another live executor holds the pending operation: ABORTED operation_leased.
    with project.store() as store, pytest.raises(Aborted) as leased:
        Operations(store, owner="ctl:elsewhere:1:1").delete(sid, "d1")
    assert leased.value.reason == "operation_leased"
    # Its own executor's retry completes it.
    with project.store() as store:
        assert Operations(store).delete(sid, "d1").result == "deleted"


# --- crash detection at the start of a turn ---------------------------------------------


@pytest.mark.parametrize(
    ("damage", "reason"),
    [("missing", "host_artifact_missing"), ("changed", "host_artifact_digest_mismatch")],
)
def test_a_damaged_host_artifact_crashes_the_session_before_the_next_turn(
    project: CrashProject, damage: str, reason: str
) -> None:
    runs_before = len(project.runs())
    if damage == "missing":
        artifact(project).unlink()
    else:
        with artifact(project).open("a") as handle:
            handle.write('{"type": "tampered"}\n')
    # The session is marked crashed: run exits 11 (README, "Errors and exit codes").
    result = project.run_control_plane(expect=11)
    assert any(reason in line for line in result.progress), result.describe()
    assert result.summary()["outcomes"] == {project.session_id: "crashed"}, result.describe()
    state = project.session()
    assert state.status == "crashed"
    assert state.in_flight is None
    assert len(project.runs()) == runs_before  # the host never ran on the damaged file
    # The revert brings it back; the snapshot's copy is the artifact again.
    tree, copy = snapshot_of(project)
    with project.store() as store:
        assert Operations(store).revert(project.session_id, "r1").result == "reverted"
    assert artifact(project).read_bytes() == copy
    assert workspace_tree(project.repo) == tree
