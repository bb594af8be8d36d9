"""Self-fencing's rules, with the time passed in (runtime/turn/fencing.py): when a lease
counts as lapsed, which hosts the fence ends, and a takeover that waits for the margin
when the holder cannot be seen from here. The end-to-end case — two workers in separate
network and PID namespaces, one cut off mid-turn — is tests/usage/test_postgres_partition.py.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.runtime.fake_runs import FakeRun
from turnkeeper.errors import Aborted
from turnkeeper.kernel.session import AcquireLease, CreateSession
from turnkeeper.runtime.control.controller_identity import can_probe, controller_owner
from turnkeeper.runtime.control.session_leases import SessionLeases
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.fencing import (
    MAX_MARGIN_SECONDS,
    HostFence,
    LeaseDeadlines,
    fence_margin,
    takeover_due,
)
from turnkeeper.runtime.turn.running_hosts import RunningHosts
from turnkeeper.store import open_store


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_margin_is_a_quarter_of_the_lease_and_at_most_ten_seconds() -> None:
    assert fence_margin(8) == 2
    assert fence_margin(120) == MAX_MARGIN_SECONDS == 10


def test_a_lease_lapses_a_margin_before_it_runs_out_from_when_the_renewal_was_sent() -> None:
    clock = _Clock()
    deadlines = LeaseDeadlines(8.0, now=clock)
    assert deadlines.lapsed("s", clock.now) is None  # never confirmed here: not ours
    deadlines.confirmed("s", sent=1000.0)
    assert deadlines.lapsed("s", 1005.9) is None
    assert deadlines.lapsed("s", 1006.0) == pytest.approx(6.0)
    # A renewal confirms from when it was sent; an older one arriving late changes nothing.
    deadlines.confirmed("s", sent=1004.0)
    deadlines.confirmed("s", sent=1001.0)
    assert deadlines.lapsed("s", 1009.9) is None
    assert deadlines.lapsed("s", 1010.0) == pytest.approx(6.0)
    deadlines.forget("s")
    assert deadlines.lapsed("s", 2000.0) is None


def test_the_fence_ends_only_the_hosts_of_lapsed_leases_once_and_says_why() -> None:
    clock = _Clock()
    deadlines = LeaseDeadlines(8.0, now=clock)
    hosts = RunningHosts()
    told: list[tuple[str, str, str]] = []
    fence = HostFence(deadlines, hosts, lambda sid, tid, why: told.append((sid, tid, why)))
    lapsing, renewed = FakeRun("t-lapsing", 11, "ok"), FakeRun("t-renewed", 12, "ok")
    deadlines.confirmed("s1", sent=1000.0)
    deadlines.confirmed("s2", sent=1000.0)
    with hosts.tracking("s1", "t-lapsing", lapsing), hosts.tracking("s2", "t-renewed", renewed):
        assert fence.check() == []
        clock.now = 1004.0
        deadlines.confirmed("s2", sent=1004.0)  # s2's keeper got through; s1's did not
        clock.now = 1006.5
        assert fence.check() == ["t-lapsing"]
        assert fence.check() == []  # ended already: not again
    assert (lapsing.killed, renewed.killed) == (True, False)
    assert [(sid, tid) for sid, tid, _ in told] == [("s1", "t-lapsing")]
    why = fence.take("t-lapsing")
    assert why is not None and "self-fencing" in why and "6.5s" in why
    assert fence.take("t-lapsing") is None  # asked once
    assert fence.take("t-renewed") is None


def test_only_a_controller_here_in_this_pid_namespace_can_be_probed() -> None:
    me = controller_owner()
    assert can_probe(me)
    parts = me.split(":")
    assert not can_probe(":".join([*parts[:1], "elsewhere", *parts[2:]]))  # another machine
    assert not can_probe(":".join([*parts[:3], "4026531999", *parts[4:]]))  # another pid ns
    assert not can_probe("worker-7")  # a name no controller of this version gives


def test_an_expired_lease_of_a_holder_out_of_sight_is_taken_only_after_the_margin(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        sessions = SessionService(store)
        sid = "7b0d5e44-5b7e-5e8e-9a3c-2f6f3a1c0d11"
        sessions.execute(
            sid,
            CreateSession(session_id=sid, goal_id="goal-1", workspace="/ws", host_kind="python"),
        )
        elsewhere = ":".join(["ctl", "other-machine", *controller_owner().split(":")[2:]])
        until = sessions.now() + timedelta(milliseconds=200)
        sessions.execute(sid, AcquireLease(owner=elsewhere, expires_at=until))
        leases = SessionLeases(sessions, controller_owner(), lease_seconds=4.0)  # margin 1 s
        due = takeover_due(until, 4.0)
        _wait_until(sessions, until)
        # Expired, but inside the margin: refused as held, naming when it may be taken.
        with pytest.raises(Aborted) as held:
            leases.acquire(sid)
        assert held.value.reason == "lease_held"
        assert held.value.details["fencing_until"] == due
        assert sessions.load(sid).lease.owner == elsewhere
        # Once the margin has passed it is taken as any expired lease.
        _wait_until(sessions, due)
        token = leases.acquire(sid)
        assert sessions.load(sid).lease.owner == token.owner == controller_owner()
        leases.release(sid)
    finally:
        store.close()


def _wait_until(sessions: SessionService, moment: datetime) -> None:
    """Until the store's clock is past ``moment`` (bounded: a few seconds at most here)."""
    for _ in range(100):
        if sessions.now() > moment:
            return
        time.sleep(0.05)
    raise AssertionError(f"the store's clock never passed {moment}")
