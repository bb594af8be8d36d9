"""How ``run`` stops on SIGINT / SIGTERM.

The first signal asks the controller to stop once the turn in flight reaches its
durable end, and says what it is waiting for (which turn, which host, for how long)
and how to stop at once. That wait is bounded (``run --stop-timeout``, default
:data:`DEFAULT_STOP_TIMEOUT` seconds): a host still running then — stopped
(SIGSTOP), hung, or just slow — has its whole process tree ended, its turn is
recorded as failed with a reason that says so, and ``run`` exits as after any
graceful stop. The second signal ends every running host's whole process tree at
once and then the controller itself, by the same signal: no agent keeps running
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

# How long a graceful stop waits for the turns in flight before it ends their hosts.
DEFAULT_STOP_TIMEOUT = 30.0


def _waiting_for(controller: Controller, stop_timeout: float) -> str:
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
        f"its host is ended in {stop_timeout:g}s (--stop-timeout); "
        "signal again (Ctrl-C) to end the host now"
    )


def _end_hosts_at_bound(
    controller: Controller, stop_timeout: float, say: Callable[[str], None]
) -> None:
    """The graceful stop's bound has passed: end the hosts still running; each turn is
    recorded as failed, its receipt saying why."""
    why = (
        f"ended by run's stop bound: the host was still running {stop_timeout:g}s after "
        "run was asked to stop (--stop-timeout)"
    )
    hosts = controller.driver.end_running_hosts(why)
    if hosts.ended:
        say(f"stop bound of {stop_timeout:g}s reached: ended the hosts of turns "
            f"{', '.join(hosts.ended)}; recording them as failed")  # fmt: skip
    if hosts.not_ended:
        say(f"stop bound reached: could not end the hosts of turns {', '.join(hosts.not_ended)}")


@contextmanager
def stop_on_signals(
    controller: Controller,
    announce: Callable[[str], None] | None = None,
    stop_timeout: float = DEFAULT_STOP_TIMEOUT,
) -> Iterator[None]:
    """First SIGINT/SIGTERM: stop at the next durable boundary, ending the hosts still
    running ``stop_timeout`` seconds later. Second: end the hosts, exit."""
    say = announce or (lambda _: None)
    # The graceful stop's bound, started by the first signal (a thread of its own: the
    # handler must not wait), cancelled when the block ends.
    bound = threading.Timer(stop_timeout, _end_hosts_at_bound, (controller, stop_timeout, say))
    bound.daemon = True
    bound.name = "turnkeeper-stop-bound"

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
        bound.start()
        # Printed from a thread: the handler may have interrupted a write to the same
        # stream, and a buffered stream refuses a reentrant write.
        threading.Thread(
            target=lambda: say(_waiting_for(controller, stop_timeout)), daemon=True
        ).start()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        bound.cancel()
        for sig, old in previous.items():
            signal.signal(sig, old)
