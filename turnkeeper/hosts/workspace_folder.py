"""turnkeeper's own folder inside a session's workspace, which ``git add -A`` never takes.

What turnkeeper keeps inside a workspace lives under ``<workspace>/.turnkeeper/``: the
copies of a host's transcript each snapshot takes (a Codex rollout, a Claude
transcript: runtime/workspaces/snapshots.py) and the scripted host's state. When the
workspace is the project's own repository, the ``.turnkeeper/`` line ``turnkeeper
init`` adds to its ``.gitignore`` keeps them out of git; a workspace that is a
repository of its own has no such line, and ``git add -A`` there would commit the
transcripts. So whoever creates the folder makes it ignore itself: a ``.gitignore``
inside it holding ``*`` (as pytest, mypy and virtualenv do with theirs).

Why that rather than the repository's ``info/exclude``: the file goes where the folder
goes. It holds for whichever repository the workspace is or later becomes (``git init``
after the first turn, a linked worktree, whose ``info/`` is the main repository's), it
needs no git, and it leaves every file of the user's — ``.gitignore`` committed or not,
``info/exclude`` — as it was. A ``.gitignore`` already in the folder is never replaced.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

FOLDER_NAME = ".turnkeeper"
RULES_FILE = ".gitignore"
RULES = "# turnkeeper's private files: never to be committed (written by turnkeeper)\n*\n"


def workspace_folder(workspace: Path) -> Path:
    """``<workspace>/.turnkeeper/``, created if need be and ignoring itself."""
    folder = workspace / FOLDER_NAME
    folder.mkdir(exist_ok=True)
    ignore_itself(folder)
    return folder


def ignore_itself(folder: Path) -> None:
    """Give ``folder`` (it exists) a ``.gitignore`` that ignores all of it, itself
    included, unless it has one. Written whole — a temporary file linked into place —
    so a crash never leaves a half-written one that would stop the next call."""
    target = folder / RULES_FILE
    if os.path.lexists(target):
        return
    scratch = folder / f"{RULES_FILE}.{os.getpid()}.tmp"
    scratch.write_text(RULES)
    try:
        os.link(scratch, target)  # never replaces a file another writer put there
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        # A file system without hard links: a rename, which can replace only a file
        # written in the instant since the check above (the same rules, by turnkeeper).
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)
