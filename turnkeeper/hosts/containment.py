"""Containment: which processes a turn started, so that every one of them ends with it.

Two paths; ``TURNKEEPER_CONTAINMENT`` (read from the control plane's environment
when a host is spawned) picks one per turn:

* ``cgroup`` — a cgroup v2 per turn (:mod:`turnkeeper.hosts.cgroups`). The host
  joins it before it can fork; at the end of the turn everything in it is killed
  and the cgroup removed. Nothing a process does without the control plane's rights
  takes it out.
* ``subreaper`` — the control plane is a child subreaper
  (:mod:`turnkeeper.hosts.subreaper`): orphans it adopts while turns are in flight
  are attributed by start time to the turns they may belong to and ended when the
  last of those ends.
* ``auto`` (the default) — ``cgroup`` when one can be made and joined here, else
  ``subreaper`` if this process is one, else ``none``.

Asking for ``cgroup`` or ``subreaper`` where it is not available is a spawn failure
with the reason, never a silent downgrade. Whatever the path, the marker
(``TURNKEEPER_TURN_ID``) and descendant search of :mod:`turnkeeper.hosts.process_tree`
still runs, and :func:`turnkeeper.hosts.process_tree.kill_turn_processes` ends all of
it: at host exit, on ``kill_tree()``, and in restart recovery (a leftover cgroup of
the turn is found on disk). The path a turn used is reported as
``HostOutcome.containment``. A host configured with ``kill_stragglers: false`` keeps
what it left running; its cgroup stays until ``kill_turn_processes`` ends it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Literal

from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.hosts import cgroups, subreaper
from turnkeeper.hosts.base import HostSpawnFailed
from turnkeeper.hosts.cgroups import CgroupUnavailableError, TurnCgroup
from turnkeeper.memo import Memo

log = logging.getLogger(__name__)

CONTAINMENT_ENV = "TURNKEEPER_CONTAINMENT"
ContainmentKind = Literal["cgroup", "subreaper", "none"]
_MODES = ("auto", "cgroup", "subreaper")

_lock = threading.Lock()
# State, not a cache: turn id -> the cgroup this process made for it, until it is released.
_live: dict[str, TurnCgroup] = {}
# Owned by this module (prepare, turn_cgroup, forget), made at import, one per process;
# clearing it only costs a search of the hierarchy (docs/caches.md).
_settled: Memo[str, bool] = Memo(
    "turns known to have no cgroup on disk",
    max_entries=4096,
    invalidation="when this process makes the turn a cgroup (prepare drops it)",
)

#: Run as ``/bin/sh -c JOIN_ENTER_AND_EXEC <cgroup.procs> <workspace> <OLDPWD> ARGS...``:
#: the shell moves itself into the turn's cgroup (writing ``0`` moves the writer),
#: enters the workspace, then ``exec``\ s the command, which keeps the shell's pid and
#: start time. A shell costs ~1 ms where an interpreter costs ~10 ms of CPU a turn.
#: Whether joining works here is probed once per process (:func:`_join_unavailable`),
#: so the wrapper need not report: if the write fails anyway it exits 125 with a
#: message rather than run the host uncontained. Entering the workspace here, not in
#: the spawning process, is what lets the host be spawned without ``Popen``
#: (hosts/host_process.py); the spawn checked that it can be entered, so a 125 for it
#: means it went away in between. ``cd`` sets OLDPWD (to the control plane's
#: directory): it is put back as the environment had it, passed as ``=<value>``, or
#: as an empty argument for none.
JOIN_ENTER_AND_EXEC = (
    'echo 0 >"$0" || { echo "turnkeeper: the host cannot join its cgroup $0" >&2; exit 125; }; '
    'cd -P -- "$1" || '
    '{ echo "turnkeeper: the host cannot enter its workspace $1" >&2; exit 125; }; '
    'case $2 in "") unset OLDPWD;; *) OLDPWD=${2#=};; esac; '
    'shift 2; exec "$@"'
)
SHELL = "/bin/sh"


def requested_mode() -> str:
    """``TURNKEEPER_CONTAINMENT`` (default ``auto``); a spawn failure if it is not a mode."""
    mode = os.environ.get(CONTAINMENT_ENV, "").strip().lower() or "auto"
    if mode not in _MODES:
        raise HostSpawnFailed(
            f"{CONTAINMENT_ENV}={os.environ[CONTAINMENT_ENV]!r} is not one of {', '.join(_MODES)}",
            details={"containment": "invalid"},
        )
    return mode


class TurnContainment:
    """The containment of one turn's host, from spawn to the end of the turn."""

    def __init__(self, turn_id: str, mode: str, cgroup: TurnCgroup | None) -> None:
        self.turn_id = turn_id
        self.mode = mode
        self.cgroup = cgroup
        self.kind: ContainmentKind = "cgroup" if cgroup is not None else _fallback_kind()

    # --- spawning ---------------------------------------------------------------------

    @property
    def enters_workspace(self) -> bool:
        """Whether :meth:`command` enters the workspace itself (the cgroup's wrapper)."""
        return self.cgroup is not None

    def command(self, args: list[str], workspace: str, env: Mapping[str, str]) -> list[str]:
        """The argv to spawn: ``args`` itself, or through the cgroup's exec wrapper,
        which also enters ``workspace`` and keeps ``env``'s OLDPWD."""
        if self.cgroup is None:
            return args
        # Not a bare relative name, which cd would look for along CDPATH.
        where = workspace if workspace.startswith("/") else f"./{workspace}"
        oldpwd = env.get("OLDPWD")
        was = "" if oldpwd is None else f"={oldpwd}"
        return [SHELL, "-c", JOIN_ENTER_AND_EXEC, self.cgroup.procs_path, where, was, *args]

    def track(self, identity: ProcessIdentity) -> None:
        """The host runs: its orphans are attributed to it from now on (if not contained)."""
        if self.cgroup is None:
            _settle(self.turn_id)
        subreaper.turn_started(
            self.turn_id, identity.start_time, candidate=self.kind == "subreaper"
        )

    def abandon(self) -> None:
        """No host runs (a failed spawn): remove the unused cgroup."""
        self._forget_cgroup()

    def _forget_cgroup(self) -> None:
        cgroup, self.cgroup = self.cgroup, None
        if cgroup is None:
            return
        with _lock:
            _live.pop(self.turn_id, None)
        if cgroup.populated():
            return  # someone is in it after all: kill_turn_processes ends and removes it
        if problem := cgroup.remove():
            log.warning("turn %s: %s", self.turn_id, problem)
        else:
            _settle(self.turn_id)

    # --- the end ----------------------------------------------------------------------

    def release(self) -> None:
        """The turn is over. Called after the end-of-turn kill (or instead of it, for a
        host configured to leave its stragglers: then its cgroup is left in place for a
        later :func:`~turnkeeper.hosts.process_tree.kill_turn_processes`)."""
        subreaper.turn_ended(self.turn_id, end_orphans=False)
        with _lock:
            _live.pop(self.turn_id, None)


_noted: set[str] = set()


def _note_unavailable(why: str) -> None:
    """Say once per reason (not once per turn) why turns here run without a cgroup."""
    with _lock:
        if why in _noted:
            return
        _noted.add(why)
    log.info("turns run without a cgroup of their own (%s); using %s", why, _fallback_kind())


def _fallback_kind() -> ContainmentKind:
    return "subreaper" if subreaper.is_child_subreaper() else "none"


def prepare(turn_id: str) -> TurnContainment:
    """The containment for a turn about to be spawned, per ``TURNKEEPER_CONTAINMENT``."""
    mode = requested_mode()
    if mode == "subreaper":
        if not subreaper.become_subreaper():
            raise HostSpawnFailed(
                f"{CONTAINMENT_ENV}=subreaper, but this process cannot become a child "
                "subreaper (Linux prctl PR_SET_CHILD_SUBREAPER)",
                details={"containment": "subreaper"},
            )
        return TurnContainment(turn_id, mode, None)
    try:
        why_not = _join_unavailable()
        if why_not is not None:
            raise CgroupUnavailableError(why_not)
        cgroup = cgroups.create(turn_id)
    except CgroupUnavailableError as why:
        if mode == "cgroup":
            raise HostSpawnFailed(
                f"{CONTAINMENT_ENV}=cgroup, but no cgroup can be made for the turn: {why}",
                details={"containment": "cgroup", "reason": str(why)},
            ) from None
        _note_unavailable(str(why))
        return TurnContainment(turn_id, mode, None)
    with _lock:
        _live[turn_id] = cgroup
        _settled.pop(turn_id)
    return TurnContainment(turn_id, mode, cgroup)


_probed: list[str | None] = []  # the one probe's answer: why joining fails, or None


def _join_unavailable() -> str | None:
    """Why a process cannot join a turn cgroup here (None: it can). Probed once per
    process, with a real process moved into a probe cgroup: the wrapper then need not
    report on every spawn, which would cost a round trip per turn."""
    with _lock:
        if _probed:
            return _probed[0]
    answer = cgroups.unavailable_reason()
    with _lock:
        if not _probed:
            _probed.append(answer)
        return _probed[0]


def turn_cgroup(turn_id: str) -> TurnCgroup | None:
    """The cgroup of ``turn_id``: the one this process made, or one left on disk (a
    crashed control plane's), or None."""
    with _lock:
        if turn_id in _settled:
            return None
        live = _live.get(turn_id)
    if live is not None:
        return live
    return cgroups.find(turn_id)


def forget(turn_id: str) -> None:
    """``turn_id``'s cgroup was removed: drop it from this process's table."""
    with _lock:
        _live.pop(turn_id, None)
    _settle(turn_id)


def _settle(turn_id: str) -> None:
    with _lock:
        _settled.put(turn_id, True)
