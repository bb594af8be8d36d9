"""Settling a session before it is closed or reverted: every process started for one
of its turns proven ended.

A turn's processes are ended when its host exits (hosts/process_tree.py), but a
process can outlive that: one stuck in the kernel (a hung network mount) does not die
of SIGKILL until the kernel lets it go. A session that still has such a process must
not be closed (its work would look finished while something of it still runs and
writes) or reverted (the process would write into the restored workspace). Settling
looks for every live process whose environment names the session
(``TURNKEEPER_SESSION_ID``, which every host process and its children carry, also
those a runner started), ends each one's turn, and looks again, a bounded number of
times. What is still there after the last try leaves the session unsettled: the
controller quarantines it alone (runtime/control/controller.py), and ``session revert`` is
refused; every other session goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from turnkeeper.errors import FailedPrecondition
from turnkeeper.hosts import process_tree

SETTLE_TRIES = 3
SETTLE_PAUSE_S = 1.0
# How long one try waits for the processes it SIGKILLed to be gone.
KILL_WAIT_S = 2.0


@dataclass(frozen=True)
class Settlement:
    session_id: str
    ended: list[str] = field(default_factory=list)  # "pid P of turn T", ended here
    left: list[str] = field(default_factory=list)  # the same, still alive after every try

    @property
    def settled(self) -> bool:
        return not self.left

    def describe(self) -> str:
        shown = ", ".join(self.left[:5]) + (
            f" and {len(self.left) - 5} more" if len(self.left) > 5 else ""
        )
        return f"{shown} still running after SIGKILL"


def settle_session(
    session_id: str,
    *,
    tries: int = SETTLE_TRIES,
    pause_s: float = SETTLE_PAUSE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Settlement:
    """End every live process of the session's turns; say what could not be ended."""
    ended: list[str] = []
    for attempt in range(tries):
        found = process_tree.find_session_processes(session_id)
        if not found:
            return Settlement(session_id, ended)
        for turn_id in found:
            report = process_tree.kill_turn_processes(turn_id, timeout=KILL_WAIT_S)
            ended.extend(f"pid {k.pid} of turn {turn_id}" for k in report.killed)
        if attempt + 1 < tries:
            sleep(pause_s)
    left = process_tree.find_session_processes(session_id)
    still = [f"pid {pid} of turn {turn}" for turn, pids in left.items() for pid in pids]
    gone = [e for e in ended if e not in still]
    return Settlement(session_id, gone, still)


def require_settled(session_id: str) -> Settlement:
    """Settle the session, or refuse what needs it settled (``session_unsettled``)."""
    settlement = settle_session(session_id)
    if not settlement.settled:
        raise FailedPrecondition(
            f"session {session_id} cannot settle: {settlement.describe()}",
            reason="session_unsettled",
            details={"processes": settlement.left},
        )
    return settlement
