"""Named crash points: where tests and the chaos harness SIGKILL the real control plane.

``TURNKEEPER_CRASH_AT=<point>`` in the environment a process starts with kills it
the first time it reaches ``<point>``; ``<point>@<n>`` the n-th time. Several may be
given, comma-separated.
The kill is a real SIGKILL of our own pid — no cleanup, no flush, no atexit — so
what survives is exactly what a power cut of the process would leave.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections import Counter

ENV_VAR = "TURNKEEPER_CRASH_AT"

# Every durable boundary of the turn transaction and of restart recovery, in order. The
# steps are declared in runtime/turn/steps.py (what each writes, what recovery does
# after it); a leaf imports nothing, so these names are kept equal to that declaration
# by tests/runtime/test_turn_steps.py rather than derived from it.
TURN_POINTS = (
    "turn.accepted",  # turn.accepted durable; host not started
    "host.spawned",  # host process running; its identity not yet recorded
    "host.started",  # host identity recorded
    "host.events",  # a batch of host events journaled (mid-turn)
    "receipt",  # receipt durable; not written back
    "written_back",  # write-back recorded; effects not started
    "effect.intended",  # an effect's intent durable; provider not called
    "effect.applied",  # provider's apply returned; outcome not recorded
    "effect.resolved",  # an effect's outcome durable (each effect hits the three)
    "completed",  # turn completed with its snapshot
)
RECOVERY_POINTS = (
    "recovery.killed",  # survivors ended; loss not yet recorded
    "recovery.lost",  # loss recorded; continuation not yet run
    "recovery.reported",  # recovery report recorded
)
ALL_POINTS = TURN_POINTS + RECOVERY_POINTS
# The steps of a revert (runtime/control/operations.py); not in ALL_POINTS, which the turn
# loop reaches: a revert is its own command.
REVERT_POINTS = (
    "revert.observed",  # generation and runtime observed; nothing written
    "revert.admitted",  # REVERT operation started, interrupted turn failed
    "revert.head_moved",  # branch / HEAD back at the snapshot's parent; index not reset yet
    "revert.restoring",  # workspace restored; host artifact not yet
    "revert.restored",  # restore recorded durable; operation not finished
)

_hits: Counter[str] = Counter()


def _targets(spec: str) -> dict[str, int]:
    targets: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, nth = item.partition("@")
        targets[name] = int(nth) if nth else 1
    return targets


@functools.cache
def _process_targets() -> dict[str, int]:
    """The crash points this process was started with, read once: a turn passes ~10
    points, and a lookup in ``os.environ`` of a name that is not there costs a raised
    and caught ``KeyError`` each. The harness names them in a process's environment
    when it starts it, never later."""
    return _targets(os.environ.get(ENV_VAR, ""))


def crash_point(name: str) -> None:
    """SIGKILL this process here when the environment asks for it."""
    targets = _process_targets()
    if not targets:
        return
    _hits[name] += 1
    if targets.get(name) == _hits[name]:
        sys.stdout.flush()
        sys.stderr.write(f"[crash point {name}#{_hits[name]}: SIGKILL]\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
