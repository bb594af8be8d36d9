"""Scenarios: a project, the control-plane runs that are killed, a last clean run, the checks.

A scenario is a plan of **stages** — each one ``turnkeeper run`` that must die by
SIGKILL: at a named crash point, or by the harness when the agent pauses mid-turn
(or, in random mode, when a timer fires) — followed by clean runs until the goal
closes. A clean run that stops at the operator gate of an ``indeterminate`` effect
is answered as an operator would: check the key at the service, then
``turnkeeper gate resolve``; then the goal must close.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from turnkeeper.kernel.session import EffectIntended, ReceiptRecorded, TurnAccepted
from turnkeeper.kernel.session.records import ReceiptFailure
from turnkeeper.runtime.control.run_outcome import RUN_BLOCKED
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.turn import steps
from turnkeeper.runtime.turn.effects import effect_gate_id
from turnkeeper_chaos.checks import INV3, Checker, CheckResult, Facts, Violation
from turnkeeper_chaos.procs import end_marked_processes
from turnkeeper_chaos.project import ChaosProject, KillPlan, RunRecord
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.workload import FAULT_ERROR_KINDS, GOAL_ID, Workload

Mode = Literal["enumerated", "random", "host-faults"]
MODES: tuple[Mode, ...] = ("enumerated", "random", "host-faults")
HARNESS = "harness"
MAX_CLEAN_RUNS = 6  # clean runs (gate rounds) before a scenario that will not close fails
OPERATOR = "chaos-operator"


@dataclass(frozen=True)
class Stage:
    """One control-plane run that must die by SIGKILL."""

    crash_at: str | None = None  # its own SIGKILL at this crash point
    kill: KillPlan | None = None  # or the harness's, by pid


@dataclass(frozen=True)
class ScenarioPlan:
    name: str
    mode: Mode
    workload: Workload = field(default_factory=Workload)
    stages: tuple[Stage, ...] = ()


@dataclass
class ScenarioResult:
    name: str
    mode: Mode
    root: Path
    violations: list[Violation] = field(default_factory=list)
    facts: Facts = field(default_factory=Facts)
    crash_points: list[str] = field(default_factory=list)  # "<point>#<n>" that killed a run
    kills: int = 0  # control planes SIGKILLed (crash points, pauses, timers)
    kills_in_recovery: int = 0
    kills_at_startup: int = 0
    back_to_back: int = 0  # the most kills in a row before a run was let finish
    runs: int = 0
    seconds: float = 0.0
    leftovers_ended: int = 0
    turn_ids: set[str] = field(default_factory=set)  # for the harness's last sweep

    @property
    def ok(self) -> bool:
        return not self.violations


class ScenarioRun:
    """Runs one plan in ``root`` against ``service``; ``execute()`` returns the result."""

    def __init__(self, plan: ScenarioPlan, root: Path, service: CountingService) -> None:
        self.plan = plan
        self.service = service
        self.result = ScenarioResult(plan.name, plan.mode, root)
        self.project = ChaosProject(root, plan.name, plan.workload)

    def violation(self, invariant: str, detail: str) -> None:
        self.result.violations.append(Violation(self.plan.name, invariant, detail[:1500]))

    def execute(self, body: Callable[[ScenarioRun], None] | None = None) -> ScenarioResult:
        started = time.monotonic()
        try:
            self.project = ChaosProject.create(
                self.result.root, self.plan.name, self.plan.workload, self.service
            )
            (body or _run_stages)(self)
            closed = self.finish()
            # Checked even when it did not close: what else broke says why.
            self.absorb(Checker(self.project, self.service).check(expect_closed=closed))
            if closed:
                self.check_plan()
        except Exception as exc:  # a harness failure is a finding, not a crash of the run
            self.violation(HARNESS, f"{type(exc).__name__}: {exc}")
        finally:
            try:
                self.result.turn_ids = self.project.turn_ids()
            except Exception as exc:
                self.violation(HARNESS, f"cannot list the scenario's turns: {exc}")
            self.result.leftovers_ended = len(end_marked_processes(self.result.turn_ids))
            self.result.seconds = time.monotonic() - started
        return self.result

    def absorb(self, checked: CheckResult) -> None:
        self.result.violations.extend(checked.violations)
        self.result.facts = checked.facts

    # --- runs -------------------------------------------------------------------------

    def run(self, stage: Stage | None = None) -> RunRecord:
        stage = stage or Stage()
        record = self.project.run(
            *self.plan.workload.run_args, crash_at=stage.crash_at, kill=stage.kill
        )
        self.result.runs += 1
        if record.timed_out:
            self.violation(
                HARNESS, f"a control plane ran too long and was ended\n{record.describe()}"
            )
        return record

    def killed_stage(self, stage: Stage) -> RunRecord:
        """A run that must die by SIGKILL; a miss is reported (the harness failed to hit)."""
        record = self.run(stage)
        if stage.crash_at is not None:
            hit = record.crash_point_hit
            point = stage.crash_at.partition("@")[0]
            if record.sigkilled and hit is not None and hit.startswith(f"{point}#"):
                self.result.crash_points.append(hit)
                self.result.kills += 1
                if point.startswith("recovery."):
                    self.result.kills_in_recovery += 1
            else:
                self.violation(
                    HARNESS, f"crash point {stage.crash_at} not reached\n{record.describe()}"
                )
        elif record.killed_by_harness:
            self.result.kills += 1
        elif stage.kill is not None and stage.kill.on_pause:
            self.violation(HARNESS, f"the agent never paused mid-turn\n{record.describe()}")
        return record

    def finish(self) -> bool:
        """Clean runs until the goal closes, answering effect gates as an operator."""
        counts_at_gate: dict[str, int] | None = None
        for _ in range(MAX_CLEAN_RUNS):
            record = self.run()
            summary = record.summary()
            stops = (summary or {}).get("stops")
            stop = stops.get(self.project.session_id) if isinstance(stops, dict) else None
            # A run that stops at an operator's gate exits RUN_BLOCKED (run_outcome.py).
            expected = RUN_BLOCKED if stop == "gate_blocked" else 0
            if record.returncode != expected or summary is None:
                self.violation(HARNESS, f"a clean run failed\n{record.describe()}")
                return False
            if stop == "goal_terminal" or (stop is None and self._goal_closed()):
                return True  # (None: an earlier run closed it; nothing was left to drive)
            if stop != "gate_blocked":
                self.violation(HARNESS, f"a clean run stopped at {stop!r}\n{record.describe()}")
                return False
            counts = self.service.counts(self.plan.name)
            if counts_at_gate is None:
                counts_at_gate = counts  # run once more: still blocked, nothing retried
                continue
            if counts != counts_at_gate:
                self.violation(INV3, "an indeterminate effect was retried")
            self.resolve_effect_gates()
            counts_at_gate = None
        self.violation(HARNESS, f"the goal did not close in {MAX_CLEAN_RUNS} clean runs")
        return False

    def _goal_closed(self) -> bool:
        with self.project.store() as store:
            return GoalService(store).load(GOAL_ID).is_closed

    def resolve_effect_gates(self) -> None:
        """What an operator does: read the key at the provider, then resolve the gate."""
        with self.project.store() as store:
            goal = GoalService(store).load(GOAL_ID)
        intents = [e for e in self.project.session_events() if isinstance(e, EffectIntended)]
        for intent in intents:
            gate = goal.gates.get(effect_gate_id(intent.turn_id, intent.effect_id))
            if gate is None or gate.resolution is not None:
                continue
            seen = self.service.count(self.plan.name, intent.idempotency_key)
            decision = "applied" if seen else "not_applied"
            payload = json.dumps({"key": intent.idempotency_key, "service_count": seen})
            done = self.project.cli(
                "gate",
                "resolve",
                gate.id,
                "--decision",
                decision,
                "--by",
                OPERATOR,
                "--payload",
                payload,
                "--json",
            )
            if done.returncode != 0:
                self.violation(HARNESS, f"gate resolve failed\n{done.describe()}")

    # --- what the plan itself promised ------------------------------------------------

    def check_plan(self) -> None:
        workload = self.plan.workload
        if workload.unconfirmable and not self.result.facts.gates_resolved:
            self.violation(INV3, "the unconfirmable effect opened no operator gate")
        if workload.fault is None:
            return
        events = self.project.session_events()
        failures = [
            e
            for e in events
            if isinstance(e, ReceiptRecorded) and isinstance(e.receipt, ReceiptFailure)
        ]
        kinds = [f.receipt.error_kind for f in failures if isinstance(f.receipt, ReceiptFailure)]
        if kinds != [FAULT_ERROR_KINDS[workload.fault]]:
            self.violation(HARNESS, f"host fault {workload.fault}: failure receipts {kinds}")
            return
        failed = failures[0].turn_id
        resumed = [
            e.envelope
            for e in events
            if isinstance(e, TurnAccepted) and e.envelope.recovers_turn_id == failed
        ]
        if not resumed or resumed[0].kind != "continuation" or resumed[0].attempt != 2:
            # The host bound its session before it failed: the next turn resumes that.
            self.violation(HARNESS, f"failed turn {failed} was not resumed by a continuation")


def _run_stages(run: ScenarioRun) -> None:
    for stage in run.plan.stages:
        run.killed_stage(stage)
    run.result.back_to_back = run.result.kills  # no run finished in between


# --- the plans ---------------------------------------------------------------------------


def control_plane_points() -> list[str]:
    """Every named crash point: the turn transaction's (the effects' among them), then
    recovery's, as runtime/turn/steps.py declares them."""
    return [*steps.turn_points(), *steps.recovery_points()]


def _slug(point: str) -> str:
    return point.replace(".", "-").replace("@", "-")


def enumerated_plans() -> list[ScenarioPlan]:
    """Each crash point hit in turn, then a restart; recovery's after a mid-turn kill."""
    plans = []
    paused = Stage(kill=KillPlan(on_pause=True))
    for point in control_plane_points():
        if point.startswith("recovery."):
            # Killed while the agent is paused mid-turn (it and a detached child alive),
            # then killed again inside the restart's recovery, at the point.
            stages = (paused, Stage(crash_at=f"{point}@1"))
            plans.append(
                ScenarioPlan(
                    f"enum-{_slug(point)}", "enumerated", Workload(pause_last=True), stages
                )
            )
            continue
        plans.append(
            ScenarioPlan(
                f"enum-{_slug(point)}", "enumerated", stages=(Stage(crash_at=f"{point}@1"),)
            )
        )
        if point.startswith("effect."):
            # The turn's second effect, the first one already settled.
            plans.append(
                ScenarioPlan(
                    f"enum-{_slug(point)}-2", "enumerated", stages=(Stage(crash_at=f"{point}@2"),)
                )
            )
    # Killed after an apply whose readback can no longer confirm it: indeterminate, an
    # operator gate, never retried; resolved as an operator would, then the goal closes.
    plans.append(
        ScenarioPlan(
            "enum-effect-applied-unconfirmable",
            "enumerated",
            Workload(unconfirmable=True),
            (Stage(crash_at="effect.applied@1"),),
        )
    )
    return plans


def host_fault_plans() -> list[ScenarioPlan]:
    """The host fails mid-turn (the control plane alive): recorded, then resumed."""
    faults = sorted(FAULT_ERROR_KINDS, key=lambda f: f != "hang")  # the longest first
    return [
        ScenarioPlan(f"host-{fault.replace('_', '-')}", "host-faults", Workload(fault=fault))
        for fault in faults
    ]
