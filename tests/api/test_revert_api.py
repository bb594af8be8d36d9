"""Revert and delete over HTTP, on each backend, with the real scripted host and git.

The session's first turn completes with its snapshot; then the workspace is damaged
as a crashed turn would leave it. A read-only share is refused (403) and nothing
changes, in the store or the worktree; an update share crashes and reverts the
session; a retried ``Idempotency-Key`` joins the operation (after a fault mid-revert
too, with exactly one restore); a delete supersedes a pending revert.
"""

from __future__ import annotations

import pytest

from tests.api.conftest import ApiProject, git
from turnkeeper.runtime.control.operations import Operations
from turnkeeper.runtime.services.sessions import session_stream


class InjectedError(Exception):
    """A fault injected at a revert step (the revert stays pending)."""


def _damage(project: ApiProject) -> None:
    (project.root / "README").write_text("overwritten by a crashed turn\n")
    (project.root / "junk.txt").write_text("half-done work\n")


def _restored(project: ApiProject) -> bool:
    return (project.root / "README").read_text() == "api test workspace\n" and not (
        project.root / "junk.txt"
    ).exists()


def _interrupted_revert(project: ApiProject, request_id: str, point: str) -> None:
    def fault(name: str) -> None:
        if name == point:
            raise InjectedError(name)

    with pytest.raises(InjectedError):
        Operations(project.store, fault=fault).revert(project.session_id, request_id)
    assert (
        project.client.get(f"/v1/sessions/{project.session_id}", headers=project.headers()).json()[
            "operation"
        ]["request_id"]
        == request_id
    )


def _types(project: ApiProject) -> list[str]:
    return [r.type for r in project.store.read_stream(session_stream(project.session_id))]


def test_revert_through_the_api(api_project: ApiProject) -> None:
    project = api_project
    sid = project.session_id
    project.run_turns(1)
    assert (project.root / "a.txt").read_text() == "A\n"
    _damage(project)
    reader = project.headers(project.share(sid, "read"))
    updater = project.headers(project.share(sid, "update"))
    client = project.client

    # A read-only share may neither crash nor revert: 403, and nothing changes.
    before = project.digest()
    for action in ("crash", "revert"):
        answer = client.post(
            f"/v1/sessions/{sid}/{action}", headers={**reader, "Idempotency-Key": "r1"}
        )
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "PERMISSION_DENIED"
    assert project.digest() == before
    assert (project.root / "junk.txt").exists()

    # The update share crashes the session and reverts it.
    crashed = client.post(f"/v1/sessions/{sid}/crash", headers=updater)
    assert crashed.json()["session"]["status"] == "crashed", crashed.text
    missing_key = client.post(f"/v1/sessions/{sid}/revert", headers=updater)
    assert missing_key.status_code == 400
    assert missing_key.json()["error"]["code"] == "INVALID_ARGUMENT"
    done = client.post(f"/v1/sessions/{sid}/revert", headers={**updater, "Idempotency-Key": "r1"})
    assert done.status_code == 200, done.text
    body = done.json()
    assert (body["result"], body["session"]["status"]) == ("reverted", "suspended")
    assert body["operation"]["steps"] == ["restored"]
    assert _restored(project)
    assert "junk.txt" in body["preserved"]["paths"]

    # The same key again: the same answer, nothing written.
    before = project.digest()
    again = client.post(f"/v1/sessions/{sid}/revert", headers={**updater, "Idempotency-Key": "r1"})
    assert again.json()["result"] == "reverted"
    assert again.json()["operation"]["request_id"] == "r1"
    assert project.digest() == before
    # The key names a revert of this session: another operation under it is refused.
    reused = client.delete(
        f"/v1/sessions/{sid}", headers={**project.headers(), "Idempotency-Key": "r1"}
    )
    assert reused.status_code == 422
    assert reused.json()["error"]["reason"] == "request_id_reused"


def test_a_retried_key_joins_an_interrupted_revert(api_project: ApiProject) -> None:
    project = api_project
    sid = project.session_id
    project.run_turns(1)
    _damage(project)
    updater = {**project.headers(project.share(sid, "update")), "Idempotency-Key": "r2"}
    assert project.client.post(f"/v1/sessions/{sid}/crash", headers=updater).is_success
    _interrupted_revert(project, "r2", "revert.restoring")  # restored, not recorded
    done = project.client.post(f"/v1/sessions/{sid}/revert", headers=updater)
    assert done.status_code == 200, done.text
    assert done.json()["result"] == "reverted"
    assert _restored(project)
    types = _types(project)
    assert types.count("operation.started") == 1
    assert types.count("operation.step_recorded") == 1  # exactly one restore
    assert types.count("operation.finished") == 1
    shown = project.client.get("/v1/operations/r2", headers=project.headers()).json()
    assert (shown["kind"], shown["status"], shown["outcome"]) == ("revert", "finished", "reverted")


def test_delete_supersedes_a_pending_revert(api_project: ApiProject) -> None:
    project = api_project
    sid = project.session_id
    project.run_turns(1)
    _damage(project)
    updater = project.headers(project.share(sid, "update"))
    assert project.client.post(f"/v1/sessions/{sid}/crash", headers=updater).is_success
    _interrupted_revert(project, "r3", "revert.admitted")
    # Delete needs the admin: an update share may not.
    refused = project.client.delete(
        f"/v1/sessions/{sid}", headers={**updater, "Idempotency-Key": "d1"}
    )
    assert refused.status_code == 403
    deleted = project.client.delete(
        f"/v1/sessions/{sid}", headers={**project.headers(), "Idempotency-Key": "d1"}
    )
    assert deleted.status_code == 200, deleted.text
    assert (deleted.json()["result"], deleted.json()["session"]["status"]) == ("deleted", "deleted")
    revert = project.client.get("/v1/operations/r3", headers=project.headers()).json()
    assert (revert["outcome"], revert["superseded_by"]) == ("superseded", "d1")
    assert "refs/turnkeeper/" not in git(project.root, "for-each-ref")
    # The retried revert sees its outcome; the deleted session's share works no more.
    retried = project.client.post(
        f"/v1/sessions/{sid}/revert", headers={**project.headers(), "Idempotency-Key": "r3"}
    )
    assert retried.json()["result"] == "superseded"
    gone = project.client.get(f"/v1/sessions/{sid}", headers=updater)
    assert gone.status_code == 403
    assert gone.json()["error"]["reason"] == "session_deleted"
