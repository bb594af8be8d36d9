"""Creating a session, with every refusal made before anything is written.

A session that cannot load its host (or whose agent CLI is not ready: missing, too
old, no key) would fail every turn it is given, and one whose workspace cannot be
snapshotted would complete every turn unsnapshotted with nothing saying so: all are
refused here, as ``turnkeeper session create`` refuses them.
"""

from __future__ import annotations

from pathlib import Path

from turnkeeper.boundary.config_secrets import check_config_has_no_secrets
from turnkeeper.effects import split_host_config
from turnkeeper.errors import FailedPrecondition, InvalidArgument
from turnkeeper.extensions.readiness import check_host_ready
from turnkeeper.hosts import HostLoader, load_host
from turnkeeper.json_types import JsonMapping
from turnkeeper.kernel.session import SessionState
from turnkeeper.runtime.log.request_ids import check_request_id
from turnkeeper.runtime.services.extension_settings import disabled_host_reason
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.workspaces.private_dirs import host_private_dirs, keep_out_of_git
from turnkeeper.runtime.workspaces.snapshots import is_repository, submodule_refusal
from turnkeeper.store.base import EventStore


def check_workspace(workspace: Path, *, snapshots: bool) -> None:
    """A directory; with snapshots, the top of a git repository without submodules."""
    if not workspace.is_dir():
        raise InvalidArgument(f"workspace {workspace} is not a directory", reason="no_workspace")
    if not snapshots:
        return
    if not is_repository(workspace):
        raise FailedPrecondition(
            f"workspace {workspace} is not the top of a git repository: make it one "
            f"(`git init {workspace}`), or create the session without snapshots (--no-snapshots)",
            reason="workspace_not_git",
            details={"workspace": str(workspace)},
        )
    refusal = submodule_refusal(workspace)
    if refusal is not None:
        raise FailedPrecondition(
            f"workspace {workspace} cannot be snapshotted: {refusal}, and a snapshot "
            "holds a submodule as one commit id, so a revert could not bring back what "
            "an agent changed inside it. Use a repository without submodules, or create "
            "the session without snapshots (--no-snapshots)",
            reason="workspace_has_submodules",
            details={"workspace": str(workspace)},
        )


def create_session(
    store: EventStore,
    goal_id: str,
    workspace: Path,
    host: str,
    host_config: JsonMapping,
    *,
    request_id: str,
    snapshots: bool = True,
    site: str | None = None,
    host_loader: HostLoader = load_host,
) -> SessionState:
    """Check everything, then create the session under ``request_id`` (a retry with the
    same id and arguments returns the same session)."""
    check_request_id(request_id)
    # Before anything else reads it: a secret value is never stored (nor echoed).
    check_config_has_no_secrets(host_config)
    check_workspace(workspace, snapshots=snapshots)
    # Loaded as the driver loads it: an unknown kind or a config the host rejects is
    # refused now, not at the first turn.
    loaded = host_loader(host, split_host_config(host_config))
    disabled = disabled_host_reason(store, host)
    if disabled is not None:
        raise FailedPrecondition(
            f"host kind {host!r} is disabled in this project ({disabled}): enable it "
            f"first (turnkeeper extensions enable {host})",
            reason="extension_disabled",
            details={"extension": host, "group": "host"},
        )
    # An agent CLI that is missing, too old or has no key would fail every turn: refused
    # now with the doctor's finding and fix (extensions/readiness.py).
    check_host_ready(host, host_config)
    GoalService(store).load(goal_id)  # NOT_FOUND before anything is written
    if snapshots:  # a git workspace: the host's transcripts inside it stay out of git
        keep_out_of_git(workspace, host_private_dirs(loaded))
    return SessionService(store).create(
        goal_id,
        workspace,
        host,
        host_config,
        request_id=request_id,
        snapshots=snapshots,
        site=site,
    )
