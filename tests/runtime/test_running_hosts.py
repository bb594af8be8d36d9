"""Ending every running host at once (a second SIGINT): a host whose tree cannot be
ended — its kill raised, or a process survived it — spares none of the others and is
named, so ``run``'s last words say what is left for the next run's recovery."""

from __future__ import annotations

from tests.runtime.fake_runs import FakeRun
from turnkeeper.runtime.turn.running_hosts import RunningHosts


def test_every_tree_is_tried_and_those_not_ended_are_named() -> None:
    hosts = RunningHosts()
    runs = [
        FakeRun("t-raises", 11, "raise"),
        FakeRun("t-ok", 12, "ok"),
        FakeRun("t-left", 13, "survivor"),
    ]
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
