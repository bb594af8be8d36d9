"""The silence watch's rule, on a clock and a CPU meter the test moves by hand; and the
CPU meter itself on real processes.

A host is hung when, for the silence timeout, it printed nothing but non-fatal errors
and its process tree used less than 5% of one CPU; a tree that cannot be measured is
never called hung.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from turnkeeper.host_reports import HostEvent
from turnkeeper.hosts import process_tree
from turnkeeper.hosts.tree_cpu import TreeCpu
from turnkeeper.runtime.turn.silence import SilenceWatch, is_progress

TIMEOUT = 8.0  # sample interval: 2 s


class Meter:
    """CPU seconds handed out as the test says (None: the tree cannot be seen)."""

    def __init__(self) -> None:
        self.next: float | None = 0.0
        self.calls = 0

    def __call__(self) -> float | None:
        self.calls += 1
        return self.next


def event(kind: str, **data: object) -> HostEvent:
    return HostEvent(seq=1, kind=kind, data=data)


def run_until_hung(
    watch: SilenceWatch, start: float, end: float, step: float = 0.5
) -> float | None:
    """Ask the watch every ``step`` seconds; when it first says hung (None: never)."""
    now = start
    while now <= end:
        if watch.expired(now) is not None:
            return now
        now += step
    return None


def test_a_silent_idle_host_is_hung_after_the_timeout_and_not_before() -> None:
    meter = Meter()
    watch = SilenceWatch(TIMEOUT, meter, now=0.0)
    assert watch.wait_seconds(0.0) == 2.0  # the first sample is due before the deadline
    assert run_until_hung(watch, 0.0, 7.5) is None
    assert watch.expired(8.0) == "no progress for 8 s: no event and no CPU"
    assert meter.calls == 4  # 2 s (the baseline), 4, 6, 8: not at every look


def test_events_are_progress_but_non_fatal_errors_are_not() -> None:
    meter = Meter()
    watch = SilenceWatch(TIMEOUT, meter, now=0.0)
    watch.saw(event("message", text="working"), 5.0)
    assert run_until_hung(watch, 5.0, 12.5) is None
    assert watch.wait_seconds(12.5) == 0.5
    for n in range(1, 6):  # reconnect errors: said, but no work
        watch.saw(event("error", message=f"Reconnecting... {n}/5", fatal=False), 12.0 + n / 10)
    hung = watch.expired(13.0)
    assert hung == (
        "no progress for 8 s: only error events and no CPU (last: 'Reconnecting... 5/5')"
    )
    assert not is_progress(event("error", message="x"))  # fatal unless it says so
    assert is_progress(event("error", message="x", fatal=True))
    assert is_progress(event("command.started", command="make"))


def test_cpu_over_five_percent_of_one_cpu_is_progress() -> None:
    meter = Meter()
    watch = SilenceWatch(TIMEOUT, meter, now=0.0)
    meter.next = 0.5  # per 2 s sample: 25% of a CPU, a silent build
    assert run_until_hung(watch, 0.0, 60.0) is None
    # Just under 5% of a CPU (0.09 s per 2 s) is idle: hung a timeout after the last
    # sample that counted.
    meter.next = 0.09
    hung_at = run_until_hung(watch, 60.5, 80.0)
    assert hung_at is not None and 67.5 <= hung_at <= 68.5, hung_at
    # At 5% (0.1 s per 2 s) it works again.
    meter.next = 0.1
    watch.saw(event("message", text="back"), 80.0)
    assert run_until_hung(watch, 80.0, 120.0) is None


def test_a_tree_that_cannot_be_measured_is_never_hung() -> None:
    meter = Meter()
    meter.next = None
    watch = SilenceWatch(TIMEOUT, meter, now=0.0)
    assert run_until_hung(watch, 0.0, 60.0) is None


def test_tree_cpu_counts_a_busy_grandchild_and_not_a_sleeping_one() -> None:
    busy = "import time\nt = time.time()\nwhile time.time() - t < 30: pass\n"
    script = f"{sys.executable} -c '{busy}' & sleep 30; wait"
    procs = [
        subprocess.Popen(["sh", "-c", script]),
        subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30; wait"]),
    ]
    try:
        meters = [TreeCpu(process_tree.identify(p.pid, "tree-cpu-test")) for p in procs]
        for meter in meters:
            assert meter.used_seconds() is not None  # the baseline
        time.sleep(1.0)
        busy_used, idle_used = (meter.used_seconds() for meter in meters)
        assert busy_used is not None and busy_used >= 0.3, busy_used
        assert idle_used is not None and idle_used <= 0.02, idle_used
    finally:
        for proc in procs:  # our own children and theirs, by pid
            for pid in process_tree.list_descendants(proc.pid):
                os.kill(pid, 9)
            proc.kill()
            proc.wait()
    # A process that is gone cannot be measured.
    assert meters[0].used_seconds() is None
