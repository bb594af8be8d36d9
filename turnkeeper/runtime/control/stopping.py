"""How ``run`` stops on SIGINT / SIGTERM.

The first signal asks the controller to stop once the turn in flight reaches its
durable end, and says what it is waiting for (which turn, which host, for how long)
and how to stop at once. The second ends every running host's whole process tree
and then the controller itself, by the same signal: no agent keeps running
unwatched, and the next ``run`` recovers those turns as lost (a continuation that
tells the agent to reconcile). A third signal, if the second's clean-up hangs,
terminates at once (the default action is restored by the second).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from turnkeeper.runtime.control.controller import Controller


def _waiting_for(controller: Controller) -> str:
    hosts = controller.driver.running_hosts()
    if not hosts:
        return "stopping: no turn is running; finishing the current step"
    shown = "; ".join(
        f"turn {h.turn_id} of session {h.session_id[:8]} (host pid {h.pid}, "
        f"running {h.seconds:.0f}s)"
        for h in hosts
    )
    return (
        f"stopping after the turn in flight reaches its durable end: waiting for {shown}; "
        "signal again (Ctrl-C) to end the host now"
    )


@contextmanager
def stop_on_signals(
    controller: Controller, announce: Callable[[str], None] | None = None
) -> Iterator[None]:
    """First SIGINT/SIGTERM: stop at the next durable boundary. Second: end the hosts, exit."""
    say = announce or (lambda _: None)

    def handler(signum: int, _frame: FrameType | None) -> None:
        if controller.stopping:
            signal.signal(signum, signal.SIG_DFL)  # a third signal ends us whatever happens
            hosts = controller.driver.kill_running_hosts()
            # Straight to the file descriptor: this may interrupt a write to the stream.
            note = f"ended the hosts of turns {', '.join(hosts.ended)}; " if hosts.ended else ""
            if hosts.not_ended:
                note += (
                    f"could not end the hosts of turns {', '.join(hosts.not_ended)} "
                    "(the next run ends what is left); "
                )
            os.write(2, f"turnkeeper: {note}exiting now\n".encode())
            os.kill(os.getpid(), signum)
            return
        controller.request_stop()
        # Printed from a thread: the handler may have interrupted a write to the same
        # stream, and a buffered stream refuses a reentrant write.
        threading.Thread(target=lambda: say(_waiting_for(controller)), daemon=True).start()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
