"""A revert's restore of the worktree: exactly the snapshot's files, and nothing lost.

The snapshot holds the tracked and the untracked-but-not-ignored files of its time,
under the ignore rules of its time. Restoring it in place means that afterwards the
worktree's files — tracked, and untracked-not-ignored *under the snapshot's rules* —
are exactly the snapshot's tree; everything else the undone turns left is moved
aside; what those rules ignore (the user's ``.env``, logs, caches) stays untouched:

* **whose ignore rules.** The snapshot's, never today's: a turn that rewrote
  ``.gitignore`` to hide a file of its own, or added a nested ``.gitignore`` that
  does, must not keep that file, and one that dropped ``.env`` from ``.gitignore``
  must not make the user's ``.env`` a file to remove. So the rules go first: the
  snapshot's ``.gitignore`` files are written back, then every other ``.gitignore``
  git reads is moved aside — again until none is left, since taking one away can
  bring a folder it hid (and rules in it) back into view. A ``.gitignore`` that is
  itself ignored (a ``*`` in it, as a cache folder or a virtualenv has) never enters
  a snapshot, so it is told by its age: one created or changed after the snapshot's
  turn completed (its ctime, which no tool sets back, against the log's completion
  time) is the undone turns', older ones are the user's and stay.
* **what is compared.** Only then is "now" built: the worktree through a throwaway
  index seeded from the user's (``git add -A``, the snapshot's rules in force);
  "then" is the snapshot's tree. A file the same in both is not touched; one "now"
  has and "then" lacks goes aside, unless ``git check-ignore`` (against the
  snapshot's index) says the rules ignore it — a file the user's index tracks
  although it is ignored stays in "now" that way.
* **nothing destroyed.** Whatever the restore would overwrite or remove — a changed
  file, a file the snapshot lacks, a rules file, a directory where the snapshot has
  a file, a file or symlink where it needs a directory — is first *moved* into
  ``<git dir>/turnkeeper/preserved/<session>/<request>/files/<path>``
  (:class:`Preserver`); the revert's result names them. What is preserved is read
  back from that directory itself, so a crash between two moves loses no name.
* **killable.** Scratch indexes live in ``<git dir>/turnkeeper/tmp/`` and git
  children die with the revert (runtime/workspaces/gitcmd.py); every step compares before it
  acts, so running the whole restore again after a crash finishes it.

Not restored: ignore rules outside the worktree (``.git/info/exclude``,
``core.excludesFile``) are the repository's, not a snapshot's, and apply as they
are. The age test assumes the workspace's file system and the event log's clock
agree to within the gap between a turn's completion and the next turn's first write
(one machine with SQLite: the same clock).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from turnkeeper.errors import FailedPrecondition
from turnkeeper.json_types import JsonDict
from turnkeeper.runtime.workspaces.gitcmd import private_git_dir, worktree_git
from turnkeeper.runtime.workspaces.snapshots import PATHSPEC, scratch_dir, seed_index
from turnkeeper.runtime.workspaces.workspace_head import ref_component

RULES_FILE = ".gitignore"
# Every rules file below the workspace, turnkeeper's own folder at its top excepted.
RULES_PATHSPEC = (f":(glob)**/{RULES_FILE}", *PATHSPEC[1:])
MAX_RULES_PASSES = 64  # rules files each hidden by the one before: deeper is no worktree
ARTIFACT_DIR = "host-artifact"  # beside files/: the host session file a revert replaced
ARTIFACT_ENTRY = "host session file: "  # how it is listed (never a worktree path)
SCRATCH_PREFIX = "revert-"
_MAX_SUFFIX = 1000
NAMED_IN_RESULT = 200  # preserved paths listed in a result; the count says the rest

Entry = tuple[str, str]  # (mode, object id)


def preserve_root(workspace: Path, session_id: str, request_id: str) -> Path:
    return private_git_dir(workspace) / "preserved" / session_id / ref_component(request_id)


@dataclass(frozen=True)
class Preserved:
    """What a revert moved aside: where, and the original paths (relative to the
    workspace); the host session file it replaced is listed as ``host session file:
    NAME`` (kept under ``host-artifact/``)."""

    directory: str
    paths: tuple[str, ...]

    def as_json(self) -> JsonDict:
        return {
            "directory": self.directory,
            "count": len(self.paths),
            "paths": list(self.paths[:NAMED_IN_RESULT]),
        }


class Preserver:
    """Moves what a restore would destroy into the preserve directory, by rename."""

    def __init__(self, workspace: Path, root: Path) -> None:
        self.workspace = workspace
        self.root = root
        self.emptied: set[Path] = set()  # directories a move may have left empty

    def move(self, rel: str) -> None:
        """Move ``<workspace>/rel`` (a file, symlink or whole directory) aside; nothing
        to do when nothing is there."""
        source = self.workspace / rel
        if not os.path.lexists(source):
            return
        target = self._free_target(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(source, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.move(str(source), str(target))  # a git dir on another file system
        self.emptied.add(source.parent)

    def move_file(self, source: Path, name: str) -> None:
        """Move a file outside the worktree (the host artifact) aside as ``name``."""
        if not os.path.lexists(source):
            return
        target = self._free(self.root / name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), str(target))

    def _free_target(self, rel: str) -> Path:
        # ``files/a`` may already hold a file where ``a/b`` needs a directory (a retry,
        # or a file and then its replacement): the next ``files.N`` tree is used then.
        parts = rel.split("/")
        for n in range(_MAX_SUFFIX):
            base = self.root / ("files" if n == 0 else f"files.{n}")
            leads = (base.joinpath(*parts[:depth]) for depth in range(1, len(parts)))
            blocked = any(lead.is_symlink() or lead.is_file() for lead in leads)
            target = base.joinpath(*parts)
            if not blocked and not os.path.lexists(target):
                return target
        raise FileExistsError(f"no free place to preserve {rel} under {self.root}")

    def _free(self, target: Path) -> Path:
        for n in range(_MAX_SUFFIX):
            candidate = target if n == 0 else target.with_name(f"{target.name}.{n}")
            if not os.path.lexists(candidate):
                return candidate
        raise FileExistsError(f"no free place for {target}")

    def drop_emptied_directories(self) -> None:
        """Remove directories the moves left empty (never one that holds anything):
        this restore's, and an earlier attempt's (a crash or failure cut it short)."""
        earlier = read_preserved(self.root)
        for path in earlier.paths if earlier is not None else ():
            if not path.startswith(ARTIFACT_ENTRY):
                self.emptied.add((self.workspace / path).parent)
        for directory in sorted(self.emptied, key=lambda p: len(p.parts), reverse=True):
            for parent in (directory, *directory.parents):
                if parent == self.workspace or self.workspace not in parent.parents:
                    break
                try:
                    parent.rmdir()
                except OSError:
                    break  # not empty, or already gone: either way stop here


def read_preserved(root: Path) -> Preserved | None:
    """What a revert preserved under ``root``, read from the directory itself."""
    if not root.is_dir():
        return None
    paths: list[str] = []
    for tree in sorted(root.iterdir()):
        if tree.name == "files" or tree.name.startswith("files."):
            for path in sorted(_leaves(tree)):
                paths.append(path.relative_to(tree).as_posix())
        elif tree.name == ARTIFACT_DIR:
            paths += [f"{ARTIFACT_ENTRY}{p.name}" for p in sorted(tree.iterdir())]
    return Preserved(directory=str(root), paths=tuple(paths)) if paths else None


def _leaves(tree: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(tree):
        here = Path(dirpath)
        yield from (here / name for name in filenames)
        for name in dirnames:
            if (here / name).is_symlink():
                yield here / name
        if not dirnames and not filenames and here != tree:
            yield here  # an empty directory moved as it was


# --- the restore ----------------------------------------------------------------------


def _entries(workspace: Path, env: Mapping[str, str]) -> dict[str, Entry]:
    out = worktree_git(workspace, "ls-files", "--stage", "-z", env=env).stdout
    entries: dict[str, Entry] = {}
    for item in out.split("\0"):
        if not item:
            continue
        meta, path = item.split("\t", 1)
        mode, oid, _stage = meta.split(" ")
        entries[path] = (mode, oid)
    return entries


def _is_rules_file(path: str) -> bool:
    return path.rsplit("/", 1)[-1] == RULES_FILE


def clean_scratch(workspace: Path, session_id: str) -> None:
    """Remove the scratch directories an earlier revert of the session left (it was
    killed); one revert of a session runs at a time (it holds the session lease)."""
    base = private_git_dir(workspace) / "tmp"
    if base.is_dir():
        for leftover in base.glob(f"{SCRATCH_PREFIX}{session_id}-*"):
            shutil.rmtree(leftover, ignore_errors=True)


def restore_workspace(
    workspace: Path, tree: str, preserver: Preserver, session_id: str, *, since: datetime
) -> None:
    """Make the worktree hold ``tree`` (see the module docstring); ``since``: when the
    turns being undone could first write (the snapshot's turn's completion). HEAD,
    branch, index and stash are not touched; ``.turnkeeper/`` is never looked at."""
    clean_scratch(workspace, session_id)
    with scratch_dir(workspace, f"{SCRATCH_PREFIX}{session_id}-") as tmp:
        snap_env = {"GIT_INDEX_FILE": str(Path(tmp) / "snapshot")}
        worktree_git(workspace, "read-tree", tree, env=snap_env)
        then = _entries(workspace, snap_env)
        try:
            # 1. The snapshot's ignore rules in force, and no others.
            _restore_rules(workspace, then, Path(tmp), preserver, snap_env, since)
            # 2. The worktree as git sees it under them.
            now_env = {"GIT_INDEX_FILE": str(Path(tmp) / "now")}
            seed_index(workspace, Path(tmp) / "now", now_env)
            worktree_git(workspace, "add", "-A", "--", *PATHSPEC, env=now_env)
            now = _entries(workspace, now_env)
            # 3. What the snapshot lacks goes aside, unless its rules ignore it (a file
            # the user's index tracks although it is ignored: ``add -A`` keeps those).
            extra = [path for path in now if path not in then]
            ignored = _ignored_by_snapshot_rules(workspace, extra, snap_env)
            for path in extra:
                if path not in ignored:
                    preserver.move(path)
            # 4. Every file the snapshot holds differently.
            _write(workspace, [p for p, e in then.items() if now.get(p) != e], preserver, snap_env)
        finally:
            preserver.drop_emptied_directories()


def _restore_rules(
    workspace: Path,
    then: Mapping[str, Entry],
    tmp: Path,
    preserver: Preserver,
    snap_env: Mapping[str, str],
    since: datetime,
) -> None:
    """Leave in the worktree the snapshot's ignore rules and no others: its own rules
    files written back, then every other one git reads moved aside — again and again,
    since taking one away can bring a directory it hid, and the rules files in it,
    back into view. Bounded: each pass moves at least one file out of the worktree."""
    ours = [path for path in then if _is_rules_file(path)]
    _write(workspace, _differing(workspace, ours, then, tmp), preserver, snap_env)
    for _ in range(MAX_RULES_PASSES):
        foreign = _foreign_rules(workspace, snap_env, since)
        if not foreign:
            return
        for path in foreign:
            preserver.move(path)
    raise FailedPrecondition(
        f"the worktree {workspace} still holds ignore rules the snapshot lacks after "
        f"{MAX_RULES_PASSES} passes (each hidden by the last): run the revert again",
        reason="revert_rules_unsettled",
    )


def _differing(
    workspace: Path, paths: list[str], then: Mapping[str, Entry], tmp: Path
) -> list[str]:
    """The ``paths`` the worktree does not hold as the snapshot does, whether or not
    the rules in force now ignore them: each is hashed as ``git add -f`` would."""
    present = [path for path in paths if _plain_file(workspace, path)]
    here: dict[str, Entry] = {}
    if present:
        env = {"GIT_INDEX_FILE": str(tmp / "rules")}
        worktree_git(
            workspace,
            *("--literal-pathspecs", "add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul"),
            env=env,
            input="\0".join(present) + "\0",
        )
        here = _entries(workspace, env)
    return [path for path in paths if here.get(path) != then[path]]


def _plain_file(workspace: Path, rel: str) -> bool:
    """A file or symlink at ``rel`` reached through real directories only (what ``git
    add`` accepts; anything else differs from the snapshot anyway)."""
    parts = rel.split("/")
    for depth in range(1, len(parts)):
        lead = workspace.joinpath(*parts[:depth])
        if lead.is_symlink() or not lead.is_dir():
            return False
    target = workspace / rel
    return os.path.lexists(target) and (target.is_symlink() or not target.is_dir())


def _foreign_rules(workspace: Path, snap_env: Mapping[str, str], since: datetime) -> list[str]:
    """The rules files git reads in the worktree now that the snapshot lacks (listed
    against its index): every one a snapshot would take, and every ignored one that
    changed after ``since`` — one that ignores itself (a ``*`` in it) never enters a
    snapshot, so its age tells the user's (a tool's cache folder, there before the
    turn) from the turn's (files it hid that way). Ignored folders git never enters,
    nor reads rules in, are listed whole (``--directory``) and left alone."""
    listed = ("ls-files", "-z", "--others", "--exclude-standard")
    seen = worktree_git(workspace, *listed, "--", *RULES_PATHSPEC, env=snap_env).stdout
    hidden = worktree_git(
        workspace, *listed, "--ignored", "--directory", "--", *RULES_PATHSPEC, env=snap_env
    ).stdout
    cutoff_ns = int(since.timestamp() * 1_000_000_000)
    foreign = [path for path in seen.split("\0") if path and _is_rules_file(path)]
    for path in hidden.split("\0"):
        if path and _is_rules_file(path) and _changed_after(workspace / path, cutoff_ns):
            foreign.append(path)
    return foreign


def _changed_after(path: Path, cutoff_ns: int) -> bool:
    """Whether ``path`` was created, written, renamed or linked after the cutoff: its
    ctime, which no tool can set back (a copy that keeps the mtime still has a new one)."""
    try:
        return os.lstat(path).st_ctime_ns >= cutoff_ns
    except FileNotFoundError:
        return False


def _ignored_by_snapshot_rules(
    workspace: Path, paths: list[str], snap_env: Mapping[str, str]
) -> set[str]:
    """The ``paths`` the ignore rules now in the worktree (the snapshot's) ignore. The
    snapshot's index is the one consulted, so only its own files count as tracked."""
    if not paths:
        return set()
    present = [p for p in paths if os.path.lexists(workspace / p)]
    if not present:
        return set()
    # Each name as "./name": check-ignore takes names literally but refuses one that
    # starts with ":" as pathspec magic, and echoes each name as it was given.
    proc = worktree_git(
        workspace,
        *("check-ignore", "-z", "--stdin"),
        env=snap_env,
        input="".join(f"./{p}\0" for p in present),
        check=False,
    )
    if proc.returncode not in (0, 1):  # 1: none of them is ignored
        raise FailedPrecondition(
            f"git check-ignore failed in {workspace}: {proc.stderr.strip()[:500]}",
            reason="git_failed",
        )
    return {p.removeprefix("./") for p in proc.stdout.split("\0") if p}


def _write(
    workspace: Path, paths: list[str], preserver: Preserver, snap_env: Mapping[str, str]
) -> None:
    """Write ``paths`` from the snapshot's index, after moving aside whatever stands in
    their way: what is there now, and any leading component that is not a directory."""
    if not paths:
        return
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            lead = workspace.joinpath(*parts[:depth])
            if lead.is_symlink() or (os.path.lexists(lead) and not lead.is_dir()):
                preserver.move("/".join(parts[:depth]))
                break
        preserver.move(path)
    worktree_git(
        workspace,
        *("checkout-index", "-f", "-z", "--stdin"),
        env=snap_env,
        input="\0".join(paths) + "\0",
    )
