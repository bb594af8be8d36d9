"""Proof that a dead runner's hosts ended, for a control plane that finds it gone.

For each turn the runner's journal still lists as unfinished, the recorded host
identity (pid + start time + boot id) is checked against ``/proc``:

* ``gone`` — the pid is free, a zombie, or the machine rebooted since;
* ``blocked`` — the pid now names another process (its start time differs): our
  host is gone, and that process is never signalled;
* ``killed`` — the host still ran (the kernel's parent-death signal did not reach
  it) and was killed now;
* ``not_started`` — the runner died before it recorded the host's identity.

Whatever the case, every process still carrying the turn's marker is killed
(:func:`~turnkeeper.hosts.process_tree.kill_turn_processes`). ``ended`` is True when
nothing of the turn runs any more. The journal is left as it is: the next runner to
start records those turns as ``runner_lost``.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from turnkeeper.errors import FailedPrecondition
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.hosts import process_tree
from turnkeeper.hosts.base import KilledProcess
from turnkeeper.runner.journal import Journal
from turnkeeper.runner.paths import RunnerPaths

HostState = Literal["gone", "blocked", "killed", "not_started"]


class HostProof(BaseModel):
    model_config = ConfigDict(frozen=True)

    turn_id: str
    identity: ProcessIdentity | None
    host: HostState
    killed: list[KilledProcess] = Field(default_factory=list)
    survivors: list[int] = Field(default_factory=list)
    ended: bool


def prove_hosts_ended(state_dir: Path) -> list[HostProof]:
    """End and account for every unfinished turn of the project's dead runner.

    ``FailedPrecondition`` (``runner_alive``) if a runner holds the project's runner
    lock: a live runner owns its turns. The lock is held while proving, so no runner
    starts meanwhile.
    """
    paths = RunnerPaths(Path(state_dir))
    if not paths.journal.exists():
        return []
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FailedPrecondition(
                f"the runner of {paths.state_dir} is alive: it owns its turns",
                reason="runner_alive",
            ) from None
        journal = Journal(paths.journal)
        try:
            rows = [row for row in journal.turns() if row.state != "finished"]
        finally:
            journal.close()
        return [_prove(row.turn_id, row.identity) for row in rows]
    finally:
        os.close(fd)


def _host_state(identity: ProcessIdentity | None) -> HostState:
    if identity is None:
        return "not_started"
    if identity.boot_id != process_tree.boot_id():
        return "gone"
    stat = process_tree.read_stat(identity.pid)
    if stat is None or (stat.start_time == identity.start_time and stat.dead):
        return "gone"
    if stat.start_time != identity.start_time:
        return "blocked"
    return "killed"


def _prove(turn_id: str, identity: ProcessIdentity | None) -> HostProof:
    host = _host_state(identity)
    # Only a pid proven to be our host is a target; markers find the rest.
    target = identity if host == "killed" else None
    report = process_tree.kill_turn_processes(turn_id, target)
    still_marked = process_tree.find_marked_processes(turn_id)
    host_runs = target is not None and process_tree.is_alive(target)
    return HostProof(
        turn_id=turn_id,
        identity=identity,
        host=host,
        killed=report.killed,
        survivors=sorted({*report.survivors, *still_marked}),
        ended=report.complete and not still_marked and not host_runs,
    )
