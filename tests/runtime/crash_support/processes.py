"""The processes of a crash test: the CLI it runs, and the hosts it finds by marker.

Only processes a test started are ever signalled: the control planes by pid (through
``subprocess``), hosts and their detached children by pid after reading their
``TURNKEEPER_TURN_ID`` marker from ``/proc/<pid>/environ`` — the marker names a turn
of this test's own session.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER_ENV = "TURNKEEPER_TURN_ID"


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def _proc_state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2 :].split()[0].decode()


def live_marked_processes(turn_ids: Iterable[str]) -> dict[int, str]:
    """Live (not zombie) processes whose environment carries one of ``turn_ids`` as
    ``TURNKEEPER_TURN_ID``: pid -> turn id. Read straight from ``/proc``, independent
    of the product's own process tracking."""
    wanted = {f"{MARKER_ENV}={t}".encode(): t for t in turn_ids}
    found: dict[int, str] = {}
    if not wanted:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        for entry in environ.split(b"\0"):
            turn = wanted.get(entry)
            if turn is not None:
                if _proc_state(int(name)) not in (None, "Z", "X", "x"):
                    found[int(name)] = turn
                break
    return found


def kill_marked_processes(turn_ids: Iterable[str]) -> list[int]:
    """SIGKILL, by pid, every live process carrying one of this test's turn markers."""
    killed = []
    for pid in live_marked_processes(turn_ids):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


# --- the CLI ----------------------------------------------------------------------------


def cli_command() -> list[str]:
    script = Path(sys.executable).with_name("turnkeeper")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "turnkeeper.cli.main"]


@dataclass(frozen=True)
class CliResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def progress(self) -> list[str]:
        """``run --json`` progress lines (one JSON object per line before the summary)."""
        lines = []
        for line in self.stdout.splitlines():
            if line.startswith('{"progress"'):
                lines.append(str(json.loads(line)["progress"]))
        return lines

    def summary(self) -> dict[str, Any]:
        """The final JSON document of ``run --json``."""
        rest = [ln for ln in self.stdout.splitlines() if not ln.startswith('{"progress"')]
        data = json.loads("\n".join(rest))
        assert isinstance(data, dict)
        return data

    def describe(self) -> str:
        return (
            f"$ turnkeeper {' '.join(self.args)} -> {self.returncode}\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )
