"""The controller's own clock: how long to wait, and waiting on a condition.

Leases themselves expire by the database's clock (``EventStore.now``); what runs on
this one is when the controller acts — a lease keeper renewing every third of a
lease. Injected through the controller's and driver's configuration, so a test moves
time forward (tests/runtime/manual_clock.py) instead of sleeping through it.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    def wait(self, condition: threading.Condition, timeout: float, since: float) -> None:
        """Wait on ``condition`` (held by the caller) until notified or ``timeout``
        seconds after ``since`` (a :meth:`monotonic` reading the caller decided on)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, condition: threading.Condition, timeout: float, since: float) -> None:
        condition.wait(max(0.0, since + timeout - time.monotonic()))


SYSTEM_CLOCK = SystemClock()
