"""Every error code the operation API (create, revert, delete, show) can return.

``tests/runtime/test_revert.py`` covers INVALID_ARGUMENT (a bad request id),
NOT_FOUND (session, operation), FAILED_PRECONDITION (missing runtime, deleted
session), ABORTED (conflicting kind, another executor's lease, a stale generation)
and ALREADY_EXISTS (a reused request id); ``test_create_request.py`` the codes of a
create; ``test_revert_head.py`` a branch that moved under the revert (ABORTED) and a
HEAD that cannot go back (FAILED_PRECONDITION). Here: the rest of the runtime checks
(a replaced repository, a lost artifact copy), a session lease held elsewhere
(ABORTED), a transient git failure (UNAVAILABLE, and the revert stays pending for a
retry) and a damaged record (DATA_LOSS). Each refusal leaves nothing admitted.
PERMISSION_DENIED is not produced: the operation API has no access control of its
own (a read-only share is for the API server in front of it).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.crash_support import CrashProject, _git, make_project
from tests.runtime.test_revert import (
    artifact,
    assert_reverted,
    cli_error,
    damage_and_crash,
    event_types,
    resumable_script,
    snapshot_of,
)
from turnkeeper.errors import (
    EXIT_CODES,
    Aborted,
    DataLoss,
    ErrorCode,
    FailedPrecondition,
    NotFound,
    Unavailable,
)
from turnkeeper.runtime.control.controller import Controller
from turnkeeper.runtime.control.operations import Operations
from turnkeeper.runtime.services.sessions import session_stream


@pytest.fixture
def project(tmp_path: Path) -> Iterator[CrashProject]:
    project = make_project(tmp_path / "p", resumable_script())
    (project.repo / ".gitignore").write_text("*.log\n")  # as test_revert.py's project
    _git(project.repo, "add", ".gitignore")
    _git(project.repo, "commit", "-qm", "ignore logs")
    project.run_control_plane("--max-turns", "1")
    damage_and_crash(project)
    try:
        yield project
    finally:
        project.cleanup()


def refused(project: CrashProject, *args: str, code: ErrorCode, reason: str) -> None:
    """The CLI refuses with ``code`` / ``reason`` and the session admitted nothing."""
    exit_code, error = cli_error(project, *args)
    assert (exit_code, error["code"], error["reason"]) == (EXIT_CODES[code], code.value, reason)
    assert project.session().operation is None


def test_a_replaced_repository_or_a_lost_artifact_copy_is_failed_precondition(
    project: CrashProject, tmp_path: Path
) -> None:
    sid, precondition = project.session_id, ErrorCode.FAILED_PRECONDITION
    revert = ("session", "revert", sid, "--request-id", "r1")
    # The snapshot's copy of the host artifact is gone: nothing to restore it from.
    last = project.session().last_completed
    assert last is not None and last.snapshot.host_artifact_copy is not None
    copy = Path(last.snapshot.host_artifact_copy)
    kept = copy.read_bytes()
    copy.unlink()
    refused(project, *revert, code=precondition, reason="artifact_copy_missing")
    copy.write_bytes(kept)
    # Another repository in the workspace's place: the snapshot commit is not in it.
    git_dir = project.repo / ".git"
    git_dir.rename(tmp_path / "real-git")
    subprocess.run(["git", "init", "-q"], cwd=project.repo, check=True, timeout=60)
    refused(project, *revert, code=precondition, reason="runtime_replaced")
    shutil.rmtree(git_dir)
    (tmp_path / "real-git").rename(git_dir)
    # The real runtime back: the same request reverts.
    tree, copy_bytes = snapshot_of(project)
    assert project.cli(*revert, "--json").json()["result"] == "reverted"
    assert_reverted(project, tree, copy_bytes)


def test_a_session_lease_held_by_a_live_controller_elsewhere_is_aborted(
    project: CrashProject,
) -> None:
    sid = project.session_id
    with project.store() as store:
        elsewhere = Controller(store, owner="ctl:another-machine:1:1")
        elsewhere.acquire(sid)  # running there: it cannot be proven dead from here
        with pytest.raises(Aborted) as held:
            Operations(store).revert(sid, "r1")
        assert held.value.reason == "lease_held"
        with pytest.raises(Aborted):
            Operations(store).delete(sid, "d1")
        assert elsewhere.sessions.load(sid).operation is None
        elsewhere.release(sid)
        assert Operations(store).revert(sid, "r1").result == "reverted"


def test_a_transient_git_failure_is_unavailable_and_the_revert_stays_pending(
    project: CrashProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = project.session_id
    tree, copy = snapshot_of(project)
    real_run = subprocess.run

    def timing_out(args: Any, *rest: Any, **kwargs: Any) -> Any:
        if isinstance(args, list) and "checkout-index" in args:
            raise subprocess.TimeoutExpired(args, 120)
        return real_run(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "run", timing_out)
    with project.store() as store, pytest.raises(Unavailable) as transient:
        Operations(store).revert(sid, "r1")
    assert (transient.value.code, transient.value.reason) == (
        ErrorCode.UNAVAILABLE,
        "git_timeout",
    )
    pending = project.session().operation
    assert pending is not None and (pending.kind, pending.steps) == ("revert", ())
    monkeypatch.undo()
    with project.store() as store:
        assert Operations(store).revert(sid, "r2").result == "reverted"
    assert_reverted(project, tree, copy)
    assert event_types(project).count("operation.step_recorded") == 1


def test_a_damaged_operation_record_is_data_loss(project: CrashProject) -> None:
    sid = project.session_id

    def fault(name: str) -> None:
        if name == "revert.admitted":
            raise RuntimeError(name)

    with project.store() as store, pytest.raises(RuntimeError):
        Operations(store, fault=fault).revert(sid, "r1")
    where = (session_stream(sid),)
    select = "SELECT payload FROM events WHERE stream_id = ? AND type = 'operation.started'"
    update = "UPDATE events SET payload = ? WHERE stream_id = ? AND type = 'operation.started'"
    conn = sqlite3.connect(project.db_path)
    try:
        [(original,)] = conn.execute(select, where).fetchall()
        with conn:  # the record now says "delete" under the checksum of "revert"
            conn.execute(update, (original.replace('"revert"', '"delete"'), *where))
        for args in (
            ("operation", "show", "r1"),
            ("session", "revert", sid, "--request-id", "r1"),
        ):
            result = project.cli(*args, "--json", crash_at="")  # may fail, is never killed
            error = json.loads(result.stdout)["error"]
            assert result.returncode == EXIT_CODES[ErrorCode.DATA_LOSS], result.describe()
            assert error["code"] == "DATA_LOSS"
            assert error["details"]["stream_id"] == session_stream(sid)
        with project.store() as store, pytest.raises(DataLoss):
            Operations(store).show("r1")
    finally:
        with conn:  # put the record back, so the teardown can read the log
            conn.execute(update, (original, *where))
        conn.close()
    assert artifact(project).exists()  # nothing was restored from a record that lies


def test_unknown_sessions_and_deleted_ones(project: CrashProject) -> None:
    unknown = "00000000-0000-4000-8000-00000000beef"
    with project.store() as store:
        ops = Operations(store)
        with pytest.raises(NotFound):
            ops.delete(unknown, "d1")
        assert ops.delete(project.session_id, "d1").result == "deleted"
        with pytest.raises(FailedPrecondition) as deleted:
            ops.revert(project.session_id, "r1")
    assert deleted.value.reason == "session_deleted"
