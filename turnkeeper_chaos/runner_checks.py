"""The oracle of a runner-mode chaos run: per session, the invariants, plus "every host
event journaled exactly once, in order" against what the agent itself printed.

With a runner, a turn outlives the control plane that started it: a restarted control
plane reattaches and journals the rest of the turn's events. So besides what
:mod:`.checks` checks (every accepted turn ended once, no step replayed after a loss,
each effect key applied once, contiguous streams, the goal closed), each turn's
journaled host events are compared with the agent's own record of what it printed
(written, line by line, to a file outside the workspace before the line is printed):

* a turn's host ran at most once (one run file per turn), as the accepted attempt;
* the journaled seqs of a turn strictly increase — no event twice, none out of order;
* the journaled ticks are a prefix of the printed ones, and all of them for a turn
  that completed — a reattached turn's events are neither lost nor repeated.

Reattached and lost turns are counted from the recovery reports and the turns' ends.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from turnkeeper.errors import TurnkeeperError
from turnkeeper.json_types import JsonDict, JsonList, JsonMapping, JsonValue, json_object
from turnkeeper.kernel.session import (
    HostEventsJournaled,
    RecoveryReported,
    SessionEvent,
    TurnAccepted,
)
from turnkeeper.kernel.session.events import TERMINAL_EVENT_TYPES
from turnkeeper_chaos.checks import INV2, INV4, CheckResult, Violation
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.worker_checks import SessionChecker, SessionView

INV7 = "7 events once, in order"
TICK = "tick"


@dataclass
class TurnTally:
    """Reattached and lost turns of one session."""

    reattach_actions: int = 0  # "reattached" recovery actions (a turn may have several)
    reattached: set[str] = field(default_factory=set)  # distinct turns reattached
    reattached_completed: int = 0
    reattached_events: int = 0  # ticks journaled after a reattach, checked against the agent
    lost: int = 0  # turns ended turn.lost
    failed: int = 0


def read_runner_runs(runs_dir: Path) -> list[JsonDict]:
    """Every host run the agents wrote down (``<turn>.<pid>.json``), with the ticks it
    printed (``<turn>.<pid>.events``, one JSON line each)."""
    runs = []
    for path in sorted(runs_dir.glob("*.json")):
        try:
            run = json_object(path.read_text())
        except (OSError, ValueError):
            continue  # killed while writing its file: it printed nothing yet
        printed: JsonList = []
        events = path.with_suffix(".events")
        if events.exists():
            for line in events.read_text().splitlines():
                try:
                    printed.append(json.loads(line)["data"])
                except (ValueError, KeyError, TypeError):
                    break  # a line cut short by a kill: it was never printed
        run["printed"] = printed
        runs.append(run)
    return runs


class RunnerSessionChecker(SessionChecker):
    """The single-session checks, host runs once per turn, and events once in order.
    Fencing by epoch does not apply: a reattached turn's events are journaled, by
    design, in a later lease epoch than its acceptance."""

    def __init__(self, view: SessionView, service: CountingService) -> None:
        super().__init__(view, service, frozenset())
        self.tally = TurnTally()

    def check(self, *, expect_closed: bool = True) -> CheckResult:
        try:
            events = self.project.session_events()
        except (TurnkeeperError, ValueError) as error:
            self.add(INV4, f"session stream unreadable: {error}")
            events = []
        self.check_turns(events)
        self.check_runs_once(events)
        self.check_events_once(events)
        self._check_resumed_not_replayed(events)
        self.check_effects(events)
        self.check_contiguous()
        if expect_closed:
            self.check_goal()
        self.count(events)
        return self.result

    def check_runs_once(self, events: list[SessionEvent]) -> None:
        runs = self.project.runs()
        self.result.facts.host_runs = len(runs)
        accepted = {
            e.envelope.turn_id: e.envelope.attempt for e in events if isinstance(e, TurnAccepted)
        }
        for turn_id, n in Counter(str(r.get("turn_id")) for r in runs).items():
            if n > 1:
                self.add(INV2, f"the host of turn {turn_id} ran {n} times")
        for run in runs:
            turn_id = str(run.get("turn_id"))
            if turn_id not in accepted:
                self.add(INV2, f"the host ran turn {turn_id}, which the session never accepted")
            elif run.get("attempt") != accepted[turn_id]:
                self.add(INV2, f"turn {turn_id} ran as attempt {run.get('attempt')}")

    def check_events_once(self, events: list[SessionEvent]) -> None:
        journaled: dict[str, list[tuple[int, JsonDict]]] = {}
        ends: dict[str, str] = {}
        for event in events:
            if isinstance(event, HostEventsJournaled):
                batch = [(e.seq, dict(e.data)) for e in event.events]
                journaled.setdefault(event.turn_id, []).extend(batch)
            elif event.type in TERMINAL_EVENT_TYPES:
                ends[str(getattr(event, "turn_id", ""))] = event.type
        printed = {str(r.get("turn_id")): _printed(r) for r in self.project.runs()}
        for turn_id, items in journaled.items():
            seqs = [seq for seq, _ in items]
            if any(b <= a for a, b in itertools.pairwise(seqs)):
                self.add(INV7, f"turn {turn_id}: journaled seqs not strictly increasing: {seqs}")
            ticks = [data for _, data in items if TICK in data]
            said = printed.get(turn_id)
            if said is None:
                if ticks:
                    self.add(INV7, f"turn {turn_id}: ticks journaled but no host run recorded")
                continue
            if ticks != said[: len(ticks)]:
                self.add(
                    INV7,
                    f"turn {turn_id}: journaled ticks {_ticks(ticks)} are not "
                    f"what the agent printed {_ticks(said)}",
                )
            elif ends.get(turn_id) == "turn.completed" and len(ticks) != len(said):
                self.add(
                    INV7,
                    f"turn {turn_id} completed with {len(ticks)} of the {len(said)} ticks "
                    "its agent printed journaled",
                )

    def count(self, events: list[SessionEvent]) -> None:
        tally = self.tally
        for event in events:
            if isinstance(event, RecoveryReported):
                for action in event.report.actions:
                    if action.kind == "reattached" and action.turn_id:
                        tally.reattach_actions += 1
                        tally.reattached.add(action.turn_id)
            elif event.type == "turn.lost":
                tally.lost += 1
            elif event.type == "turn.failed":
                tally.failed += 1
        completed = {str(getattr(e, "turn_id", "")) for e in events if e.type == "turn.completed"}
        tally.reattached_completed = len(tally.reattached & completed)
        printed = {str(r.get("turn_id")): len(_printed(r)) for r in self.project.runs()}
        tally.reattached_events = sum(printed.get(t, 0) for t in tally.reattached & completed)
        self.result.facts.recoveries = sum(
            1
            for e in events
            if isinstance(e, RecoveryReported)
            and any(a.kind != "nothing_to_do" for a in e.report.actions)
        )


def _printed(run: JsonMapping) -> JsonList:
    """The lines a run's agent printed, as :func:`read_runner_runs` put them in."""
    printed = run["printed"]
    assert isinstance(printed, list)  # read_runner_runs sets a list
    return printed


def _ticks(printed: Sequence[JsonValue]) -> list[JsonValue]:
    """The tick numbers of printed lines, for a violation's message."""
    return [line.get(TICK) if isinstance(line, dict) else line for line in printed]


@dataclass
class RunnerReport:
    seed: int
    violations: list[Violation] = field(default_factory=list)
    facts: JsonDict = field(default_factory=dict)
    elapsed: float = 0.0
    base_dir: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> JsonDict:
        return {
            "ok": self.ok,
            "seed": self.seed,
            "mode": "runner",
            "elapsed_seconds": round(self.elapsed, 1),
            "base_dir": str(self.base_dir) if self.base_dir else None,
            "facts": self.facts,
            "violations": [vars(v) for v in self.violations],
        }


def render_runner(report: RunnerReport, console: Console) -> None:
    table = Table(title=f"turnkeeper chaos: runner (seed {report.seed})", title_justify="left")
    table.add_column("")
    table.add_column("", justify="right")
    for name, value in report.facts.items():
        shown = json.dumps(value) if isinstance(value, dict) else str(value)
        table.add_row(name.replace("_", " "), shown)
    table.add_row("violations", str(len(report.violations)))
    console.print(table)
    for v in report.violations[:50]:
        console.print(f"[red]{escape(v.scenario)}[/] {escape(v.invariant)}: {escape(v.detail)}")
    if not report.ok and report.base_dir is not None:
        console.print(f"kept for the post-mortem: {report.base_dir}", markup=False)
    verdict = "[bold green]no violations[/]" if report.ok else "[bold red]VIOLATIONS[/]"
    console.print(f"{verdict} in {report.elapsed:.0f}s")
