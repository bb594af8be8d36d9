"""``turnkeeper chaos --mode runner``: the control plane and the runner SIGKILLed, in
every combination, while agents' turns run in the runner.

The long test is the one that must hold: at least 100 kills spread over control plane
and runner (every kind of the plan: mid-turn, the wave, back to back, the runner alone,
an acknowledgement lost, a command result lost), every invariant intact, no process of
any turn left running, and more turns reattached than lost. The short ones show the
oracle catches an event journaled twice or out of order, and one a reattached turn lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from turnkeeper.host_reports import HostEvent
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session import HostEventsJournaled, SessionEvent
from turnkeeper_chaos.runner_checks import INV7, RunnerSessionChecker
from turnkeeper_chaos.runner_mode import _KILLS, KINDS, kill_plan
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.worker_checks import SessionView

NOW = datetime(2025, 1, 1, tzinfo=UTC)
TURN = "turn-0123456789abcdef"
REPO = Path(__file__).resolve().parents[2]


def _tick(n: int) -> JsonDict:
    return {"text": f"tick {n} of t", "tick": n, "pid": 7}


def _journaled(*seqs: int) -> HostEventsJournaled:
    events = tuple(HostEvent(seq=s, kind="message", data=_tick(s)) for s in seqs)
    return HostEventsJournaled(turn_id=TURN, events=events, at=NOW)


def _checker(tmp_path: Path, events: list[SessionEvent], printed: int) -> RunnerSessionChecker:
    run: JsonDict = {
        "turn_id": TURN,
        "attempt": 1,
        "printed": [_tick(n) for n in range(1, printed + 1)],
    }
    view = SessionView(tmp_path, "s", tmp_path, "sqlite:///unused", "sid", "g", [], [run])
    checker = RunnerSessionChecker(view, CountingService())
    checker.check_events_once(events)
    return checker


def test_the_plan_covers_every_kind_and_spends_the_kills_exactly() -> None:
    for kills, seed in ((100, 7), (9, 1), (57, 3)):
        plan = kill_plan(kills, seed)
        assert sum(_KILLS[k] for k in plan) == kills
        assert set(plan) == set(KINDS)
    assert kill_plan(100, 7) == kill_plan(100, 7)  # seeded


def test_the_oracle_accepts_a_turn_journaled_in_two_control_planes(tmp_path: Path) -> None:
    # Seqs 1-3 by the first control plane, 4-6 by the one that reattached at seq 3.
    checker = _checker(tmp_path, [_journaled(1, 2, 3), _journaled(4, 5, 6)], printed=7)
    assert checker.result.violations == []


def test_the_oracle_catches_an_event_journaled_twice(tmp_path: Path) -> None:
    # A reattach that read from the runner's ack instead of the session's last seq.
    checker = _checker(tmp_path, [_journaled(1, 2, 3), _journaled(3, 4)], printed=4)
    details = [v.detail for v in checker.result.violations]
    assert [v.invariant for v in checker.result.violations] == [INV7, INV7]
    assert "not strictly increasing" in details[0]
    assert "not what the agent printed" in details[1]


def test_the_oracle_catches_a_skipped_event(tmp_path: Path) -> None:
    checker = _checker(tmp_path, [_journaled(1, 2), _journaled(4)], printed=4)
    assert [v.invariant for v in checker.result.violations] == [INV7]


@pytest.mark.timeout(480)
def test_a_hundred_kills_of_control_plane_and_runner(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    args = ["--mode", "runner", "--kills", "100", "--seed", "7", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "chaos", *args, "--dir", str(tmp_path / "r")],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=460,
    )
    assert done.stdout, done.stderr[-3000:]
    report = json.loads(done.stdout)
    facts = report["facts"]
    print(json.dumps(facts, indent=1))  # the figures reached, shown with -s
    assert report["violations"] == [], json.dumps(report["violations"][:10], indent=1)
    assert done.returncode == 0
    assert facts["kills"] >= 100, facts
    assert facts["kills_control_plane"] >= 50 and facts["kills_runner"] >= 10, facts
    assert all(facts["episodes"].get(kind, 0) >= 1 for kind in KINDS), facts["episodes"]
    assert facts["orphans"] == 0
    assert facts["reattached_turns"] > facts["lost_turns"], facts
    # Reattached turns that completed had every tick journaled once, checked tick by tick.
    assert facts["reattached_completed"] > 0
    assert facts["completed"] == facts["todos"]  # every todo of every goal done, once
