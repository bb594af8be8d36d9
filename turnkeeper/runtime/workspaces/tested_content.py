"""What a check ran on: the worktree's whole content, named by a git tree id.

Evidence is bound to what was tested. HEAD alone does not say that: an agent's work
is often uncommitted for many turns, and every record would name the same commit.
The tree id of the worktree as it is (tracked and untracked-not-ignored files, built
in a throwaway index as a snapshot's is, so the user's index is untouched) differs as
soon as any of that content does, and is the same for the same content.

It costs three git processes (read the user's index path, ``add -A``,
``write-tree``); a check is a command run, seconds long, so this is paid only where a
record is made, never per turn.
"""

from __future__ import annotations

import logging
from pathlib import Path

from turnkeeper.errors import TurnkeeperError
from turnkeeper.runtime.workspaces.gitcmd import git
from turnkeeper.runtime.workspaces.scratch_index import workspace_tree
from turnkeeper.runtime.workspaces.workspace import discovery_overridden, git_marker

log = logging.getLogger(__name__)


def tested_tree(cwd: Path) -> str | None:
    """The tree id of the worktree ``cwd`` is in, now; None outside a repository.

    A repository git cannot read (a damaged index, a timeout) gives None too, logged:
    the record then says "content unknown" rather than refusing the evidence."""
    if not discovery_overridden() and git_marker(cwd.resolve()) is None:
        return None
    try:
        top = git(cwd, "rev-parse", "--show-toplevel", check=False)
        if top.returncode != 0 or not top.stdout.strip():
            return None
        return workspace_tree(Path(top.stdout.strip()))
    except TurnkeeperError as error:
        log.warning("cannot read the worktree's content in %s: %s", cwd, error)
        return None
