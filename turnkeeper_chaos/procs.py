"""The harness's own view of processes: read straight from ``/proc``.

Independent of the product's process tracking on purpose: it is the oracle that
says whether a turn left anything running. Only processes whose environment
carries ``TURNKEEPER_TURN_ID=<one of the harness's own turn ids>`` are ever
signalled, each by pid.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from turnkeeper.hosts import MARKER_ENV

_DEAD_STATES = (None, "Z", "X", "x")


def _state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2 :].split()[0].decode()


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def live_marked_processes(turn_ids: Iterable[str]) -> dict[int, str]:
    """Live (not zombie) processes carrying one of ``turn_ids`` as their turn marker:
    pid -> turn id."""
    wanted = {f"{MARKER_ENV}={t}".encode(): t for t in turn_ids}
    found: dict[int, str] = {}
    if not wanted:
        return found
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        for entry in environ.split(b"\0"):
            turn = wanted.get(entry)
            if turn is not None:
                if _state(int(name)) not in _DEAD_STATES:
                    found[int(name)] = turn
                break
    return found


def kill_marked_processes(turn_ids: Iterable[str]) -> list[int]:
    """SIGKILL, by pid, every live process carrying one of ``turn_ids``."""
    killed = []
    for pid in live_marked_processes(turn_ids):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


def wait_until(predicate: Callable[[], bool], timeout: float, poll: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def end_marked_processes(turn_ids: Iterable[str], timeout: float = 10.0) -> list[int]:
    """Kill every live process of these turns until none is left (or ``timeout``)."""
    ids = list(turn_ids)
    killed: list[int] = []

    def gone() -> bool:
        killed.extend(kill_marked_processes(ids))
        return not live_marked_processes(ids)

    wait_until(gone, timeout)
    return sorted(set(killed))
