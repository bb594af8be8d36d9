"""Creating a session, with every refusal made before anything is written.

A session that cannot load its host (or whose agent CLI is not ready: missing, too
old, no key) would fail every turn it is given, and one whose workspace cannot be
snapshotted would complete every turn unsnapshotted with nothing saying so: all are
refused here, as ``turnkeeper session create`` refuses them.

The workspace a user names (``session create --workspace``, the API's ``workspace``)
goes through :func:`resolve_workspace` before anything else touches it: made
absolute, its links resolved, checked to be a directory. Whatever the system says of
it there or in the checks after (a name too long, a loop of links, a component that
is a file, no permission) is a typed refusal naming the path, clipped, never an
unexpected ``OSError``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from turnkeeper.boundary.config_secrets import check_config_has_no_secrets
from turnkeeper.effects import split_host_config
from turnkeeper.errors import FailedPrecondition, InvalidArgument, TurnkeeperError
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

# How much of a path a refusal quotes: the API accepts 4,096 characters, and a message
# that quotes them all buries what went wrong.
_SHOWN_HEAD, _SHOWN_TAIL = 100, 60
# What the system says of a path that names no directory it could use: the caller's
# path is wrong (INVALID_ARGUMENT). Anything else (no permission, an I/O error) is the
# state of this machine (FAILED_PRECONDITION).
_MISSING = frozenset({errno.ENOENT, errno.ENOTDIR})
_MALFORMED = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.EINVAL})


def shown_path(path: Path | str) -> str:
    """``path`` as a refusal quotes it: whole, or its start and end around an ellipsis."""
    text = os.fspath(path)
    if len(text) <= _SHOWN_HEAD + _SHOWN_TAIL:
        return text
    return f"{text[:_SHOWN_HEAD]}…{text[-_SHOWN_TAIL:]} ({len(text)} characters)"


def workspace_refusal(workspace: Path | str, error: OSError) -> TurnkeeperError:
    """The typed refusal of a workspace the system could not handle as ``error`` says."""
    shown = shown_path(workspace)
    code = errno.errorcode.get(error.errno or 0, "unknown")
    details: dict[str, object] = {"workspace": shown, "errno": code}
    why = error.strerror or str(error)
    if error.errno in _MISSING:
        return InvalidArgument(
            f"workspace {shown} is not a directory ({why})", reason="no_workspace", details=details
        )
    if error.errno in _MALFORMED:
        return InvalidArgument(
            f"workspace {shown} cannot be used as a path: {why}",
            reason="bad_workspace_path",
            details=details,
        )
    return FailedPrecondition(
        f"workspace {shown} cannot be reached here: {why}",
        reason="workspace_unreachable",
        details=details,
    )


@contextmanager
def refusing_os_errors(workspace: Path | str) -> Iterator[None]:
    """An ``OSError`` met on ``workspace`` in the block becomes its typed refusal."""
    try:
        yield
    except OSError as error:
        raise workspace_refusal(workspace, error) from None


def resolve_workspace(workspace: Path) -> Path:
    """The directory ``workspace`` names (relative: to the current directory),
    absolute and with its links resolved: what the session records."""
    with refusing_os_errors(workspace):
        # Strict: a missing component, a loop of links or a name too long is said now,
        # by the system, rather than found by the first turn.
        resolved = Path(os.path.realpath(workspace, strict=True))
        if not stat.S_ISDIR(resolved.stat().st_mode):
            raise InvalidArgument(
                f"workspace {shown_path(workspace)} is not a directory",
                reason="no_workspace",
                details={"workspace": shown_path(workspace)},
            )
    return resolved


def check_workspace(workspace: Path, *, snapshots: bool) -> Path:
    """The resolved directory (:func:`resolve_workspace`); with snapshots, checked to be
    the top of a git repository without submodules."""
    workspace = resolve_workspace(workspace)
    if not snapshots:
        return workspace
    with refusing_os_errors(workspace):
        _check_snapshottable(workspace)
    return workspace


def _check_snapshottable(workspace: Path) -> None:
    shown = shown_path(workspace)
    if not is_repository(workspace):
        raise FailedPrecondition(
            f"workspace {shown} is not the top of a git repository: make it one "
            f"(`git init {shown}`), or create the session without snapshots (--no-snapshots)",
            reason="workspace_not_git",
            details={"workspace": shown},
        )
    refusal = submodule_refusal(workspace)
    if refusal is not None:
        raise FailedPrecondition(
            f"workspace {shown} cannot be snapshotted: {refusal}, and a snapshot "
            "holds a submodule as one commit id, so a revert could not bring back what "
            "an agent changed inside it. Use a repository without submodules, or create "
            "the session without snapshots (--no-snapshots)",
            reason="workspace_has_submodules",
            details={"workspace": shown},
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
    workspace = check_workspace(workspace, snapshots=snapshots)
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
        with refusing_os_errors(workspace):
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
