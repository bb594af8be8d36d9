"""The words the hosts and the session kernel share, defined once.

A host reports how its turn ended and the kernel records it; the driver asks a host
for a turn of a kind and the kernel planned that kind. Both sides use these types
(the kernel imports nothing else outside itself, the hosts nothing of the kernel), so
neither converts the other's spelling. They are string enums: each member is its
value, which is what the event log stores.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class TurnKind(StrEnum):
    """What a turn is for (the kernel's planner decides it)."""

    START = "start"  # the first turn on a todo
    CONTINUATION = "continuation"  # resumes the host session after a lost turn
    RETRY = "retry"  # a failed or lost attempt, again
    REPLAN = "replan"  # answers a replan obligation
    REPAIR = "repair"  # puts right what a verification found broken


class HostStatus(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class HostErrorKind(StrEnum):
    """Why a turn's host step failed; the receipt's ``error_kind``."""

    SIGNAL = "signal"  # the host process died of a signal (including our SIGKILL)
    EXIT_CODE = "exit_code"  # it exited non-zero, or reported a fatal error itself
    TIMEOUT = "timeout"  # the turn outlived ``timeout_seconds`` and we ended it
    PROTOCOL = "protocol"  # unreadable output or an unusable host session
    SPAWN = "spawn"  # the process never started
    # No progress for the silence timeout (no event but non-fatal errors, no CPU in its
    # process tree): the driver ended the tree (runtime/turn/silence.py).
    HUNG = "hung"
    # The turn was lost with its host (a restart, a dead runner): recorded by the
    # recovery table, never reported by a host.
    LOST = "lost"


# What an effect provider's read-back found: the effects report it, the session kernel
# records it. A Literal, not an enum, because a third-party provider returns the bare
# string and the journal stores just that.
ReadbackStatus = Literal["applied", "not_applied", "unknown"]
