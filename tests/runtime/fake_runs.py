"""A host run for tests of what ends hosts (runtime/turn/running_hosts.py, fencing.py):
no process, a kill that does what the test says — end all, leave one, or raise."""

from __future__ import annotations

from collections.abc import Iterator

from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts import HostOutcome, KillReport


class FakeRun:
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
