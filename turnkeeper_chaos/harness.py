"""The chaos harness: run the scenarios of the chosen modes side by side, then report.

One counting service serves every scenario (each in its own namespace). Scenarios
run in ``workers`` threads; their work happens in subprocesses (control planes,
agents, git), so threads overlap the interpreter starts and recovery backoffs.
Passing scenarios' directories are removed unless ``keep``; a failing one's stays
for the post-mortem. At the end, any process still carrying one of the harness's
own turn markers is ended by pid.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import zip_longest
from pathlib import Path
from typing import Literal, Protocol

from turnkeeper.errors import InvalidArgument
from turnkeeper_chaos.procs import end_marked_processes
from turnkeeper_chaos.randomkills import KillBudget, random_body
from turnkeeper_chaos.report import ChaosReport
from turnkeeper_chaos.scenarios import (
    Mode,
    ScenarioPlan,
    ScenarioResult,
    ScenarioRun,
    control_plane_points,
    enumerated_plans,
    host_fault_plans,
)
from turnkeeper_chaos.service import CountingService

ModeChoice = Literal["enumerated", "random", "host-faults", "all"]


@dataclass(frozen=True)
class ChaosConfig:
    mode: ModeChoice = "all"
    kills: int = 20  # random mode: SIGKILLs to land in total
    seed: int = 0
    workers: int = 2
    keep: bool = False
    base_dir: Path | None = None  # default: a new temporary directory
    time_limit: float = 3600.0  # random mode starts no kill after this many of its seconds
    only: tuple[str, ...] = ()  # run only the fixed scenarios with these names
    todos: int = 2  # the goal's todos: 1 is the cheapest goal that still has effects

    def modes(self) -> list[Mode]:
        if self.mode == "all":
            return ["enumerated", "random", "host-faults"]
        return [self.mode]

    def validate(self) -> None:
        if self.workers < 1:
            raise InvalidArgument("--workers must be at least 1", reason="invalid_workers")
        if self.kills < 0:
            raise InvalidArgument("--kills must not be negative", reason="invalid_kills")
        if self.time_limit <= 0:
            raise InvalidArgument("--time-limit must be positive", reason="invalid_time_limit")


class Progress(Protocol):
    """What the harness tells a progress display."""

    def planned(self, mode: Mode, total: int) -> None: ...

    def advance(self, mode: Mode, amount: int = 1) -> None: ...

    def scenario_done(self, result: ScenarioResult) -> None: ...


class NoProgress:
    def planned(self, mode: Mode, total: int) -> None:
        pass

    def advance(self, mode: Mode, amount: int = 1) -> None:
        pass

    def scenario_done(self, result: ScenarioResult) -> None:
        pass


class Harness:
    def __init__(self, config: ChaosConfig, progress: Progress | None = None) -> None:
        config.validate()
        self.config = config
        self.progress = progress or NoProgress()
        self._lock = threading.Lock()
        self._results: list[ScenarioResult] = []
        self._own_base = config.base_dir is None
        self.base = config.base_dir or Path(tempfile.mkdtemp(prefix="turnkeeper-chaos-"))
        self.base.mkdir(parents=True, exist_ok=True)

    def fixed_plans(self) -> list[ScenarioPlan]:
        modes = self.config.modes()
        faults = host_fault_plans() if "host-faults" in modes else []
        enumerated = enumerated_plans() if "enumerated" in modes else []
        # Interleaved: a worker waiting out a host fault's backoff or timeout (idle)
        # runs beside one that kills control planes (busy), not beside another wait.
        plans = [p for pair in zip_longest(faults, enumerated) for p in pair if p is not None]
        if self.config.only:
            plans = [p for p in plans if p.name in self.config.only]
        return plans

    def run(self) -> ChaosReport:
        started = time.monotonic()
        modes = self.config.modes()
        plans = self.fixed_plans()
        for mode in modes:
            if mode != "random":
                self.progress.planned(mode, sum(1 for p in plans if p.mode == mode))
        budget = None
        if "random" in modes:
            budget = KillBudget(self.config.kills, self.config.seed, self.config.time_limit)
            self.progress.planned("random", self.config.kills)
        with CountingService() as service:
            try:
                with ThreadPoolExecutor(self.config.workers, "chaos") as pool:
                    futures: list[Future[None]] = [
                        pool.submit(self._one, plan, service) for plan in plans
                    ]
                    if budget is not None and budget.kills > 0:
                        futures += [
                            pool.submit(self._random_worker, budget, service)
                            for _ in range(self.config.workers)
                        ]
                    for future in futures:
                        future.result()
            finally:
                end_marked_processes({t for r in self._results for t in r.turn_ids})
        report = ChaosReport(
            seed=self.config.seed,
            modes=list(modes),
            kills_asked=self.config.kills if budget else 0,
            all_points=_targeted(plans) if self.config.only else control_plane_points(),
            results=sorted(self._results, key=lambda r: (r.mode, r.name)),
            elapsed=time.monotonic() - started,
            base_dir=self.base,
            kept=self.config.keep,
            random_time_limited=budget is not None and budget.timed_out,
        )
        if self._own_base and not self.config.keep and report.ok:
            shutil.rmtree(self.base, ignore_errors=True)
        return report

    def _one(
        self,
        plan: ScenarioPlan,
        service: CountingService,
        body: Callable[[ScenarioRun], None] | None = None,
    ) -> None:
        plan = replace(plan, workload=replace(plan.workload, todos=self.config.todos))
        result = ScenarioRun(plan, self.base / plan.name, service).execute(body)
        if result.ok and not self.config.keep:
            shutil.rmtree(result.root, ignore_errors=True)
        with self._lock:
            self._results.append(result)
        if plan.mode != "random":
            self.progress.advance(plan.mode)
        self.progress.scenario_done(result)

    def _random_worker(self, budget: KillBudget, service: CountingService) -> None:
        while (next_plan := budget.next_plan()) is not None:
            plan, planned = next_plan
            body = random_body(budget, planned, lambda: self.progress.advance("random"))
            self._one(plan, service, body)


def _targeted(plans: list[ScenarioPlan]) -> list[str]:
    """The crash points these plans aim at, in order."""
    points = (s.crash_at.partition("@")[0] for p in plans for s in p.stages if s.crash_at)
    return list(dict.fromkeys(points))


def run_chaos(config: ChaosConfig, progress: Progress | None = None) -> ChaosReport:
    """Run the chaos scenarios ``config`` asks for; the report says what was violated."""
    return Harness(config, progress).run()
