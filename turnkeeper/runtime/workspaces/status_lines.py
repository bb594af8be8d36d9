"""``git status --porcelain``'s lines, read in this process through libgit2 (pygit2).

A turn's brief lists the workspace's uncommitted changes as ``git status
--porcelain`` prints them. Starting git for it cost a working turn a process (some
2-3 ms of CPU); libgit2 reads the same index, HEAD and files in this process in well
under a millisecond. The lines are git's, byte for byte: the two-letter codes, the
paths relative to the top level, sorted as git sorts them (changes first, then the
untracked ones), quoted as git quotes them (``core.quotePath``, a space), an untracked
directory as one ``dir/`` line (``status.showUntrackedFiles``), ignored files left
out (``.turnkeeper/`` ignores itself), a staged rename as ``R  old -> new``.

The user's index is only read: unlike ``git status``, nothing here refreshes its stat
cache, so the user's git never meets a lock of turnkeeper's.

Where libgit2 would not say what git says, git answers (:func:`porcelain_lines` gives
None): where :func:`libgit.open_user` declines (a linked worktree, filter drivers, a
sparse checkout, configuration from the environment, another HOME), submodules
(``.gitmodules``, a gitlink among the changes), an unmerged path (git's ``UU``,
``AU``...), an entry added with ``--intent-to-add``, status or rename settings this
module does not read (``status.renameLimit``, ``diff.renames=copies``...), or any
path libgit2 refuses.

One documented difference: which staged deletion and addition pair up as a rename
when their contents are partly alike is libgit2's similarity estimate, at git's
threshold (50%); git's estimate can fall on the other side of it for a borderline
pair, which then shows as ``D`` and ``A`` lines where git shows one ``R`` line (or the
reverse). A file renamed unchanged, or changed a little, shows as git shows it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
from pygit2.enums import DeltaStatus, DiffFind, FileStatus

from turnkeeper.runtime.workspaces import libgit

__all__ = ["porcelain_lines"]

_GITMODULES = ".gitmodules"
_GITLINK_MODE = 0o160000
# What ``git add --intent-to-add`` records (git shows `` A``, libgit2 ``AM``), and a
# staged empty file too: either sends the question to git.
_EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
# git's default rename similarity and limit for status (diff.c, diffcore-rename.c).
_RENAME_THRESHOLD = 50
_RENAME_LIMIT = 1000
# Settings that change the lines in ways not read here: git answers when one is set.
_UNREAD_SETTINGS = ("status.renamelimit", "diff.renamelimit")
_UNTRACKED_MODES = {"normal", "no", "all"}

_INDEX_CODES = (
    (FileStatus.INDEX_NEW, "A"),
    (FileStatus.INDEX_MODIFIED, "M"),
    (FileStatus.INDEX_DELETED, "D"),
    (FileStatus.INDEX_RENAMED, "R"),
    (FileStatus.INDEX_TYPECHANGE, "T"),
)
_WORKTREE_CODES = (
    (FileStatus.WT_MODIFIED, "M"),
    (FileStatus.WT_DELETED, "D"),
    (FileStatus.WT_RENAMED, "R"),
    (FileStatus.WT_TYPECHANGE, "T"),
)
# git's quote.c: the C escapes it writes by letter; any other control byte, DEL and
# (with core.quotePath) every byte above ASCII as three octal digits.
_LETTER_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0B: "\\v",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}


class _LeftToGitError(Exception):
    """Raised inside this module where git must answer instead."""


# What sends the question to git: this module's own finding, libgit2's refusals, a
# changed path libgit2 reports that its index then does not hold.
_REFUSED = (_LeftToGitError, KeyError, *libgit.REFUSED)


def porcelain_lines(workspace: Path) -> list[str] | None:
    """The lines ``git status --porcelain`` prints in ``workspace`` (the top level of
    its repository), or None when git must be asked (module docstring)."""
    with libgit.user_repository(workspace) as repo:
        if repo is None:
            return None
        try:
            return _lines(repo, workspace)
        except _REFUSED:
            return None


def _lines(repo: pygit2.Repository, workspace: Path) -> list[str]:
    if os.path.lexists(workspace / _GITMODULES):
        raise _LeftToGitError
    config = repo.config
    for name in _UNREAD_SETTINGS:
        if name in config:
            raise _LeftToGitError
    untracked_mode = _setting(config, "status.showuntrackedfiles", "normal")
    if untracked_mode not in _UNTRACKED_MODES:
        raise _LeftToGitError
    quote_high = _flag(config, "core.quotepath", default=True)
    # As git: status.renames, else diff.renames, else on.
    renames = _flag(config, "status.renames", default=_flag(config, "diff.renames", default=True))

    status = repo.status(untracked_files=untracked_mode)
    changes: dict[str, str] = {}  # path -> its two letters
    untracked: list[str] = []
    index = repo.index
    for path, flags in status.items():
        if flags & FileStatus.CONFLICTED:
            raise _LeftToGitError
        x = _code(flags, _INDEX_CODES)
        y = _code(flags, _WORKTREE_CODES)
        if flags & FileStatus.WT_NEW:
            # Deleted from the index and there still: git prints ``D `` and ``??``.
            untracked.append(path)
            if x == " ":
                continue
        if x == " " and y == " ":
            continue
        if x != "D":  # in the user's index: a gitlink or an intent-to-add entry?
            entry = index[path]
            if entry.mode == _GITLINK_MODE or (x == "A" and str(entry.id) == _EMPTY_BLOB):
                raise _LeftToGitError
        changes[path] = x + y

    sources: dict[str, str] = {}  # renamed path -> where from
    if renames:
        sources = _staged_renames(repo, index, changes)
        for new, old in sources.items():
            del changes[old]
            changes[new] = "R" + changes[new][1]

    def quoted(path: str) -> str:
        return _quote(path, quote_high)

    lines = []
    for path in sorted(changes, key=os.fsencode):
        source = sources.get(path)
        shown = f"{quoted(source)} -> {quoted(path)}" if source is not None else quoted(path)
        lines.append(f"{changes[path]} {shown}")
    lines += [f"?? {quoted(path)}" for path in sorted(untracked, key=os.fsencode)]
    return lines


def _code(flags: int, codes: tuple[tuple[FileStatus, str], ...]) -> str:
    for flag, letter in codes:
        if flags & flag:
            return letter
    return " "


def _setting(config: pygit2.Config, name: str, default: str) -> str:
    return str(config[name]) if name in config else default


def _flag(config: pygit2.Config, name: str, *, default: bool) -> bool:
    """A boolean setting as git reads it; one that is not a boolean (``copies``) is
    left to git."""
    if name not in config:
        return default
    try:
        return config.get_bool(name)
    except ValueError as exc:
        raise _LeftToGitError from exc


def _staged_renames(
    repo: pygit2.Repository, index: pygit2.Index, changes: dict[str, str]
) -> dict[str, str]:
    """new path -> old path of the staged renames git would show: HEAD's tree and the
    index compared again with rename detection, only when both a staged deletion and a
    staged addition are there to pair (a turn seldom has either)."""
    staged = {code[0] for code in changes.values()}
    if "D" not in staged or "A" not in staged or repo.head_is_unborn:
        return {}
    head = repo.head.peel(pygit2.Tree)
    diff = head.diff_to_index(index)
    diff.find_similar(
        flags=DiffFind.FIND_RENAMES,
        rename_threshold=_RENAME_THRESHOLD,
        rename_limit=_RENAME_LIMIT,
    )
    found: dict[str, str] = {}
    for delta in diff.deltas:
        if delta.status != DeltaStatus.RENAMED:
            continue
        old, new = delta.old_file.path, delta.new_file.path
        if changes.get(old, " ")[0] == "D" and changes.get(new, " ")[0] == "A":
            found[new] = old
    return found


def _quote(path: str, quote_high: bool) -> str:
    """``path`` as git's porcelain prints it (quote.c's ``quote_path`` with
    ``QUOTE_PATH_QUOTE_SP``): in double quotes, with C escapes, when it holds a byte
    that needs one or a space; as is otherwise. A name that is not UTF-8 comes from
    libgit2 with its bytes escaped as surrogates, and goes back to them here."""
    raw = os.fsencode(path)
    if not any(_must_escape(b, quote_high) for b in raw) and b" " not in raw:
        return path
    out = bytearray(b'"')
    for b in raw:
        if not _must_escape(b, quote_high):
            out.append(b)
        elif b in _LETTER_ESCAPES:
            out += _LETTER_ESCAPES[b].encode()
        else:
            out += f"\\{b:03o}".encode()
    out += b'"'
    return os.fsdecode(bytes(out))


def _must_escape(byte: int, quote_high: bool) -> bool:
    return byte < 0x20 or byte in (0x22, 0x5C, 0x7F) or (quote_high and byte >= 0x80)
