"""How long ``run`` says a turn took (runtime/turn/run_progress.py), on a hand-moved
clock: from its host's start, and for a reattached turn from its durable start, not
from the reattach."""

from __future__ import annotations

from tests.kernel_session.helpers import envelope, new_session, spec
from turnkeeper.runtime.turn.run_progress import RunMonitor, RunRecord


def _monitor() -> tuple[RunMonitor, list[RunRecord], list[float]]:
    records: list[RunRecord] = []
    clock = [100.0]
    return RunMonitor(records.append, 60.0, clock=lambda: clock[0]), records, clock


def _ended(records: list[RunRecord]) -> dict[str, object]:
    (done,) = [r for r in records if r.fields.get("phase") in ("completed", "failed")]
    return done.as_json()


def test_a_turn_lasts_from_its_host_start() -> None:
    monitor, records, clock = _monitor()
    h = new_session()
    monitor.host_started(h.s.session_id, envelope(h, "turn-a", spec(todo_id="t-a")))
    clock[0] += 4
    monitor.turn_ended(h.s.session_id, "turn-a", succeeded=True)
    done = _ended(records)
    assert done["elapsed_seconds"] == 4.0
    assert "completed in 4s" in str(done["progress"])


def test_a_reattached_turn_counts_the_time_before_the_reattach() -> None:
    monitor, records, clock = _monitor()
    h = new_session()
    monitor.resuming("turn-a", 10.0)  # it ran 10 s under the control plane that died
    monitor.host_started(h.s.session_id, envelope(h, "turn-a", spec(todo_id="t-a")))
    started = [r.as_json() for r in records if r.fields.get("phase") == "started"]
    assert started[0]["elapsed_seconds"] == 10.0
    (running,) = monitor.running()
    assert running.elapsed(clock[0]) == 10.0
    clock[0] += 2
    monitor.turn_ended(h.s.session_id, "turn-a", succeeded=True)
    done = _ended(records)
    assert done["elapsed_seconds"] == 12.0
    assert "completed in 12s" in str(done["progress"])


def test_what_a_reattach_told_applies_to_that_turn_only() -> None:
    monitor, records, clock = _monitor()
    h = new_session()
    monitor.resuming("turn-a", 10.0)
    monitor.turn_ended(h.s.session_id, "turn-a", succeeded=False, error_kind="lost")
    records.clear()
    # The next turn of the session starts afresh, whatever was said of turn-a.
    monitor.host_started(h.s.session_id, envelope(h, "turn-b"))
    clock[0] += 1
    monitor.turn_ended(h.s.session_id, "turn-b", succeeded=True)
    assert _ended(records)["elapsed_seconds"] == 1.0
