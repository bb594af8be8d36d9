"""The checker really detects violations: a clean scenario passes, doctored ones fail.

One real scenario (``turnkeeper run`` to the goal's close, effects against the
counting service) is checked clean; then copies of it are doctored — a host run
repeated in ``runs.jsonl``, an effect applied twice at the service, an event's
bytes changed, a projection that no longer equals its fold, the tail of the log
cut off, a process left running with one of its turn markers — and each must be
reported under the invariant it breaks.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnkeeper.hosts import MARKER_ENV
from turnkeeper.kernel.session import EffectIntended
from turnkeeper.runtime.services.sessions import session_stream
from turnkeeper.store._checksum import projection_checksum
from turnkeeper_chaos import ChaosProject, CountingService, Workload, check_project
from turnkeeper_chaos.checks import GOAL, INV2, INV3, INV4, INV5, LEFTOVER
from turnkeeper_chaos.procs import live_marked_processes

NAME = "checker"


@pytest.fixture(scope="module")
def service() -> Iterator[CountingService]:
    with CountingService() as running:
        yield running


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, service: CountingService) -> ChaosProject:
    """A scenario run to its end, untouched: the template every doctored copy starts from."""
    project = ChaosProject.create(
        tmp_path_factory.mktemp("clean") / NAME, NAME, Workload(), service
    )
    record = project.run()
    assert record.returncode == 0, record.describe()
    return project


def _copy(project: ChaosProject, tmp_path: Path) -> ChaosProject:
    root = tmp_path / "copy"
    shutil.copytree(project.root, root, symlinks=True)
    copy = ChaosProject(root, project.name)
    copy.session_id = project.session_id
    return copy


def _invariants(project: ChaosProject, service: CountingService) -> set[str]:
    result = check_project(project, service, settle_seconds=0.5)
    return {v.invariant for v in result.violations}


def _db(project: ChaosProject) -> sqlite3.Connection:
    return sqlite3.connect(project.db_path, isolation_level=None)


def test_a_clean_scenario_has_no_violations(
    finished: ChaosProject, service: CountingService
) -> None:
    result = check_project(finished, service)
    assert result.violations == []
    facts = result.facts
    assert (facts.turns, facts.completed, facts.host_runs, facts.effects_applied) == (2, 2, 2, 4)


def test_a_host_run_twice_breaks_invariant_2(
    finished: ChaosProject, service: CountingService, tmp_path: Path
) -> None:
    project = _copy(finished, tmp_path)
    runs = project.host_state / "runs.jsonl"
    first = runs.read_text().splitlines()[0]
    with runs.open("a") as fh:
        fh.write(first + "\n")
    assert _invariants(project, service) == {INV2}


def test_an_effect_applied_twice_breaks_invariant_3(
    finished: ChaosProject, service: CountingService, tmp_path: Path
) -> None:
    with CountingService() as own:  # a service of its own: the shared one stays clean
        for key, n in service.counts(NAME).items():
            for _ in range(n):
                own.readback(f"{NAME}/{key}")
                own.forge_apply(NAME, key)
        assert _invariants(finished, own) == set()
        intent = next(e for e in finished.session_events() if isinstance(e, EffectIntended))
        own.forge_apply(NAME, intent.idempotency_key)  # a retry, and no readback first
        own.forge_apply(NAME, "tkturn1-never-intended-e0")
        result = check_project(finished, own, settle_seconds=0.5)
    details = [v.detail for v in result.violations if v.invariant == INV3]
    assert {v.invariant for v in result.violations} == {INV3}
    assert any(f"applied key {intent.idempotency_key} 2 times" in d for d in details)
    assert any("without a readback before it" in d for d in details)
    assert any("which no intent names" in d for d in details)


def test_a_changed_event_fails_its_checksum_invariant_4(
    finished: ChaosProject, service: CountingService, tmp_path: Path
) -> None:
    project = _copy(finished, tmp_path)
    with _db(project) as db:
        db.execute(
            "UPDATE events SET payload = replace(payload, 'write a', 'write A') "
            "WHERE stream_id = ? AND type = 'turn.accepted'",
            (session_stream(project.session_id),),
        )
    assert INV4 in _invariants(project, service)


def test_a_projection_that_is_not_its_fold_breaks_invariant_5(
    finished: ChaosProject, service: CountingService, tmp_path: Path
) -> None:
    project = _copy(finished, tmp_path)
    stream = session_stream(project.session_id)
    with _db(project) as db:
        kind, head, version, state = db.execute(
            "SELECT kind, head_seq, schema_version, state FROM projections WHERE stream_id = ?",
            (stream,),
        ).fetchone()
        doctored = json.loads(state)
        doctored["counters"]["turns_completed"] += 5
        text = json.dumps(doctored)
        checksum = projection_checksum(stream, kind, head, version, text)
        db.execute(
            "UPDATE projections SET state = ?, checksum = ? WHERE stream_id = ?",
            (text, checksum, stream),
        )
    found = _invariants(project, service)
    assert INV5 in found
    assert INV4 not in found  # every record still passes its checksum


def test_a_cut_log_leaves_a_turn_without_its_end(
    finished: ChaosProject, service: CountingService, tmp_path: Path
) -> None:
    project = _copy(finished, tmp_path)
    stream = session_stream(project.session_id)
    with _db(project) as db:
        (last,) = db.execute(
            "SELECT MAX(seq) FROM events WHERE stream_id = ? AND type = 'turn.completed'",
            (stream,),
        ).fetchone()
        db.execute("DELETE FROM events WHERE stream_id = ? AND seq >= ?", (stream, last))
    found = _invariants(project, service)
    # The read of the cut stream stops short of its projection's head: the store says
    # events are missing (DATA_LOSS), and the projection is ahead of its fold.
    assert {INV4, INV5} <= found


def test_an_open_goal_and_a_leftover_process_are_reported(
    finished: ChaosProject, service: CountingService, tmp_path: Path
) -> None:
    project = _copy(finished, tmp_path)
    (project.repo / "b.txt").unlink()
    turn_id = next(iter(project.turn_ids()))
    env = {**os.environ, MARKER_ENV: turn_id}
    leftover = subprocess.Popen(["sleep", "60"], env=env)
    try:
        assert _invariants(project, service) == {GOAL, LEFTOVER}
        assert leftover.wait(timeout=10) == -9  # the checker ended it, by pid
        assert live_marked_processes([turn_id]) == {}
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
