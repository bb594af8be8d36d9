"""The whole chaos matrix, through the harness API: zero violations expected.

One harness run (two workers) covers the three modes side by side, so the host
faults' recovery backoffs and timeout overlap the other scenarios' work:

* every named crash point of the control plane hit in turn, the real process
  SIGKILLed there and restarted (plus each effect point at the turn's second
  effect, and an apply whose readback cannot confirm it: an operator gate);
* 20 SIGKILLs by timer at random moments, several back to back, some of them
  inside restart recovery;
* the host SIGKILLed, segfaulting, exiting non-zero, hanging past its timeout,
  printing garbage.
"""

from __future__ import annotations

import pytest

from turnkeeper import crashpoints
from turnkeeper_chaos import ChaosConfig, ChaosReport, run_chaos
from turnkeeper_chaos.scenarios import control_plane_points
from turnkeeper_chaos.workload import FAULT_ERROR_KINDS, Workload

RANDOM_KILLS = 20
SEED = 20240601
TODOS = 1  # the cheapest goal that still exercises effects: one todo, two effects
KEYS = Workload(todos=TODOS).effect_keys_per_goal


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> ChaosReport:
    config = ChaosConfig(
        mode="all",
        kills=RANDOM_KILLS,
        seed=SEED,
        workers=2,
        base_dir=tmp_path_factory.mktemp("chaos"),
        time_limit=240,
        todos=TODOS,
    )
    return run_chaos(config)


def _describe(report: ChaosReport) -> str:
    return "\n".join(f"{v.scenario}: [{v.invariant}] {v.detail}" for v in report.violations)


def test_no_invariant_is_violated(report: ChaosReport) -> None:
    assert report.ok, _describe(report)


def test_every_crash_point_is_hit_and_recovered(report: ChaosReport) -> None:
    points = control_plane_points()
    assert set(crashpoints.ALL_POINTS) <= set(points)
    assert any(p.startswith("effect.") for p in points)
    assert report.points_missed() == []
    row = report.rows()["enumerated"]
    assert row.crash_points == set(points)
    assert row.violations == 0
    assert row.indeterminate == row.gates_resolved == 1  # the unconfirmable apply's gate
    enumerated = [r for r in report.results if r.mode == "enumerated"]
    for result in enumerated:
        assert result.kills >= 1, result.name
        assert result.facts.effects_applied + result.facts.effects_indeterminate == KEYS


def test_random_kills_land_back_to_back_and_inside_recovery(report: ChaosReport) -> None:
    assert not report.random_time_limited
    row = report.rows()["random"]
    assert row.kills == RANDOM_KILLS
    assert row.back_to_back >= 2
    assert row.violations == 0
    assert row.effects == KEYS * row.scenarios  # each scenario's keys, once each


def test_host_faults_are_recorded_and_resumed(report: ChaosReport) -> None:
    faults = [r for r in report.results if r.mode == "host-faults"]
    assert len(faults) == len(FAULT_ERROR_KINDS)
    for result in faults:
        assert result.ok, result.violations
        assert (result.facts.failed, result.facts.completed) == (1, TODOS), result.name


def test_passing_scenarios_leave_no_directory(report: ChaosReport) -> None:
    assert report.base_dir is not None
    assert [p.name for p in report.base_dir.iterdir()] == []
