"""The chaos harness: SIGKILL the real control plane everywhere and check it recovers.

A package beside turnkeeper, in the same distribution, not part of its core
(docs/chaos.md): it imports turnkeeper, and turnkeeper imports it only in the
``turnkeeper chaos`` command (turnkeeper/cli/chaos.py), when that command runs.
``turnkeeper chaos`` and the tests drive :func:`run_chaos`; ``--mode workers``
(:mod:`.workers`) and ``--mode runner`` (:mod:`.runner_mode`) have entry points of
their own. The three modes of :func:`run_chaos`:

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

from turnkeeper_chaos.checks import CheckResult, Facts, Violation, check_project
from turnkeeper_chaos.harness import ChaosConfig, run_chaos
from turnkeeper_chaos.project import ChaosProject
from turnkeeper_chaos.report import ChaosReport
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.workload import Workload

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
