"""What ``run`` is told (:class:`ControllerConfig`) and what it reports when it ends
(:class:`RunSummary`): the controller's inputs and output, apart from its loop."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

from turnkeeper.kernel.session import ProgressPolicy, RecoveryPolicy
from turnkeeper.runtime.control.run_outcome import SessionOutcome, run_exit_code
from turnkeeper.runtime.turn.brief import AgentLimits
from turnkeeper.runtime.turn.driver import DriverConfig
from turnkeeper.runtime.turn.lease_keeper import LEASE_SECONDS
from turnkeeper.runtime.turn.runner_link import RunnerLink

__all__ = ["LEASE_SECONDS", "ControllerConfig", "RunSummary"]


@dataclass
class ControllerConfig(DriverConfig):
    """The driver's settings (lease length, host timeout and loader, turn limits, clock)
    and the control loop's own."""

    policy: RecoveryPolicy = field(default_factory=lambda: RecoveryPolicy(max_attempts=4))
    progress: ProgressPolicy = field(default_factory=ProgressPolicy)
    max_turns: int | None = None
    # Turns (hosts) running at once; sessions beyond it wait for a free slot.
    max_concurrent: int = 64
    close_goal_when_terminal: bool = True
    # Seconds without any host output before ``run`` warns that the host is silent.
    silence_warning_seconds: float = 120.0
    # The project's runner (runtime/turn/runner_link.py): hosts run their turns there, and
    # turns it kept running through a restart are reattached. None: hosts are ours.
    runner: RunnerLink | None = None
    # ``--runner require``: seconds a session waits for a runner that does not answer.
    runner_wait_seconds: float = 300.0

    def for_driver(self) -> DriverConfig:
        """The driver's part, its host loader routed through the runner when there is one."""
        mine = {f.name: getattr(self, f.name) for f in fields(DriverConfig)}
        # The agent's brief states the bounds the control loop enforces.
        mine["agent_limits"] = AgentLimits(
            max_attempts=self.policy.max_attempts,
            max_turns_without_progress=self.progress.max_turns_without_progress,
        )
        runner = self.runner
        if runner is not None:
            mine["host_loader"] = runner.loader(None if runner.required else self.host_loader)
        return DriverConfig(**mine)


@dataclass
class RunSummary:
    turns: int = 0
    failed_turns: int = 0
    reattached: int = 0  # turns a runner kept running through a restart, finished here
    stops: dict[str, str] = field(default_factory=dict)  # session id -> why it stopped
    # session id -> the typed reason behind a stop, where there is one
    # (``crashed``: recovery_attempts_exhausted; ``lease_lost``: who took it over).
    reasons: dict[str, str] = field(default_factory=dict)
    # Sessions' threads write here at once.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    # session id -> how it ended (runtime/control/run_outcome.py): the run's exit code.
    outcomes: dict[str, SessionOutcome] = field(default_factory=dict)

    def stop(
        self,
        session_id: str,
        why: str,
        reason: str = "",
        outcome: SessionOutcome = SessionOutcome.REQUESTED,
    ) -> None:
        with self._lock:
            self.stops.setdefault(session_id, why)
            self.outcomes.setdefault(session_id, outcome)
            if reason and session_id not in self.reasons:
                self.reasons[session_id] = reason

    def exit_code(self) -> int:
        """0 when every session finished or stopped by request; else the worst's code."""
        with self._lock:
            return run_exit_code(self.outcomes.values())

    def count_failure(self) -> None:
        with self._lock:
            self.failed_turns += 1

    def count_reattached(self) -> None:
        with self._lock:
            self.reattached += 1
