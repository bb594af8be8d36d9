"""Random mode: the control plane SIGKILLed by a timer at random moments.

No crash points: the harness starts ``turnkeeper run``, waits a random delay and
SIGKILLs the process by pid — wherever it is: starting up, inside restart
recovery, driving a host, writing back, mid-HTTP call to the effect service.
Each scenario takes a random number of kills **back to back** (each restart
killed again before any run is let finish), then clean runs until the goal
closes, then the checks.

Delays adapt to what the harness measures: a share of the kills aims at the
window in which a restart is still recovering (its timer armed when the restart
takes the session's lease, i.e. its first write, read from SQLite; it fires within
the recovery's measured length), the rest fall anywhere in a run. The plan — how many kills
each scenario takes and where in those windows each falls — comes from
``--seed``; the exact moments depend on the machine's timing.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from turnkeeper.kernel.session import LeaseAcquired, RecoveryReported, SessionEvent
from turnkeeper.runtime.control.run_outcome import RUN_BLOCKED
from turnkeeper_chaos.project import KillPlan, RunRecord
from turnkeeper_chaos.scenarios import HARNESS, ScenarioPlan, ScenarioRun, Stage
from turnkeeper_chaos.workload import Workload

# How a run the harness did not kill may end: done, or stopped at an operator's gate
# (an unconfirmable effect: run_outcome.py's RUN_BLOCKED), which the next run answers.
FINISHED_RUN = (0, RUN_BLOCKED)

MAX_KILLS_IN_A_ROW = 6
AIM_AT_RECOVERY = 0.4  # share of kills aimed at the restart's recovery window
ANYWHERE = 0.15  # share of kills anywhere, start-up included; the rest after start-up


@dataclass
class _Timing:
    """Seconds a control plane takes, as the harness has measured them so far."""

    started: float = 1.5  # from spawn until it took the session's lease (start-up done)
    recovery: float = 0.1  # from the lease until its recovery report was durable
    full: float = 4.0  # from spawn until it exited, when nothing killed it

    def learn(self, attr: str, value: float) -> None:
        if value > 0:
            setattr(self, attr, getattr(self, attr) + 0.25 * (value - getattr(self, attr)))


class KillBudget:
    """Hands out random scenarios until ``kills`` kills are done or time is up."""

    def __init__(self, kills: int, seed: int, time_limit: float) -> None:
        self.kills = kills
        self.seed = seed
        self.time_limit = time_limit
        self._deadline: float | None = None  # set by the first scenario handed out
        self._lock = threading.Lock()
        self._reserved = 0  # kills promised to running scenarios or done
        self._index = 0
        self._timing = _Timing()
        self.timed_out = False

    @property
    def out_of_time(self) -> bool:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self.timed_out = True
        return self.timed_out

    def next_plan(self) -> tuple[ScenarioPlan, int] | None:
        """The next scenario and how many kills it may take; None when all are handed out."""
        with self._lock:
            left = self.kills - self._reserved
            if left <= 0 or self.out_of_time:
                return None
            if self._deadline is None:
                self._deadline = time.monotonic() + self.time_limit
            self._index += 1
            rng = random.Random(f"{self.seed}:{self._index}")
            planned = min(left, rng.randint(1, MAX_KILLS_IN_A_ROW))
            self._reserved += planned
            # Hosts that work a little longer leave more room for kills mid-turn.
            workload = Workload(host_sleep=round(rng.uniform(0.05, 0.6), 2))
            return ScenarioPlan(f"random-{self._index:03d}", "random", workload), planned

    def give_back(self, unused: int) -> None:
        with self._lock:
            self._reserved -= unused

    def kill_plan(self, rng: random.Random) -> KillPlan:
        """When to kill the next run: a share inside the restart's recovery (timed from
        when it takes the lease), a share anywhere, the rest after start-up."""
        with self._lock:
            t = replace(self._timing)
        full = max(t.full, t.started + t.recovery + 1.0)
        pick = rng.random()
        if pick < AIM_AT_RECOVERY:
            return KillPlan(after_lease_seconds=rng.uniform(0.0, 1.2 * t.recovery))
        if pick < AIM_AT_RECOVERY + ANYWHERE:
            return KillPlan(after_seconds=rng.uniform(0.0, full))
        return KillPlan(after_seconds=rng.uniform(t.started, full))

    def observe(self, record: RunRecord, new_events: list[SessionEvent]) -> str:
        """Learn the run's timing from what it journaled; where it was when it ended:
        ``startup`` (the session untouched), ``recovery`` or ``turns``."""
        lease = next((e for e in new_events if isinstance(e, LeaseAcquired)), None)
        report = next((e for e in new_events if isinstance(e, RecoveryReported)), None)
        with self._lock:
            if lease is not None:
                self._timing.learn("started", lease.at.timestamp() - record.spawned_at)
            if report is not None and lease is not None:
                took = (report.report.finished_at - lease.at).total_seconds()
                self._timing.learn("recovery", took)
            if record.returncode in FINISHED_RUN:
                self._timing.learn("full", record.seconds)
        if lease is None:
            return "startup"
        return "recovery" if report is None else "turns"


def random_body(
    budget: KillBudget, planned: int, on_kill: Callable[[], None]
) -> Callable[[ScenarioRun], None]:
    """The killed runs of one random scenario (``ScenarioRun.execute`` adds the rest)."""

    def body(run: ScenarioRun) -> None:
        rng = random.Random(f"{budget.seed}:{run.plan.name}:delays")
        done = 0
        try:
            while done < planned and not budget.out_of_time:
                seen = len(run.project.session_events())
                record = run.run(Stage(kill=budget.kill_plan(rng)))
                where = budget.observe(record, run.project.session_events()[seen:])
                if not record.killed_by_harness:
                    if record.returncode not in FINISHED_RUN:
                        run.violation(HARNESS, f"an unkilled run failed\n{record.describe()}")
                    break  # the run finished before its timer: the goal is done
                done += 1
                run.result.kills += 1
                on_kill()
                if where == "startup":
                    run.result.kills_at_startup += 1
                elif where == "recovery":
                    run.result.kills_in_recovery += 1
            run.result.back_to_back = done
        finally:
            budget.give_back(planned - done)

    return body
