"""A host's private directories inside a session's workspace, kept out of git.

An agent CLI keeps its sessions' transcripts in a directory of its own (Codex's
``CODEX_HOME``, Claude Code's ``CLAUDE_CONFIG_DIR``). When a session's host config puts
that directory inside the workspace, ``git add -A`` would publish the transcripts and
every snapshot would capture them. So ``session create`` writes each such directory
into the repository's ``info/exclude`` — git's own per-repository ignore file, which
is never committed and leaves the user's ``.gitignore`` alone — and snapshots, which
honour git's ignore rules, never capture it. A host names its directories with an
optional ``private_dirs()`` method (hosts/codex.py, hosts/claude.py).

These directories are the user's (their CLI's login and history), so nothing is
written into them; what turnkeeper writes into a workspace itself goes to its own
folder, which ignores itself (hosts/workspace_folder.py). The ``info/exclude`` is the
one git reads: for a linked worktree, the main repository's (``git rev-parse
--git-path``), not the worktree's own git directory, which git never reads it from.
"""

from __future__ import annotations

from pathlib import Path

from turnkeeper.hosts.base import KeepsPrivateDirs
from turnkeeper.runtime.workspaces.gitcmd import git

HEADER = "# turnkeeper: an agent CLI's private directory (session create)"


def host_private_dirs(host: object) -> list[Path]:
    """The directories ``host`` says are its own (none if it says nothing)."""
    return [Path(p) for p in host.private_dirs()] if isinstance(host, KeepsPrivateDirs) else []


def keep_out_of_git(workspace: Path, dirs: list[Path]) -> list[str]:
    """Add each of ``dirs`` that lies inside ``workspace`` to its ``info/exclude``
    (once); the patterns added."""
    root = workspace.resolve()
    wanted: list[str] = []
    for directory in dirs:
        path = directory.expanduser()
        path = (root / path if not path.is_absolute() else path).resolve()
        if path != root and path.is_relative_to(root):
            wanted.append("/" + path.relative_to(root).as_posix() + "/")
    if not wanted:
        return []
    exclude = root / git(root, "rev-parse", "--git-path", "info/exclude").stdout.strip()
    present = set(exclude.read_text().splitlines()) if exclude.exists() else set()
    added = [p for p in dict.fromkeys(wanted) if p not in present]
    if added:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        text = exclude.read_text() if exclude.exists() else ""
        lead = "" if not text or text.endswith("\n") else "\n"
        with exclude.open("a") as handle:
            handle.write(lead + "\n".join([HEADER, *added]) + "\n")
    return added
