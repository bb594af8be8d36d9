"""How each session a run drove ended, in one word, and the run's exit code from them.

A script or CI that starts ``turnkeeper run`` must tell success from failure by the
exit code alone. Every session the run drove ends in one :class:`SessionOutcome`; the
run exits 0 only when each one finished or was stopped by request, and otherwise with
the code of the worst outcome (crashed before suspended before blocked). These codes
follow the error taxonomy's 1 to 10 (turnkeeper/errors.py), which ``run`` keeps for an
error that ended the run itself; the README's exit-code table lists both.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Final

from turnkeeper.kernel.session.planner import StopReason


class SessionOutcome(StrEnum):
    # Its goal passed the terminal audit.
    FINISHED = "finished"
    # Stopped by request: a signal, ``--max-turns``, an operator's stop, crash or
    # take-over, or left to the live controller that drives it.
    REQUESTED = "requested"
    # Waits for a person or a resource: an open gate, nothing runnable, a recovery an
    # operator must resolve, no runner answering.
    BLOCKED = "blocked"
    # Suspended by a bound: hung or lost turns in a row, no progress, a host that is
    # not ready, a disabled extension, processes that would not settle.
    SUSPENDED = "suspended"
    # Marked crashed: its failures ran out, or its host's record is damaged.
    CRASHED = "crashed"


RUN_CRASHED: Final = 11
RUN_SUSPENDED: Final = 12
RUN_BLOCKED: Final = 13

# The exit code of each outcome that is not a success, worst first.
EXIT_CODES: Final = {
    SessionOutcome.CRASHED: RUN_CRASHED,
    SessionOutcome.SUSPENDED: RUN_SUSPENDED,
    SessionOutcome.BLOCKED: RUN_BLOCKED,
}

_PLANNED: Final[dict[StopReason, SessionOutcome]] = {
    "goal_terminal": SessionOutcome.FINISHED,
    "budget": SessionOutcome.REQUESTED,
    "session_closed": SessionOutcome.FINISHED,
    "gate_blocked": SessionOutcome.BLOCKED,
    "nothing_runnable": SessionOutcome.BLOCKED,
    "turn_in_flight": SessionOutcome.BLOCKED,
    "recovery_unresolved": SessionOutcome.BLOCKED,
    "session_suspended": SessionOutcome.SUSPENDED,
    "session_crashed": SessionOutcome.CRASHED,
}


def planned_outcome(reason: StopReason) -> SessionOutcome:
    """The outcome of a session whose plan said stop for ``reason``."""
    return _PLANNED[reason]


def run_exit_code(outcomes: Iterable[SessionOutcome]) -> int:
    """0 when every outcome is a success; else the worst one's code."""
    codes = [EXIT_CODES[o] for o in outcomes if o in EXIT_CODES]
    worst = (RUN_CRASHED, RUN_SUSPENDED, RUN_BLOCKED)
    return next((code for code in worst if code in codes), 0)
