"""``turnkeeper.Project``: one object for a program that embeds turnkeeper.

It holds a project's open store and hands out what the command line offers, grouped
the same way (``project.goals.add`` is ``turnkeeper goal add``)::

    with Project.init("path/to/repo") as project:
        goal = project.goals.add("Ship the parser", criteria=["parser tests pass"])
        project.todos.add(goal.goal.id, "Write the tokenizer")
        project.sessions.create(goal.goal.id, host="python",
                                host_config={"callable": "my_agent:turn"})
        summary = project.run(max_turns=20)
        print(project.audit(goal.goal.id).terminal)

Every failure is a typed :class:`turnkeeper.errors.TurnkeeperError`; nothing here
keeps state of its own beyond the open store, so a crash at any point loses nothing
the log acknowledged, and the next ``run`` (here or from the shell) recovers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from turnkeeper.errors import FailedPrecondition, Unavailable
from turnkeeper.hosts.inprocess import InProcessHost
from turnkeeper.kernel import GoalState, TerminalAudit
from turnkeeper.kernel.session import SessionState
from turnkeeper.project_api.goals import EvidenceRecords, Gates, Goals, Todos
from turnkeeper.project_api.sessions import InProcessHosts, Sessions, run_sessions
from turnkeeper.runtime.control.controller import RunSummary
from turnkeeper.runtime.control.controller_health import (
    ControllerHealth,
    health_json,
    read_controller_health,
)
from turnkeeper.runtime.control.operator import recover_turn
from turnkeeper.runtime.services.goal_reads import audit_of
from turnkeeper.runtime.services.project import Project as ProjectDir
from turnkeeper.runtime.services.project import find_project, init_project
from turnkeeper.runtime.services.workspace_claims import check_workspaces_not_ahead
from turnkeeper.store import open_store
from turnkeeper.store.base import EventStore


@dataclass(frozen=True)
class GoalStatus:
    """One goal as ``status`` shows it: its state and its terminal audit now."""

    state: GoalState
    audit: TerminalAudit


@dataclass(frozen=True)
class Status:
    """Everything in flight: every goal with its audit, every session, and the running
    controllers (``run`` on this machine) with their background threads."""

    goals: list[GoalStatus]
    sessions: list[SessionState]
    controllers: list[ControllerHealth] = field(default_factory=list)


class Project:
    """An open turnkeeper project: ``Project.init(path)`` or ``Project.open(path)``.

    Use it as a context manager (or call :meth:`close`) so the store is closed.
    """

    def __init__(self, directory: ProjectDir) -> None:
        self._dir = directory
        self._store: EventStore | None = open_store(directory.database_url)
        self._hosts = InProcessHosts()

        def store() -> EventStore:
            return self.store

        self.goals = Goals(store)
        self.todos = Todos(store)
        self.gates = Gates(store)
        self.evidence = EvidenceRecords(store, directory.root)
        self.sessions = Sessions(store, directory.root, self._hosts)

    # --- opening and closing ---------------------------------------------------------

    @classmethod
    def init(cls, path: str | Path = ".") -> Project:
        """Create ``path/.turnkeeper/`` (database inside, added to ``.gitignore``) if
        it is not there yet, and open the project."""
        directory, _ = init_project(Path(path))
        return cls(directory)

    @classmethod
    def open(cls, path: str | Path | None = None) -> Project:
        """The project at or above ``path`` (default: the working directory), found as
        git finds a repository; ``FAILED_PRECONDITION`` when there is none."""
        return cls(find_project(Path(path) if path is not None else None))

    @property
    def root(self) -> Path:
        """The directory that holds ``.turnkeeper/``."""
        return self._dir.root

    @property
    def store(self) -> EventStore:
        """The open event store, for what this object does not wrap."""
        if self._store is None:
            raise FailedPrecondition("the project is closed", reason="project_closed")
        return self._store

    def close(self) -> None:
        """Close the store; every write was durable before it returned."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Project:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- the whole project -------------------------------------------------------------

    def audit(self, goal_id: str) -> TerminalAudit:
        """The terminal audit of a goal: every counter and every named blocker."""
        return self.goals.audit(goal_id)

    def status(self) -> Status:
        """Every goal with its audit and every session, as ``turnkeeper status``, and
        the running controllers' background threads ("lease keeper down since ...").
        ``DATA_LOSS`` when the log holds less than a workspace's snapshots record;
        ``UNAVAILABLE`` while the database does not answer, with the controllers in
        its ``details["controllers"]``."""
        controllers = read_controller_health(self._dir.state_dir)
        try:
            # Each goal audited from the state listed, not read and decoded again.
            goals = [GoalStatus(s, audit_of(self.store, s)) for s in self.goals.list()]
            sessions = self.sessions.list()
            check_workspaces_not_ahead(self.store, sessions)
        except Unavailable as down:
            if controllers:
                down.details["controllers"] = health_json(controllers)
            raise
        return Status(goals=goals, sessions=sessions, controllers=controllers)

    def run(
        self,
        *,
        sessions: Sequence[str] | None = None,
        max_turns: int | None = None,
        hosts: Sequence[InProcessHost] = (),
        concurrency: int = 64,
        lease_seconds: float = 120.0,
        host_timeout_seconds: int = 3600,
        idle_turns: int = 3,
        idle_replans: int = 2,
        host_failures: int = 5,
        backoff_seconds: float = 5.0,
        progress: Callable[[str], None] | None = None,
        handle_signals: bool = False,
    ) -> RunSummary:
        """Recover every in-flight turn, then drive the sessions (default: every ready
        one) until each stops, as ``turnkeeper run`` with the same bounds.

        ``max_turns`` caps the turns of this call; ``idle_turns`` / ``idle_replans``
        bound turns that change nothing; ``host_failures`` / ``backoff_seconds`` bound
        failing hosts. ``hosts`` are in-process hosts for sessions created with one
        in an earlier process. ``progress`` receives one line per step.
        ``handle_signals`` (main thread only) makes SIGINT/SIGTERM stop at the next
        durable boundary as the command does. The summary says why each session
        stopped (``stops``, ``reasons``)."""
        for host in hosts:
            self._hosts.add(host)
        return run_sessions(
            self.store,
            self._hosts,
            sessions=sessions,
            max_turns=max_turns,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            host_timeout_seconds=host_timeout_seconds,
            idle_turns=idle_turns,
            idle_replans=idle_replans,
            host_failures=host_failures,
            backoff_seconds=backoff_seconds,
            progress=progress,
            handle_signals=handle_signals,
        )

    def recover(self, turn_id: str) -> SessionState:
        """Resolve a failed turn's host recovery record by hand and resume its session."""
        return recover_turn(self.store, turn_id)
