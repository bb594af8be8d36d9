"""Database restarts under workers whose turns outlast their lease.

A worker's lease keeper renews every lease it holds while a turn runs; a database
restart must not stop it. On main the keeper read the database's clock outside its
handling of ``UNAVAILABLE``: a restart at the wrong moment killed its thread for good,
and from then on every turn longer than the lease ended "lease had expired; taken
again and recovered", was recorded ``lost`` and run again — forever.

Here four real ``turnkeeper run --worker`` processes share a throwaway cluster of the
test's own (tests/pg_cluster.py: the shared server is never restarted), with a lease
of 10 s and agent turns of 12 s that each apply one counted effect
(turnkeeper_chaos/workers.py's agent, its effects counted by the harness's
``CountingService``). The cluster is restarted three times, each outage shorter than
the workers' ride-out (half the lease, cli/run.py), once right after two busy workers
were SIGKILLed while the others and two fresh ones take their sessions over. Then:
every goal closes, the only lost turns are the ones in flight on the killed workers
(none lost to an expired lease a live worker could renew), no host ran twice, every
effect was applied once, ``turnkeeper verify`` is clean, and no worker fell behind
on a lease ("lease had expired").

And when the database stays away far longer, the turn in flight may be lost, but the
keeper is only down: ``turnkeeper status`` (text and JSON) and ``Project.status`` say
which worker's lease keeper is down, since when and why, from what the worker wrote
under ``.turnkeeper/`` (the API's answer carries the same, but cannot authenticate its
caller while the database is away: tests/api/test_status_controllers.py), and the
next turn longer than the lease completes once the database is back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.pg_cluster import PgCluster, pg_cluster
from tests.usage.project import Background, turnkeeper_executable, wait_for
from tests.usage.test_postgres_workers import WorkersProject, agent_of, project, records
from turnkeeper import Project
from turnkeeper.errors import Unavailable
from turnkeeper.kernel.session import (
    HostStarted,
    LeaseAcquired,
    TurnAccepted,
    TurnCompleted,
    TurnLost,
)
from turnkeeper_chaos.worker_checks import owner_pid, read_runs

__all__ = ["pg_cluster", "project"]
pytestmark = pytest.mark.timeout(240)

LEASE = 10.0
RIDE_OUT = LEASE / 2  # cli/run.py: a worker's writes wait this long for the database
TURN_SECONDS = 12.0  # longer than the lease: only a live keeper saves the turn
# How long each restart keeps the database down: near the ride-out, so a renewal
# meets it (and the store's clock, read again every 10 s, often falls due in it: what
# killed the keeper on main), yet short enough for no lease to lapse.
DOWN_SECONDS = 3.0
# The long outage: over the store's clock resampling (10 s) and a renewal's ride-out.
LONG_OUTAGE_SECONDS = 16.0
# What the workers must never report: a lease that ran out under a live worker.
LEASE_FELL_BEHIND = ("lease_reacquired", "lease_lost")


def _workers_args(*extra: str) -> list[str]:
    return ["--lease", str(LEASE), "--max-sessions", "3", "--idle-exit", "6", *extra]


def _restart(cluster: PgCluster, outages: list[float]) -> None:
    """Restart the cluster ("fast": sessions ended cleanly), the outage measured."""
    began = time.monotonic()
    cluster.restart("fast", down_seconds=DOWN_SECONDS)
    outages.append(time.monotonic() - began)


def _agents_running(project: WorkersProject, workers: list[Background]) -> int:
    return sum(agent_of(w, project.agent) for w in workers if w.proc.poll() is None)


def _lost_turns(project: WorkersProject) -> list[tuple[str, str, int | None]]:
    """(session, turn, pid of the worker that accepted it) of every lost turn."""
    lost = []
    for sid in project.sessions:
        owner, accepted_by = "", {}
        for event in project.view(sid).session_events():
            if isinstance(event, LeaseAcquired):
                owner = event.owner
            elif isinstance(event, TurnAccepted):
                accepted_by[event.envelope.turn_id] = owner
            elif isinstance(event, TurnLost):
                lost.append((sid, event.turn_id, owner_pid(accepted_by.get(event.turn_id, ""))))
    return lost


def _turn_seconds(project: WorkersProject) -> list[float]:
    """How long each completed turn took, host start to completion."""
    spans = []
    for sid in project.sessions:
        started = {}
        for event in project.view(sid).session_events():
            if isinstance(event, HostStarted):
                started[event.turn_id] = event.at
            elif isinstance(event, TurnCompleted) and event.turn_id in started:
                spans.append((event.at - started[event.turn_id]) / timedelta(seconds=1))
    return spans


def test_four_workers_ride_out_three_database_restarts_with_turns_longer_than_the_lease(
    project: WorkersProject, pg_cluster: PgCluster
) -> None:
    project.add_sessions(8, todos=2, work_seconds=TURN_SECONDS)
    workers = [project.worker(*_workers_args()) for _ in range(4)]
    outages: list[float] = []
    at_restart: list[int] = []  # agents running as each restart began (1st, 3rd: some)

    # 1. Mid-turn: every session's first turn is a few seconds in.
    wait_for(lambda: len(read_runs(project.runs)) >= 6, 60, "the first turns to run")
    time.sleep(3)
    at_restart.append(_agents_running(project, workers))
    _restart(pg_cluster, outages)

    # 2. Two busy workers SIGKILLed mid-turn, two fresh ones started in their place, and
    #    the database restarted while their sessions are taken over and recovered.
    wait_for(lambda: len(read_runs(project.runs)) >= 10, 60, "second turns to run")
    busy: list[Background] = []

    def two_busy() -> bool:
        busy[:] = [w for w in workers if agent_of(w, project.agent)]
        return len(busy) >= 2

    wait_for(two_busy, 30, "two workers with a turn in flight to kill")
    killed = busy[:2]
    for worker in killed:
        worker.proc.send_signal(signal.SIGKILL)  # our own child, by its pid
    for worker in killed:
        worker.wait()
    workers += [project.worker(*_workers_args()) for _ in range(2)]
    time.sleep(0.5)
    at_restart.append(_agents_running(project, workers))
    _restart(pg_cluster, outages)

    # 3. Mid-turn again, once the taken-over sessions run turns.
    runs = len(read_runs(project.runs))
    wait_for(lambda: len(read_runs(project.runs)) >= runs + 2, 60, "turns after the takeover")
    time.sleep(3)
    at_restart.append(_agents_running(project, workers))
    _restart(pg_cluster, outages)

    for worker in workers:
        if worker not in killed:
            assert worker.wait(timeout=150) == 0, worker.output()
            assert "Traceback" not in worker.err.read_text(errors="replace"), worker.output()

    # The premise: three restarts, each under running turns, each shorter than the
    # workers ride out (their writes wait that long: no turn need be let go).
    assert len(outages) == 3 and all(o < RIDE_OUT for o in outages), outages
    assert at_restart[0] >= 1 and at_restart[2] >= 1, at_restart  # mid-turn
    # The killed workers' sessions were taken over (at once: their death is provable).
    assert any(records(w, "lease_taken_over") for w in workers), "taken over"
    assert any(records(w, "database_unavailable") for w in workers), "the outages were seen"
    assert min(_turn_seconds(project)) > LEASE  # every completed turn outlasted its lease

    # Every goal closed, one writer per lease epoch, each host run once under the
    # worker holding its lease, each effect applied once; verify clean; none left.
    killed_pids = frozenset(w.pid for w in killed)
    project.check_all(killed=killed_pids)
    # No turn was lost but those in flight on the killed workers: none to a lease that
    # ran out under a worker that could have renewed it.
    lost = _lost_turns(project)
    assert all(pid in killed_pids for _, _, pid in lost), lost
    fell_behind = [
        line for w in workers for line in w.json_lines() if line.get("event") in LEASE_FELL_BEHIND
    ]
    assert fell_behind == [], fell_behind


def test_a_long_outage_shows_the_keeper_down_and_later_long_turns_still_complete(
    project: WorkersProject, pg_cluster: PgCluster
) -> None:
    """The issue's case: the database away far longer than the ride-out (and than the
    store's clock resampling, CLOCK_RESAMPLE_S) while a long turn runs. The turn in
    flight may be lost — its lease ran out with nobody able to renew it — but the
    worker's lease keeper is only *down*: ``status`` shows it so from the worker's file
    while the database does not answer, it comes back up with the database, and the
    next turn, longer than the lease, completes. On main the keeper's thread died in
    the outage and every later turn longer than the lease was lost, without end."""
    lease = 6.0
    project.add_sessions(1, todos=1, work_seconds=20.0)  # each turn: over three leases
    worker = project.worker("--lease", str(lease), "--idle-exit", "3")
    wait_for(lambda: agent_of(worker, project.agent), 60, "the agent to run")
    # Its start journaled: from here the turn's thread waits on the agent, writing
    # nothing, while the keeper alone talks to the database (and meets the outage).
    time.sleep(2)
    with Project.open(project.root) as api:  # a program's project, open before the outage
        pg_cluster.stop("fast")
        stopped = time.monotonic()
        try:
            wait_for(lambda: _keeper(worker, "thread_down"), 30, "the keeper to go down")
            _status_while_down(project, worker, api)
            # Longer than the store's clock resampling plus a renewal's ride-out.
            time.sleep(max(0.0, stopped + LONG_OUTAGE_SECONDS - time.monotonic()))
        finally:
            pg_cluster.start()
    wait_for(lambda: _keeper(worker, "thread_up"), 60, "the keeper to come back up")
    assert worker.wait(timeout=120) == 0, worker.output()
    assert not (project.root / ".turnkeeper" / "controllers" / f"{worker.pid}.json").exists()
    goals = json.loads(project.tk("status", "--json").stdout)["goals"]
    assert [g["status"] for g in goals] == ["closed"]
    (sid,) = project.sessions
    events = project.view(sid).session_events()
    accepted = sum(isinstance(e, TurnAccepted) for e in events)
    assert sum(isinstance(e, TurnCompleted) for e in events) == 1 and accepted <= 2, events
    assert min(_turn_seconds(project)) > lease


def _keeper(worker: Background, event: str) -> bool:
    """Whether the worker reported its lease keeper going down (or up again)."""
    return any(line.get("thread") == "lease keeper" for line in records(worker, event))


def _status_while_down(project: WorkersProject, worker: Background, api: Project) -> None:
    shown = f"worker {worker.pid}: lease keeper down since "
    text = _tk(project, "status")
    assert text.returncode == 9, text.stdout + text.stderr  # UNAVAILABLE
    assert shown in text.stdout and "(error: UNAVAILABLE" in text.stdout, text.stdout
    as_json = _tk(project, "status", "--json")
    assert as_json.returncode == 9
    error = json.loads(as_json.stdout)["error"]
    (controller,) = error["details"]["controllers"]
    assert (controller["pid"], controller["role"]) == (worker.pid, "worker")
    (keeper,) = [t for t in controller["threads"] if t["name"] == "lease keeper"]
    assert keeper["state"] == "down" and keeper["down_since"] and keeper["last_error"]
    with pytest.raises(Unavailable) as raised:
        api.status()
    controllers = raised.value.details["controllers"]
    assert isinstance(controllers, list) and [c["pid"] for c in controllers] == [worker.pid]


def _tk(project: WorkersProject, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*turnkeeper_executable(), *args],
        cwd=project.root,
        env=project.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(autouse=True)
def _cluster_running(pg_cluster: PgCluster) -> Iterator[None]:
    """Each test leaves the module's cluster running, whatever it did to it."""
    yield
    if not pg_cluster.running():
        pg_cluster.start()
