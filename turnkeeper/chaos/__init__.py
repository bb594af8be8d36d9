"""The chaos harness: SIGKILL the real control plane everywhere and check it recovers.

``turnkeeper chaos`` (see :mod:`turnkeeper.cli.chaos`) and the tests drive
:func:`run_chaos`. Three modes:

* **enumerated** — every crash point of the turn and of recovery, as
  :mod:`turnkeeper.runtime.turn.steps` declares them, hit in turn: ``turnkeeper
  run`` SIGKILLs itself there, is restarted, and the scenario checked;
* **random** — SIGKILLs by the harness, by pid, after random delays: during
  start-up, recovery and turns, several back to back;
* **host-faults** — the agent host SIGKILLed, segfaulting, hanging past its
  timeout, exiting non-zero, printing garbage.

Every scenario is a throwaway git repo and project whose goal is worked by the
``scripted`` agent, with effects against a real HTTP counting service on
127.0.0.1 (:mod:`.service`). After every scenario :mod:`.checks` verifies
the invariants of docs/design.md (1-5), the goal's terminal audit, each effect key applied
exactly once, and that nothing the turns started is left running.
"""

from turnkeeper.chaos.checks import CheckResult, Facts, Violation, check_project
from turnkeeper.chaos.harness import ChaosConfig, run_chaos
from turnkeeper.chaos.project import ChaosProject
from turnkeeper.chaos.report import ChaosReport
from turnkeeper.chaos.service import CountingService
from turnkeeper.chaos.workload import Workload

__all__ = [
    "ChaosConfig",
    "ChaosProject",
    "ChaosReport",
    "CheckResult",
    "CountingService",
    "Facts",
    "Violation",
    "Workload",
    "check_project",
    "run_chaos",
]
