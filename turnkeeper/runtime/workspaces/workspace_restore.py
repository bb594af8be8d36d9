"""A revert's restore of the worktree: exactly the snapshot's files, and nothing lost.

The snapshot holds the tracked and the untracked-but-not-ignored files of its time.
Restoring it in place means writing back every file of it that differs now and
taking away every file it lacks — but only those it would have held:

* **what is compared.** "Now" is the worktree through a throwaway index seeded from
  the user's (``git add -A``, today's ignore rules); "then" is the snapshot's tree.
  A file the same in both is not touched.
* **whose ignore rules.** A file not in the snapshot is left where it is when it is
  ignored by today's rules (it never entered "now") or by the snapshot's. The
  snapshot's rules are its own ``.gitignore`` files, so those are put back first and
  ``git check-ignore`` is asked only then: an agent that dropped ``.env`` from
  ``.gitignore`` does not make the user's ``.env`` a file to remove.
* **nothing destroyed.** Whatever the restore would overwrite or remove — a changed
  file, a file the snapshot lacks, a directory where the snapshot has a file, a file
  or symlink where it needs a directory — is first *moved* into
  ``<git dir>/turnkeeper/preserved/<session>/<request>/files/<path>``
  (:class:`Preserver`); the revert's result names them. What is preserved is read
  back from that directory itself, so a crash between two moves loses no name.
* **killable.** Scratch indexes live in ``<git dir>/turnkeeper/tmp/`` and git
  children die with the revert (runtime/workspaces/gitcmd.py); every step compares before it
  acts, so running the whole restore again after a crash finishes it.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import FailedPrecondition
from turnkeeper.json_types import JsonDict
from turnkeeper.runtime.workspaces.gitcmd import private_git_dir, worktree_git
from turnkeeper.runtime.workspaces.snapshots import PATHSPEC, scratch_dir, seed_index
from turnkeeper.runtime.workspaces.workspace_head import ref_component

RULES_FILE = ".gitignore"
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


def restore_workspace(workspace: Path, tree: str, preserver: Preserver, session_id: str) -> None:
    """Make the worktree hold ``tree`` (see the module docstring). HEAD, branch, index
    and stash are not touched; ``.turnkeeper/`` is never looked at."""
    clean_scratch(workspace, session_id)
    with scratch_dir(workspace, f"{SCRATCH_PREFIX}{session_id}-") as tmp:
        now_env = {"GIT_INDEX_FILE": str(Path(tmp) / "now")}
        seed_index(workspace, Path(tmp) / "now", now_env)
        worktree_git(workspace, "add", "-A", "--", *PATHSPEC, env=now_env)
        snap_env = {"GIT_INDEX_FILE": str(Path(tmp) / "snapshot")}
        worktree_git(workspace, "read-tree", tree, env=snap_env)
        now, then = _entries(workspace, now_env), _entries(workspace, snap_env)
        stale = [path for path, entry in then.items() if now.get(path) != entry]
        extra = [path for path in now if path not in then]
        try:
            # 1. The snapshot's ignore rules back in place, so they can be asked.
            for path in (p for p in extra if _is_rules_file(p)):
                preserver.move(path)
            rules = [p for p in stale if _is_rules_file(p)]
            _write(workspace, rules, preserver, snap_env)
            # 2. What the snapshot lacks and would not have ignored goes aside.
            others = [p for p in extra if not _is_rules_file(p)]
            ignored = _ignored_by_snapshot_rules(workspace, others, snap_env)
            for path in others:
                if path not in ignored:
                    preserver.move(path)
            # 3. Every other file the snapshot holds differently.
            _write(workspace, [p for p in stale if not _is_rules_file(p)], preserver, snap_env)
        finally:
            preserver.drop_emptied_directories()


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
