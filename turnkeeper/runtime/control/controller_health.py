"""What a running controller's background loops are doing, kept where ``status`` reads
it even while the database is away.

A ``run`` process (a worker or not) publishes its supervised loops
(turnkeeper/supervision.py: the lease keeper, the orphan reaper) as one small JSON
file, ``.turnkeeper/controllers/<pid>.json``, written again (to a temporary file,
then renamed over it) whenever one of them changes, and removed when the process
exits cleanly. ``status`` — the command, ``Project.status`` and ``GET /v1/status`` —
reads every file whose controller still runs (a SIGKILLed one leaves its file: it is
ignored, and removed by the next controller that starts here), so "lease keeper down
since 12:00:03 (error: ...)" is shown exactly when it matters: while the database
that would say anything else does not answer.

The file is advisory: a failure to write it is logged, never raised, and the run
goes on. Loop changes are also reported on the run's own channel (``run``'s output,
``--json`` records with ``"record": "health"``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from turnkeeper.supervision import HEALTH, HealthRegistry, LoopHealth, LoopState

# ``status`` imports this module to read the files, usually of no controller at all:
# what only a file found, or a writer, needs is imported there (the hosts package
# behind controller_identity costs ``status`` ~50 ms).
if TYPE_CHECKING:
    from turnkeeper.runtime.turn.run_progress import Reporter

log = logging.getLogger(__name__)

HEALTH_DIR_NAME = "controllers"
Role = Literal["run", "worker"]


class ThreadHealth(BaseModel):
    """One supervised loop of a controller (turnkeeper/supervision.py's LoopHealth)."""

    model_config = ConfigDict(frozen=True)

    name: str
    state: LoopState
    down_since: datetime | None = None
    last_error: str | None = None
    failures: int = 0
    restarts: int = 0

    @classmethod
    def of(cls, loop: LoopHealth) -> ThreadHealth:
        return cls(
            name=loop.name,
            state=loop.state,
            down_since=loop.down_since,
            last_error=loop.last_error,
            failures=loop.failures,
            restarts=loop.restarts,
        )

    def describe(self) -> str:
        """ "lease keeper down since 2025-01-01 12:00:03 (error: ...)"."""
        return LoopHealth(
            self.name,
            self.state,
            self.down_since,
            self.last_error,
            self.failures,
            self.restarts,
        ).describe()


class ControllerHealth(BaseModel):
    """One live controller process and its supervised loops, as its file says."""

    model_config = ConfigDict(frozen=True)

    pid: int
    owner: str
    role: Role
    started_at: datetime
    written_at: datetime
    threads: list[ThreadHealth]

    def down(self) -> list[ThreadHealth]:
        return [t for t in self.threads if t.state == "down"]

    def describe_down(self) -> list[str]:
        """A line per loop that is down: "worker 4242: lease keeper down since ..."."""
        return [f"{self.role} {self.pid}: {t.describe()}" for t in self.down()]


def health_dir(state_dir: Path) -> Path:
    return state_dir / HEALTH_DIR_NAME


def read_controller_health(state_dir: Path) -> list[ControllerHealth]:
    """Every live controller's health file in ``state_dir`` (``.turnkeeper/``), by pid.
    A file that cannot be read or parsed is skipped (logged): it never stops ``status``."""
    folder = health_dir(state_dir)
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    if not paths:
        return []
    from turnkeeper.runtime.control.controller_identity import owner_is_dead

    found: list[ControllerHealth] = []
    for path in paths:
        health = _read(path)
        if health is not None and not owner_is_dead(health.owner):
            found.append(health)
    return sorted(found, key=lambda h: h.pid)


def _read(path: Path) -> ControllerHealth | None:
    try:
        return ControllerHealth.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None  # removed by its controller as it exited
    except (OSError, ValidationError, ValueError) as error:
        log.warning("controller health file %s not read: %s", path, error)
        return None


class HealthFile:
    """This process's health file, written again at every change of its loops."""

    def __init__(
        self,
        state_dir: Path,
        owner: str,
        role: Role,
        *,
        report: Reporter | None = None,
        registry: HealthRegistry = HEALTH,
    ) -> None:
        self.path = health_dir(state_dir) / f"{os.getpid()}.json"
        self._owner = owner
        self._role = role
        self._report = report
        self._registry = registry
        self._started_at = datetime.now(UTC)
        self._lock = threading.Lock()
        self._last: dict[str, LoopState] = {}  # loop name -> its state as last written
        self._unsubscribe: Callable[[], None] | None = None
        self._closed = False

    def open(self) -> HealthFile:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_dead()
        self._unsubscribe = self._registry.subscribe(self.publish)
        self.publish()
        return self

    def publish(self) -> None:
        """Write the loops' health now (and report the loops that went down or up)."""
        with self._lock:
            if self._closed:
                return
            loops = [ThreadHealth.of(h) for h in self._registry.snapshot()]
            health = ControllerHealth(
                pid=os.getpid(),
                owner=self._owner,
                role=self._role,
                started_at=self._started_at,
                written_at=datetime.now(UTC),
                threads=loops,
            )
            self._write(health)
            changed = self._changes(loops)
        for thread in changed:
            self._tell(thread)

    def close(self) -> None:
        """Stop publishing and remove the file (a clean exit)."""
        with self._lock:
            self._closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        try:
            self.path.unlink(missing_ok=True)
        except OSError as error:
            log.warning("controller health file %s not removed: %s", self.path, error)

    def _write(self, health: ControllerHealth) -> None:
        temporary = self.path.with_suffix(".json.tmp")
        try:
            temporary.write_text(health.model_dump_json(indent=1) + "\n")
            os.replace(temporary, self.path)
        except OSError as error:  # advisory: status shows less, the run goes on
            log.warning("controller health file %s not written: %s", self.path, error)

    def _changes(self, loops: list[ThreadHealth]) -> list[ThreadHealth]:
        """The loops that went down, or came back up, since the last write."""
        changed: list[ThreadHealth] = []
        for thread in loops:
            before = self._last.get(thread.name)
            if before != thread.state and "down" in (before, thread.state):
                changed.append(thread)
            self._last[thread.name] = thread.state
        return changed

    def _tell(self, thread: ThreadHealth) -> None:
        if self._report is None:
            return
        from turnkeeper.runtime.turn.run_progress import RunRecord

        event = "thread_down" if thread.state == "down" else "thread_up"
        text = thread.describe() if thread.state == "down" else f"{thread.name} working again"
        fields = {"event": event, "thread": thread.name, "error": thread.last_error}
        self._report(RunRecord("health", text, None, fields))

    def _remove_dead(self) -> None:
        """Files of controllers that died without removing theirs (SIGKILL, power cut)."""
        from turnkeeper.runtime.control.controller_identity import owner_is_dead

        for path in self.path.parent.glob("*.json"):
            health = _read(path)
            if path != self.path and health is not None and owner_is_dead(health.owner):
                with contextlib.suppress(FileNotFoundError):  # another starter took it
                    path.unlink()


@contextmanager
def publishing_health(
    state_dir: Path, owner: str, role: Role, report: Reporter | None = None
) -> Iterator[HealthFile]:
    """This process's health file for the block (removed at its end)."""
    health = HealthFile(state_dir, owner, role, report=report).open()
    try:
        yield health
    finally:
        health.close()


def health_json(controllers: list[ControllerHealth]) -> list[dict[str, object]]:
    """The controllers as JSON values (``status --json``, an error's details)."""
    return [json.loads(c.model_dump_json()) for c in controllers]
