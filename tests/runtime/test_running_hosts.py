"""Ending every running host at once (a second SIGINT): a host whose tree cannot be
ended — its kill raised, or a process survived it — spares none of the others and is
named, so ``run``'s last words say what is left for the next run's recovery."""

from __future__ import annotations

from collections.abc import Iterator

from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts import HostOutcome, KillReport
from turnkeeper.runtime.turn.running_hosts import RunningHosts


class _Run:
    """A host run whose kill does what the test says: end all, leave one, or raise."""

    def __init__(self, turn_id: str, pid: int, kill: str) -> None:
        self.turn_id, self.kill, self.killed = turn_id, kill, False
        self._identity = ProcessIdentity(pid=pid, start_time=1, boot_id="b", marker=turn_id)

    @property
    def identity(self) -> ProcessIdentity:
        return self._identity

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        return iter(())

    def wait(self, timeout: float | None = None) -> HostOutcome:
        raise AssertionError("not waited on here")

    def is_alive(self) -> bool:
        return not self.killed

    def kill_tree(self) -> KillReport:
        self.killed = True
        if self.kill == "raise":
            raise OSError("permission denied")
        survivors = [self._identity.pid] if self.kill == "survivor" else []
        return KillReport(turn_id=self.turn_id, survivors=survivors)


def test_every_tree_is_tried_and_those_not_ended_are_named() -> None:
    hosts = RunningHosts()
    runs = [_Run("t-raises", 11, "raise"), _Run("t-ok", 12, "ok"), _Run("t-left", 13, "survivor")]
    with (
        hosts.tracking("s1", "t-raises", runs[0]),
        hosts.tracking("s2", "t-ok", runs[1]),
        hosts.tracking("s3", "t-left", runs[2]),
    ):
        done = hosts.kill_all()
    assert all(run.killed for run in runs)
    assert done.ended == ["t-ok"]
    assert sorted(done.not_ended) == ["t-left", "t-raises"]
    assert hosts.exiting()
