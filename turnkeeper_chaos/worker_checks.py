"""The oracle of a workers run: per session, the invariants again, plus fencing.

Many workers share one database's sessions, so besides what :mod:`.checks` checks of
a single-session scenario (every accepted turn ended once, no host step replayed,
each effect key applied once, contiguous streams, the goal closed), each session's
stream must show that **one worker at a time wrote it**:

* its lease epochs are 1, 2, 3, ... and every renewal and release names the holder
  of the current epoch (a stale holder's write accepted would name an older one);
* a turn's host-side records (host started, host events, the receipt) land in the
  epoch its turn was accepted in — after another worker's acquire, only that worker's
  recovery may end the turn, never the old worker's host report;
* the host of every turn ran under the worker that held the lease when the turn was
  accepted: the agent writes down its ancestry when it starts, and the owner name of
  that epoch carries the worker's pid, which must be one of its ancestors.

Host runs are counted from the agent's own files (one file per run), not from the
code under test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from turnkeeper.errors import TurnkeeperError
from turnkeeper.json_types import JsonDict, json_object
from turnkeeper.kernel.session import (
    EffectIntended,
    HostEventsJournaled,
    HostStarted,
    LeaseAcquired,
    LeaseReleased,
    LeaseRenewed,
    ReceiptRecorded,
    RecoveryReported,
    SessionEvent,
    TurnAccepted,
)
from turnkeeper.runtime.services.goals import GoalService, goal_stream
from turnkeeper.runtime.services.sessions import SESSION_CODEC, session_stream
from turnkeeper.runtime.turn.effects import effect_gate_id
from turnkeeper.store import EventStore, open_store
from turnkeeper_chaos.checks import INV2, INV4, Checker, CheckResult, Violation
from turnkeeper_chaos.project import ChaosProject
from turnkeeper_chaos.service import CountingService

INV6 = "6 one writer (fencing)"
GOAL = "goal closed"


def owner_pid(owner: str) -> int | None:
    """The pid in a controller's owner name ``ctl:<host>:<boot>:<ns>:<pid>:<start>``."""
    parts = owner.split(":")
    return int(parts[4]) if len(parts) == 6 and parts[4].isdigit() else None


def read_runs(runs_dir: Path) -> list[JsonDict]:
    """Every host run the agents wrote down (one JSON file per run)."""
    runs = []
    for path in sorted(runs_dir.glob("*.json")):
        try:
            runs.append(json_object(path.read_text()))
        except (OSError, ValueError):
            continue  # a run killed while writing its file: counted by its turn's events
    return runs


class SessionView(ChaosProject):
    """One session of the shared project, shaped as :class:`.checks.Checker` reads it."""

    def __init__(
        self,
        root: Path,
        name: str,
        workspace: Path,
        url: str,
        session_id: str,
        goal_id: str,
        todo_ids: list[str],
        runs: list[JsonDict],
    ) -> None:
        super().__init__(root, name)
        self.workspace = workspace
        self.url = url
        self.session_id = session_id
        self.goal_id = goal_id
        self.todo_ids = todo_ids
        self._runs = runs
        self._events: list[SessionEvent] | None = None

    @property
    def repo(self) -> Path:
        return self.workspace

    @contextmanager
    def store(self) -> Iterator[EventStore]:
        store = open_store(self.url)
        try:
            yield store
        finally:
            store.close()

    def session_events(self) -> list[SessionEvent]:
        if self._events is None:
            with self.store() as store:
                records = store.read_stream(session_stream(self.session_id))
            self._events = [SESSION_CODEC.decode_event(r) for r in records]
        return self._events

    def runs(self) -> list[JsonDict]:
        return self._runs


class SessionChecker(Checker):
    """The single-session checks where they apply, and fencing; leftovers and the
    whole-store verify are checked once for the run, not per session."""

    project: SessionView

    def __init__(
        self, view: SessionView, service: CountingService, killed_pids: frozenset[int]
    ) -> None:
        super().__init__(view, service, settle_seconds=0.0)
        # Workers the harness SIGKILLed: a host they started may have been orphaned
        # before it wrote its ancestry down, so that ancestry may lack the worker.
        self.killed_pids = killed_pids

    def check(self, *, expect_closed: bool = True) -> CheckResult:
        try:
            events = self.project.session_events()
        except (TurnkeeperError, ValueError) as error:
            self.add(INV4, f"session stream unreadable: {error}")
            events = []
        self.check_turns(events)
        self.check_worker_runs(events)
        self._check_resumed_not_replayed(events)
        self.check_effects(events)
        self.check_fencing(events)
        self.check_contiguous()
        if expect_closed:
            self.check_goal()
        self.result.facts.recoveries = sum(
            1
            for e in events
            if isinstance(e, RecoveryReported)
            and any(a.kind != "nothing_to_do" for a in e.report.actions)
        )
        return self.result

    def check_worker_runs(self, events: list[SessionEvent]) -> None:
        """Each accepted turn's host ran at most once, as that attempt, under the
        worker holding the lease when it was accepted; none ran for no accepted turn."""
        runs = self.project.runs()
        self.result.facts.host_runs = len(runs)
        accepted: dict[str, tuple[int, str]] = {}  # turn -> (attempt, owner at acceptance)
        host_pid: dict[str, int] = {}  # turn -> the host process its driver recorded
        owner = ""
        for event in events:
            if isinstance(event, LeaseAcquired):
                owner = event.owner
            elif isinstance(event, TurnAccepted):
                accepted[event.envelope.turn_id] = (event.envelope.attempt, owner)
            elif isinstance(event, HostStarted):
                host_pid[event.turn_id] = event.process.pid
        for turn_id, n in Counter(str(r.get("turn_id")) for r in runs).items():
            if n > 1:
                self.add(INV2, f"the host of turn {turn_id} ran {n} times")
        for run in runs:
            turn_id = str(run.get("turn_id"))
            if turn_id not in accepted:
                self.add(INV2, f"the host ran turn {turn_id}, which the session never accepted")
                continue
            attempt, holder = accepted[turn_id]
            if run.get("attempt") != attempt:
                self.add(INV2, f"turn {turn_id} ran as attempt {run.get('attempt')}, not {attempt}")
            pid = owner_pid(holder)
            listed = run.get("ancestors")
            ancestors = listed if isinstance(listed, list) else []  # the agent writes a list
            orphaned = pid in self.killed_pids
            if pid is None or (pid not in ancestors and not orphaned):
                self.add(
                    INV6,
                    f"the host of turn {turn_id} ran under {ancestors}, not under the lease "
                    f"holder {holder} of its acceptance",
                )
            started = host_pid.get(turn_id)
            if started is not None and ancestors[:1] != [started]:
                self.add(INV6, f"turn {turn_id}'s host {ancestors[:1]} is not the one recorded")

    def check_fencing(self, events: list[SessionEvent]) -> None:
        epoch, owner = 0, ""
        accepted_in: dict[str, int] = {}
        for event in events:
            if isinstance(event, LeaseAcquired):
                if event.epoch != epoch + 1:
                    self.add(INV6, f"lease epoch {event.epoch} acquired after epoch {epoch}")
                epoch, owner = event.epoch, event.owner
            elif isinstance(event, LeaseRenewed | LeaseReleased):
                if (event.owner, event.epoch) != (owner, epoch):
                    self.add(
                        INV6,
                        f"{event.type} by {event.owner} epoch {event.epoch} accepted while "
                        f"{owner} held epoch {epoch}",
                    )
            elif isinstance(event, TurnAccepted):
                accepted_in[event.envelope.turn_id] = epoch
            elif isinstance(event, HostStarted | HostEventsJournaled | ReceiptRecorded):
                at = accepted_in.get(event.turn_id)
                if at is not None and at != epoch:
                    self.add(
                        INV6,
                        f"{event.type} of turn {event.turn_id} (accepted in epoch {at}) "
                        f"accepted in epoch {epoch}: a stale worker's write",
                    )

    def check_contiguous(self) -> None:
        try:
            with self.project.store() as store:
                for stream in (
                    session_stream(self.project.session_id),
                    goal_stream(self.project.goal_id),
                ):
                    seqs = [r.seq for r in store.read_stream(stream)]
                    if seqs != list(range(1, len(seqs) + 1)):
                        self.add(INV4, f"{stream}: sequence numbers not contiguous")
                    if store.head(stream) != len(seqs):
                        self.add(INV4, f"{stream}: head {store.head(stream)} != {len(seqs)}")
        except TurnkeeperError as error:
            self.add(INV4, f"store unreadable: {error.code.value}: {error.message}")

    def check_goal(self) -> None:
        goal_id = self.project.goal_id
        try:
            with self.project.store() as store:
                goals = GoalService(store)
                state = goals.load(goal_id)
                audit = goals.audit(goal_id)
                records = store.read_stream(goal_stream(goal_id))
        except TurnkeeperError as error:
            self.add(GOAL, f"goal {goal_id} unreadable: {error.message}")
            return
        if not state.is_closed:
            self.add(GOAL, f"goal {goal_id} not closed ({state.goal.status.value})")
        if not audit.terminal:
            self.add(
                GOAL, f"goal {goal_id}: audit not terminal: {[b.text for b in audit.blockers]}"
            )
        n_closed = sum(1 for r in records if r.type == "goal_closed")
        if n_closed != 1:
            self.add(GOAL, f"goal {goal_id} closed {n_closed} times")
        for todo_id in self.project.todo_ids:
            page = self.project.repo / f"{todo_id}.md"
            content = page.read_text() if page.exists() else None
            if content != f"# {todo_id}\n":
                self.add(GOAL, f"{page} holds {content!r}, not the finished work")

    def _check_gate(self, intent: EffectIntended) -> None:
        gate_id = effect_gate_id(intent.turn_id, intent.effect_id)
        with self.project.store() as store:
            gate = GoalService(store).load(self.project.goal_id).gates.get(gate_id)
        if gate is None:
            self.add(
                "3 effect once", f"indeterminate effect {intent.idempotency_key} opened no gate"
            )


@dataclass
class WorkersReport:
    seed: int
    violations: list[Violation] = field(default_factory=list)
    facts: dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0
    base_dir: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> JsonDict:
        return {
            "ok": self.ok,
            "seed": self.seed,
            "mode": "workers",
            "elapsed_seconds": round(self.elapsed, 1),
            "base_dir": str(self.base_dir) if self.base_dir else None,
            "facts": dict(self.facts),
            "violations": [vars(v) for v in self.violations],
        }


def render_workers(report: WorkersReport, console: Console) -> None:
    table = Table(title=f"turnkeeper chaos: workers (seed {report.seed})", title_justify="left")
    table.add_column("")
    table.add_column("", justify="right")
    for name, value in report.facts.items():
        table.add_row(name.replace("_", " "), str(value))
    table.add_row("violations", str(len(report.violations)))
    console.print(table)
    for v in report.violations[:50]:
        console.print(f"[red]{escape(v.scenario)}[/] {escape(v.invariant)}: {escape(v.detail)}")
    if not report.ok and report.base_dir is not None:
        console.print(f"kept for the post-mortem: {report.base_dir}", markup=False)
    verdict = "[bold green]no violations[/]" if report.ok else "[bold red]VIOLATIONS[/]"
    console.print(f"{verdict} in {report.elapsed:.0f}s")
