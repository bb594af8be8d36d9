"""A cgroup v2 per turn: the kernel itself keeps the list of a turn's processes.

Where the machine allows it, a turn's host runs in a cgroup of its own,
``<cgroup2 mount><our cgroup>/turnkeeper.turns/<turn>``. Whatever the host starts
stays in it — a child that scrubbed its environment (``env -i``), left the process
session (``setsid``), double-forked or ran under ``nohup`` alike: a process leaves a
cgroup only by a write to another cgroup's ``cgroup.procs``, which needs the rights
of the control plane. At the end of the turn everything in it is killed
(``cgroup.kill``, or freeze and SIGKILL each member on kernels before 5.14) and the
directory is removed.

The host joins its cgroup before it can fork: it is spawned through a tiny shell
exec wrapper (:data:`turnkeeper.hosts.containment.JOIN_ENTER_AND_EXEC`) that writes
``0`` to ``cgroup.procs`` (moving the writer) and then ``exec``\\ s the real command,
so pid and start time — the process identity the journal records — are the host's
own. ``subprocess`` has no cgroup option, and ``preexec_fn`` is unsafe in a threaded
program.

Nothing here fails a turn on its own: without a cgroup2 mount, without cgroup v2
membership (v1 only), on a read-only or foreign hierarchy, :func:`create` raises
:class:`CgroupUnavailableError` with the reason and the caller picks another containment
(:mod:`turnkeeper.hosts.containment`). cgroup v2's "no internal processes" rule is
kept by construction: ``turnkeeper.turns`` holds no process and no controller is
ever enabled in a ``subtree_control`` here, so each turn's cgroup may hold processes.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Container
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from turnkeeper.hosts.procfs import (
    PROC,
    ProcStat,
    read_cmdline,
    read_file,
    read_marker,
    read_stat,
    signal_exact,
)
from turnkeeper.memo import Memo

log = logging.getLogger(__name__)

MOUNTINFO = PROC / "self" / "mountinfo"
OWN_CGROUP = PROC / "self" / "cgroup"
TURNS_DIR = "turnkeeper.turns"
# A leftover cgroup of a crashed control plane may sit under another cgroup than ours
# (a service restarted in a new scope): the search for it is bounded.
_SEARCH_MAX_DIRS = 20_000
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
# An empty turn cgroup this old is a leftover nobody will join (see _prune_stale).
_STALE_SECONDS = 120.0
_PRUNE_MAX = 1000


class CgroupUnavailableError(Exception):
    """No per-turn cgroup can be made here; ``str()`` says why."""


@dataclass(frozen=True)
class Member:
    """A process found in a turn's cgroup, as it was just before the kill."""

    stat: ProcStat
    marker: str | None
    cmdline: str


@dataclass(frozen=True)
class CgroupEnd:
    """What ending a turn's cgroup found and did."""

    members: dict[int, Member]
    survivors: list[int]
    removed: bool
    problem: str = ""  # why it was not removed, if it was not


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \\ooo.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def cgroup2_mount(mountinfo: str) -> tuple[Path, str] | None:
    """The first cgroup2 mount in ``mountinfo`` text: (mount point, root it shows)."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and right.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return Path(_unescape(fields[4])), _unescape(fields[3])
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """Our cgroup v2 path, from the ``0::`` line of ``/proc/self/cgroup`` text."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def cgroup_of(pid: int) -> str | None:
    """The cgroup v2 path of a process, or None (gone, or no v2 membership)."""
    try:
        return own_cgroup((PROC / str(pid) / "cgroup").read_text())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def in_our_turn_cgroup(pid: int) -> bool:
    """True if the process sits in the cgroup of one of this process's turns (below
    ``<our cgroup>/turnkeeper.turns``). Not for a control plane that itself runs in a
    turn's cgroup: the processes it starts share that cgroup, and it is not theirs."""
    path = cgroup_of(pid)
    try:
        own = own_cgroup(OWN_CGROUP.read_text())
    except OSError:
        return False
    if path is None or own is None:
        return False
    return path.startswith(f"{own.rstrip('/')}/{TURNS_DIR}/")


def turn_cgroup_name(turn_id: str) -> str:
    """The directory name for a turn: the id itself when it is plainly safe, else a digest
    (no ``/``, no ``.`` that could pass for an interface file such as ``cgroup.kill``)."""
    if _SAFE_NAME.fullmatch(turn_id):
        return turn_id
    return "turn-" + sha256(turn_id.encode()).hexdigest()[:40]


# Cached for the process, by mount table file (tests point MOUNTINFO elsewhere); never
# cleared: the cgroup2 file system is mounted at boot and stays where it is while the
# process runs. Reading mountinfo (a line per mount) costs more than the rest of a
# turn's cgroup set-up.
@functools.cache
def _mount_in(source: Path) -> tuple[Path, str] | None:
    return cgroup2_mount(source.read_text())


# Owned by :func:`_own_cgroup`, made at import, one per process; anyone may clear it.
# Our own cgroup, by the file it was read from (tests point OWN_CGROUP elsewhere), with
# the monotonic time it was read at. Invalid once it is _OWN_MAX_AGE old: something
# may move this process, so it is read again then, not at every turn (the kernel
# builds the file afresh, a line per hierarchy, under the cgroup lock). Until a move is
# seen, turns' cgroups are made below the cgroup we were in, which cannot be removed
# while they are there.
_OWN_MAX_AGE = 1.0
_own_read: Memo[Path, tuple[float, str | None]] = Memo(
    "this process's cgroup, by file",
    max_entries=64,
    invalidation=f"{_OWN_MAX_AGE} s after it was read (checked by _own_cgroup)",
)

# Owned by :func:`_hierarchy`, made at import, one per process; anyone may clear it.
# Our cgroup directory under the mount, by (mount table file, our cgroup as
# /proc/self/cgroup says): one entry per cgroup this process was ever in (a handful at
# most), so a turn pays one read of /proc/self/cgroup, not that plus Path building and
# a stat. Never invalid while the key holds: our own cgroup cannot be removed while we
# are in it, and a move to another cgroup is a new key.
_own_dirs: Memo[tuple[Path, str], tuple[Path, Path]] = Memo(
    "this process's cgroup directory, by cgroup",
    max_entries=64,
    invalidation="never while the key holds: a move to another cgroup is a new key",
)


def _own_cgroup() -> str | None:
    source, now = OWN_CGROUP, time.monotonic()
    last = _own_read.get(source)
    if last is not None and now - last[0] < _OWN_MAX_AGE:
        return last[1]
    own = own_cgroup(read_file(os.fspath(source)).decode())
    _own_read.put(source, (now, own))
    return own


def _hierarchy() -> tuple[Path, Path]:
    """(cgroup2 mount point, our own cgroup directory); ``CgroupUnavailableError`` if none.
    Our cgroup is read again once the last reading is ``_OWN_MAX_AGE`` old."""
    if not sys.platform.startswith("linux"):
        raise CgroupUnavailableError(f"cgroups are Linux only (platform {sys.platform!r})")
    try:
        mount = _mount_in(MOUNTINFO)
        own = _own_cgroup()
    except OSError as exc:
        raise CgroupUnavailableError(f"cannot read the cgroup setup: {exc}") from None
    if mount is None:
        raise CgroupUnavailableError("no cgroup2 file system is mounted")
    if own is None:
        raise CgroupUnavailableError("this process has no cgroup v2 membership (cgroup v1 only)")
    key = (MOUNTINFO, own)
    known = _own_dirs.get(key)
    if known is not None:
        return known
    point, root = mount
    if root not in ("/", own) and not own.startswith(root.rstrip("/") + "/"):
        raise CgroupUnavailableError(f"our cgroup {own} is outside the mounted part {root}")
    relative = own[len(root) :] if root != "/" else own
    own_dir = point / relative.lstrip("/")
    if not (own_dir / "cgroup.procs").exists():
        raise CgroupUnavailableError(f"our cgroup {own_dir} is not visible under {point}")
    _own_dirs.put(key, (point, own_dir))
    return point, own_dir


@dataclass(frozen=True)
class TurnCgroup:
    """One turn's cgroup directory."""

    turn_id: str
    # A plain string, the Path made only when asked for: on the per-turn path every
    # Path join and parse costs more than the read or write it names (pathlib was 12%
    # of a turn's controller CPU).
    directory: str

    @functools.cached_property
    def path(self) -> Path:
        return Path(self.directory)

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    @property
    def procs_path(self) -> str:
        """``cgroup.procs`` as a string (what a host writes to join)."""
        return os.path.join(self.directory, "cgroup.procs")

    def exists(self) -> bool:
        return os.path.isdir(self.directory)

    def _tree(self) -> list[str]:
        """This cgroup and any it holds (an agent running as root may make some), deepest
        first: the order ``rmdir`` needs. Unreadable directories are skipped, as
        ``os.walk`` skips them."""
        dirs: list[str] = []
        pending = [self.directory]
        while pending:
            try:
                with os.scandir(pending.pop()) as listing:
                    found = [entry.path for entry in listing if entry.is_dir()]
            except OSError:
                continue
            dirs.extend(found)
            pending.extend(d for d in found if not os.path.islink(d))
        if not dirs:  # the usual case: a turn's cgroup holds no cgroup of its own
            return [self.directory]
        return [*sorted(dirs, key=lambda d: d.count("/"), reverse=True), self.directory]

    def pids(self) -> list[int]:
        return self._members(self._tree())

    @staticmethod
    def _members(tree: list[str]) -> list[int]:
        found: set[int] = set()
        for cgroup in tree:
            try:
                found.update(
                    int(p) for p in read_file(os.path.join(cgroup, "cgroup.procs")).split()
                )
            except FileNotFoundError:
                continue  # removed meanwhile
            except OSError as exc:
                log.warning("cannot read the members of %s: %s", cgroup, exc)
        return sorted(found)

    def populated(self) -> bool:
        try:
            events = (self.path / "cgroup.events").read_text()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("cannot read %s/cgroup.events: %s", self.path, exc)
            return True  # unknown: never taken for empty
        return "populated 1" in events.splitlines()

    def _write(self, name: str, value: str) -> bool:
        try:
            with open(os.path.join(self.directory, name), "w") as control:
                control.write(value)
        except FileNotFoundError:
            return False  # removed meanwhile, or a kernel without that file
        except OSError as exc:
            log.warning("cannot write %s to %s/%s: %s", value, self.path, name, exc)
            return False
        return True

    def freeze(self) -> bool:
        """Freeze every member (no more forks); False where the kernel has no freezer."""
        return self._write("cgroup.freeze", "1")

    def kill_all(self) -> bool:
        """SIGKILL every member at once (kernel 5.14+); False where unsupported."""
        return self._write("cgroup.kill", "1")

    def remove(self) -> str:
        """Remove the (unpopulated) cgroup; '' when gone, else why it is still there."""
        return self._remove(self._tree())

    @staticmethod
    def _remove(tree: list[str]) -> str:
        for cgroup in tree:
            try:
                os.rmdir(cgroup)
            except FileNotFoundError:
                continue
            except OSError as exc:
                return f"cannot remove {cgroup}: {exc}"
        return ""


# Owned by :func:`_turns_dir` and :func:`create`, made at import, one per process;
# anyone may clear it. The turns directories this process made (or found) and could
# write to, as strings, by our own cgroup directory and the turns directory's name
# (tests use others), so a turn pays one mkdir, not three calls and a Path join. Never
# checked before it is served: invalid when making a turn's cgroup in one fails
# (removed or made read-only since), and then ``create`` clears it and checks again.
_made: Memo[tuple[Path, str], str] = Memo(
    "turns directories made, by own cgroup directory",
    max_entries=64,
    invalidation="when making a turn's cgroup in it fails (create clears it)",
)


def turns_dir() -> Path:
    """``<our cgroup>/turnkeeper.turns``, made if needed (else ``CgroupUnavailableError``)."""
    return Path(_turns_dir())


def _turns_dir() -> str:
    _, own_dir = _hierarchy()
    key = (own_dir, TURNS_DIR)
    known = _made.get(key)
    if known is not None:
        return known
    parent = own_dir / TURNS_DIR
    try:
        parent.mkdir(exist_ok=True)
    except OSError as exc:
        raise CgroupUnavailableError(f"cannot create {parent}: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK):
        raise CgroupUnavailableError(f"{parent} is not writable by this process")
    made = os.fspath(parent)
    _made.put(key, made)
    return made


def _make_dir(path: str) -> None:
    """``mkdir``, an existing directory being fine (as ``Path.mkdir(exist_ok=True)``)."""
    try:
        os.mkdir(path)
    except FileExistsError as exc:
        if not os.path.isdir(path):
            raise CgroupUnavailableError(f"cannot create {path}: {exc.strerror or exc}") from None
    except OSError as exc:
        raise CgroupUnavailableError(f"cannot create {path}: {exc.strerror or exc}") from None


def create(turn_id: str) -> TurnCgroup:
    """A fresh (or this very turn's leftover) cgroup for ``turn_id``."""
    parent = _turns_dir()
    now = time.monotonic()
    with _prune_lock:
        due = now >= _next_prune[0]
        if due:
            _next_prune[0] = now + _PRUNE_EVERY_SECONDS
    if due:  # not per turn: listing every sibling cgroup costs O(sessions) each time
        _prune_stale(parent)
    path = os.path.join(parent, turn_cgroup_name(turn_id))
    try:
        _make_dir(path)
    except CgroupUnavailableError:
        # The turns directory was removed or made read-only since it was checked:
        # check it as for a first turn (that names the cause), then try once more.
        _made.clear()
        _turns_dir()
        _make_dir(path)
    return TurnCgroup(turn_id, path)


# Leftovers are pruned at the first turn of a process and then at most this often.
_PRUNE_EVERY_SECONDS = 60.0
_prune_lock = threading.Lock()
_next_prune = [0.0]


def _prune_stale(parent: str) -> None:
    """Remove empty turn cgroups older than :data:`_STALE_SECONDS`.

    A control plane that was SIGKILLed and never restarted, or whose turn's processes
    were ended by other means, leaves its cgroup behind; empty and that old, nobody
    can still be joining it (a host joins within the wrapper's start-up), and there
    is nothing in it to end. A populated one is never touched.
    """
    now = time.time()
    try:
        entries = list(os.scandir(parent))
    except OSError as exc:
        log.warning("cannot list %s: %s", parent, exc)
        return
    for entry in entries[:_PRUNE_MAX]:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if now - entry.stat(follow_symlinks=False).st_mtime < _STALE_SECONDS:
                continue
        except OSError:
            continue  # removed meanwhile
        stale = TurnCgroup(entry.name, entry.path)
        if not stale.populated() and (problem := stale.remove()):
            log.info("stale turn cgroup left in place: %s", problem)


def find(turn_id: str) -> TurnCgroup | None:
    """The cgroup a control plane made for ``turn_id``, if one is left: under our own
    cgroup first, else anywhere in the hierarchy (a predecessor may have run elsewhere)."""
    try:
        point, own_dir = _hierarchy()
    except CgroupUnavailableError:
        return None
    name = turn_cgroup_name(turn_id)
    mine = own_dir / TURNS_DIR / name
    if mine.is_dir():
        return TurnCgroup(turn_id, os.fspath(mine))
    for seen, (root, subdirs, _) in enumerate(os.walk(point)):
        if seen >= _SEARCH_MAX_DIRS:
            break
        if Path(root).name == TURNS_DIR and name in subdirs:
            return TurnCgroup(turn_id, os.path.join(root, name))
    return None


def end(cgroup: TurnCgroup, protected: Container[int], timeout: float) -> CgroupEnd:
    """Kill every member of ``cgroup``, wait (bounded) until it is empty, remove it.

    Members are frozen first, so none can fork between the read of ``cgroup.procs``
    and the kill, and the report names every process that was ended. Should a
    protected pid (ourselves, an ancestor, init) have been moved into it, nothing is
    frozen and members are killed one by one, never that one.
    """
    deadline = time.monotonic() + timeout
    # Empty (the usual end: the host exited and left nothing): nothing to freeze or
    # kill, and gone. Removed straight away, without reading its members first: rmdir
    # itself refuses a cgroup that has a live member or a cgroup of its own (EBUSY),
    # and either takes the path below. Tried first on the turn's cgroup alone: listing
    # it for nested cgroups reads its two dozen interface files' entries.
    if not cgroup._remove([cgroup.directory]):
        return CgroupEnd({}, [], removed=True)
    tree = cgroup._tree()
    first = cgroup._members(tree)
    if not first and not cgroup._remove(tree):
        return CgroupEnd({}, [], removed=True)
    foreign = {pid for pid in first if pid in protected}
    if not foreign:
        cgroup.freeze()
    members: dict[int, Member] = {}
    while True:
        for pid in cgroup.pids():
            if pid in protected:
                foreign.add(pid)
            elif pid not in members and (stat := read_stat(pid)) is not None:
                members[pid] = Member(stat, read_marker(pid), read_cmdline(pid))
        if foreign or not cgroup.kill_all():
            for member in members.values():
                signal_exact(member.stat.pid, member.stat.start_time, signal.SIGKILL)
        left = [pid for pid in cgroup.pids() if pid not in protected]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if left or foreign:
        why = f"processes survived SIGKILL: {left}" if left else f"holds ours: {sorted(foreign)}"
        return CgroupEnd(members, left, removed=False, problem=why)
    problem = cgroup.remove()
    return CgroupEnd(members, [], removed=not problem, problem=problem)


def unavailable_reason() -> str | None:
    """Why a turn here could not run in a cgroup of its own, or None if it can: makes
    a probe cgroup, moves a real process into it and removes it again."""
    import subprocess

    try:
        probe = create(f"probe-{os.getpid()}-{time.monotonic_ns()}")
    except CgroupUnavailableError as exc:
        return str(exc)
    try:
        done = subprocess.run(
            ["sh", "-c", 'echo 0 > "$0"', probe.procs_path],
            capture_output=True,
            timeout=10,
            check=False,
        )
        if done.returncode != 0:
            return f"cannot move a process into {probe.path}: {done.stderr.decode().strip()}"
        return None
    finally:
        probe.remove()
