"""The oracle: the invariants (docs/design.md), the goal's closure and leftovers, after a run.

Each check reads what the scenario left — the session and goal streams, the host's
``runs.jsonl``, the counting service's journal, ``/proc`` — and returns every
violation it finds (it never stops at the first). Nothing here trusts the code
under test to report on itself: the streams are decoded again, the host runs are
counted from the agent's own file, applications from the service.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from turnkeeper.errors import TurnkeeperError
from turnkeeper.kernel.session import (
    EffectIntended,
    EffectRejected,
    EffectResolved,
    EffectsRecorded,
    ReceiptRecorded,
    RecoveryReported,
    SessionEvent,
    TurnAccepted,
    TurnEnvelope,
    plan_effects,
)
from turnkeeper.kernel.session.events import TERMINAL_EVENT_TYPES
from turnkeeper.kernel.session.records import ReceiptSuccess
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goals import GoalService, goal_stream
from turnkeeper.runtime.services.sessions import SessionService, session_stream
from turnkeeper.runtime.turn.effects import effect_gate_id
from turnkeeper.store import MismatchKind
from turnkeeper_chaos.procs import end_marked_processes, live_marked_processes, wait_until
from turnkeeper_chaos.project import ChaosProject
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.workload import GOAL_ID

SURVIVOR_SETTLE_SECONDS = 10.0

INV1 = "1 turn terminal"
INV2 = "2 host step rerun"
INV3 = "3 effect once"
INV4 = "4 seq+checksum"
INV5 = "5 projection=fold"
GOAL = "goal closed"
LEFTOVER = "leftover process"


@dataclass(frozen=True)
class Violation:
    scenario: str
    invariant: str
    detail: str


@dataclass
class Facts:
    """What a scenario's log shows happened: the report's figures."""

    turns: int = 0
    completed: int = 0
    lost: int = 0
    failed: int = 0
    host_runs: int = 0
    recoveries: int = 0  # recovery reports that did something (not "nothing_to_do")
    effects_applied: int = 0  # keys the service saw applied exactly once
    effects_indeterminate: int = 0
    gates_resolved: int = 0


@dataclass
class CheckResult:
    violations: list[Violation] = field(default_factory=list)
    facts: Facts = field(default_factory=Facts)


class Checker:
    """Checks one scenario's project; ``check()`` after its last run."""

    def __init__(
        self,
        project: ChaosProject,
        service: CountingService,
        settle_seconds: float = SURVIVOR_SETTLE_SECONDS,
    ) -> None:
        self.project = project
        self.service = service
        self.settle_seconds = settle_seconds
        self.result = CheckResult()

    def add(self, invariant: str, detail: str) -> None:
        self.result.violations.append(Violation(self.project.name, invariant, detail[:500]))

    def check(self, *, expect_closed: bool = True) -> CheckResult:
        try:
            events = self.project.session_events()
        except TurnkeeperError as error:  # DATA_LOSS: a record failed its checksum
            self.add(INV4, f"session stream unreadable: {error.code.value}: {error.message}")
            events = []
        except ValueError as error:  # a record that passed its checksum but does not decode
            self.add(INV4, f"session stream does not decode: {error}")
            events = []
        self.check_turns(events)
        self.check_host_runs(events)
        self.check_effects(events)
        self.check_store()
        if expect_closed:
            self.check_goal()
        self.check_leftovers(events)
        self.result.facts.recoveries = sum(
            1
            for e in events
            if isinstance(e, RecoveryReported)
            and any(a.kind != "nothing_to_do" for a in e.report.actions)
        )
        return self.result

    # --- invariant 1 ------------------------------------------------------------------

    def check_turns(self, events: list[SessionEvent]) -> None:
        accepted = [e.envelope.turn_id for e in events if isinstance(e, TurnAccepted)]
        terminals: dict[str, list[str]] = defaultdict(list)
        receipts: Counter[str] = Counter()
        for event in events:
            if event.type in TERMINAL_EVENT_TYPES:
                terminals[getattr(event, "turn_id", "?")].append(event.type)
            elif isinstance(event, ReceiptRecorded):
                receipts[event.turn_id] += 1
        facts = self.result.facts
        facts.turns = len(accepted)
        for turn_id, n in Counter(accepted).items():
            if n > 1:
                self.add(INV1, f"turn {turn_id} accepted {n} times")
        for turn_id in accepted:
            ends = terminals.get(turn_id, [])
            if len(ends) != 1:
                self.add(INV1, f"turn {turn_id} ended {len(ends)} times: {ends}")
            elif ends[0] == "turn.completed":
                facts.completed += 1
            elif ends[0] == "turn.lost":
                facts.lost += 1
            elif ends[0] == "turn.failed":
                facts.failed += 1
        for turn_id in set(terminals) - set(accepted):
            self.add(INV1, f"turn {turn_id} ended ({terminals[turn_id]}) but was never accepted")
        for turn_id, n in receipts.items():
            if n > 1:
                self.add(INV1, f"turn {turn_id} has {n} receipts")
        if not events:
            return
        try:
            with self.project.store() as store:
                state = SessionService(store).load(self.project.session_id)
        except TurnkeeperError as error:
            self.add(INV1, f"session state unreadable: {error.message}")
            return
        if state.in_flight is not None:
            turn = state.in_flight
            self.add(INV1, f"turn {turn.envelope.turn_id} still in flight ({turn.phase})")
        if state.recovery is not None:
            # The session's status says why nobody recovered it (suspended, crashed...).
            reason = f": {state.status_reason}" if state.status_reason else ""
            status = state.status.value + reason
            self.add(
                INV1,
                f"a recovery is still pending for turn {state.recovery.turn_id} "
                f"(session {status}, {state.consecutive_lost} lost in a row)",
            )
        counters = state.counters
        wanted = (len(accepted), facts.completed, facts.failed, facts.lost)
        have = (
            counters.turns_accepted,
            counters.turns_completed,
            counters.turns_failed,
            counters.turns_lost,
        )
        if wanted != have:
            self.add(INV1, f"session counters {have} disagree with the log {wanted}")

    # --- invariant 2 ------------------------------------------------------------------

    def check_host_runs(self, events: list[SessionEvent]) -> None:
        try:
            runs = self.project.runs()
        except (OSError, ValueError) as exc:
            self.add(INV2, f"runs.jsonl unreadable: {exc}")
            return
        self.result.facts.host_runs = len(runs)
        envelopes = {e.envelope.turn_id: e.envelope for e in events if isinstance(e, TurnAccepted)}
        order = list(envelopes)
        counts = Counter(str(r.get("turn_id")) for r in runs)
        for turn_id, n in counts.items():
            if n > 1:
                self.add(INV2, f"the host of turn {turn_id} ran {n} times")
        positions = []
        for run in runs:
            turn_id = str(run.get("turn_id"))
            envelope = envelopes.get(turn_id)
            if envelope is None:
                self.add(INV2, f"the host ran turn {turn_id}, which the session never accepted")
                continue
            if (run.get("attempt"), run.get("kind")) != (envelope.attempt, envelope.kind):
                self.add(INV2, f"turn {turn_id} ran as {run} but was accepted as {envelope.kind}")
            positions.append(order.index(turn_id))
        if positions != sorted(positions):
            self.add(INV2, "hosts ran out of the order their turns were accepted")
        self._check_resumed_not_replayed(events)

    def _check_resumed_not_replayed(self, events: list[SessionEvent]) -> None:
        """After a turn ended lost or failed, the next turn on its todo is a new attempt
        that names it — a ``continuation`` of the host session, or a ``retry`` in a
        fresh one when none was bound — told to reconcile: its step is not replayed."""
        ended_badly = {
            getattr(e, "turn_id", "") for e in events if e.type in ("turn.lost", "turn.failed")
        }
        last_on_todo: dict[str | None, TurnEnvelope] = {}
        for event in events:
            if not isinstance(event, TurnAccepted):
                continue
            envelope = event.envelope
            before = last_on_todo.get(envelope.todo_id)
            last_on_todo[envelope.todo_id] = envelope
            if before is None or before.turn_id not in ended_badly:
                continue
            resumes = (
                envelope.kind in ("continuation", "retry")
                and envelope.recovers_turn_id == before.turn_id
                and envelope.attempt > before.attempt
                and bool(envelope.reconcile_note)
            )
            if not resumes:
                self.add(
                    INV2,
                    f"turn {envelope.turn_id} ({envelope.kind}, attempt {envelope.attempt}) "
                    f"follows the ended turn {before.turn_id} without resuming it",
                )

    # --- invariant 3 ------------------------------------------------------------------

    def check_effects(self, events: list[SessionEvent]) -> None:
        name, facts = self.project.name, self.result.facts
        intents: dict[str, list[EffectIntended]] = defaultdict(list)
        resolved: dict[str, list[str]] = defaultdict(list)
        expected: dict[str, tuple[str, str]] = {}  # key -> (turn, effect) a receipt asked for
        for event in events:
            if isinstance(event, EffectIntended):
                intents[event.idempotency_key].append(event)
            elif isinstance(event, EffectResolved):
                resolved[event.idempotency_key].append(event.outcome)
            elif isinstance(event, EffectsRecorded):
                for ref in event.effects:
                    if ref.outcome not in ("open", "rejected"):
                        resolved[ref.idempotency_key].append(str(ref.outcome))
            elif isinstance(event, EffectRejected):
                self.add(
                    INV3,
                    f"effect {event.effect_id} of {event.turn_id} rejected: "
                    f"{event.reason} {event.detail}",
                )
            elif isinstance(event, ReceiptRecorded) and isinstance(event.receipt, ReceiptSuccess):
                key = self._turn_key(events, event.turn_id)
                for item in plan_effects(event.receipt.result, key) if key else ():
                    expected[item.idempotency_key] = (event.turn_id, item.effect_id)
        applied = self.service.counts(name)
        for key, (turn_id, effect_id) in expected.items():
            if key not in intents:
                self.add(INV3, f"effect {effect_id} of turn {turn_id} ({key}) never intended")
        for key, intended in intents.items():
            if len(intended) > 1:
                self.add(INV3, f"effect key {key} intended {len(intended)} times")
            outcomes = resolved.get(key, [])
            if len(outcomes) != 1:
                self.add(INV3, f"effect key {key} resolved {len(outcomes)} times: {outcomes}")
            count = applied.get(key, 0)
            if count != 1:
                self.add(INV3, f"the service applied key {key} {count} times (expected once)")
            elif outcomes == ["applied"]:
                facts.effects_applied += 1
            if "indeterminate" in outcomes:
                facts.effects_indeterminate += 1
                self._check_gate(intended[0])
        for key in set(applied) - set(intents):
            self.add(INV3, f"the service applied key {key}, which no intent names")
        for key in applied:
            self._check_read_back_first(key)

    def _turn_key(self, events: list[SessionEvent], turn_id: str) -> str | None:
        for event in events:
            if isinstance(event, TurnAccepted) and event.envelope.turn_id == turn_id:
                return event.envelope.idempotency_key
        return None

    def _check_read_back_first(self, key: str) -> None:
        """Before every apply of ``key``, a readback of it since the one before."""
        read = False
        for op in self.service.journal(self.project.name, key):
            if op.op == "readback":
                read = True
            elif not read:
                self.add(INV3, f"key {key} applied without a readback before it")
                return
            else:
                read = False

    def _check_gate(self, intent: EffectIntended) -> None:
        gate_id = effect_gate_id(intent.turn_id, intent.effect_id)
        with self.project.store() as store:
            gate = GoalService(store).load(GOAL_ID).gates.get(gate_id)
        if gate is None:
            self.add(INV3, f"indeterminate effect {intent.idempotency_key} opened no gate")

    # --- invariants 4 and 5 -----------------------------------------------------------

    def check_store(self) -> None:
        try:
            with self.project.store() as store:
                report = store.verify(kernel_folder())
                for stream in (session_stream(self.project.session_id), goal_stream(GOAL_ID)):
                    try:
                        seqs = [r.seq for r in store.read_stream(stream)]
                    except TurnkeeperError as error:
                        self.add(INV4, f"{stream}: {error.message}")
                        continue
                    if seqs != list(range(1, len(seqs) + 1)):
                        self.add(INV4, f"{stream}: sequence numbers not contiguous")
                    if store.head(stream) != len(seqs):
                        self.add(INV4, f"{stream}: head {store.head(stream)} != {len(seqs)}")
        except TurnkeeperError as error:
            self.add(INV4, f"store unreadable: {error.code.value}: {error.message}")
            return
        for mismatch in report.mismatches:
            invariant = INV4 if mismatch.kind is MismatchKind.SOURCE_WRITE else INV5
            where = f"{mismatch.stream_id}@{mismatch.seq}"
            self.add(invariant, f"verify: {mismatch.kind.value} {where}: {mismatch.detail}")

    # --- the goal, and what is left running -------------------------------------------

    def check_goal(self) -> None:
        try:
            with self.project.store() as store:
                goals = GoalService(store)
                state = goals.load(GOAL_ID)
                audit = goals.audit(GOAL_ID)
                records = store.read_stream(goal_stream(GOAL_ID))
        except TurnkeeperError as error:
            self.add(GOAL, f"goal unreadable: {error.message}")
            return
        if not state.is_closed:
            self.add(GOAL, f"goal not closed ({state.goal.status.value})")
        if not audit.terminal:
            self.add(GOAL, f"terminal audit not passed: {[b.text for b in audit.blockers]}")
        n_closed = sum(1 for r in records if r.type == "goal_closed")
        if n_closed != 1:
            self.add(GOAL, f"goal closed {n_closed} times")
        for todo in self.project.workload.todo_list:
            path = self.project.repo / todo.path
            content = path.read_text() if path.exists() else None
            if content != todo.content:
                self.add(GOAL, f"{todo.path} holds {content!r}, not the finished work")
        self.result.facts.gates_resolved = sum(
            1 for g in state.gates.values() if g.id.startswith("effect-") and g.resolution
        )

    def check_leftovers(self, events: list[SessionEvent]) -> None:
        """No process of this scenario's turns may outlive its last run."""
        ids = self.project.turn_ids()
        # A detached child of a host that just ended may take a moment to be reaped.
        wait_until(lambda: not live_marked_processes(ids), self.settle_seconds)
        survivors = live_marked_processes(ids)
        if survivors:
            self.add(LEFTOVER, f"processes outlived the run: {json.dumps(survivors)}")
            end_marked_processes(ids)


def check_project(
    project: ChaosProject,
    service: CountingService,
    *,
    expect_closed: bool = True,
    settle_seconds: float = SURVIVOR_SETTLE_SECONDS,
) -> CheckResult:
    """Every invariant on ``project`` as it is now."""
    return Checker(project, service, settle_seconds).check(expect_closed=expect_closed)
