"""Random command sequences against the session kernel, checking the invariants after
every step: fold(events) equals the evolved state, every accepted turn is in flight or
ended exactly once, host seqs are contiguous, recovered host steps never restart, and the
state's size stays bounded however many turns accumulate."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.kernel_session.helpers import CONTRACT, GOAL, HOST, SID, T0, proc
from turnkeeper.errors import TurnkeeperError
from turnkeeper.host_reports import HostEvent
from turnkeeper.kernel.session import (
    AbandonTurn,
    AcceptTurn,
    AcquireLease,
    CompleteTurn,
    CreateSession,
    GoalView,
    HostEventsJournaled,
    HostRecoveryRecord,
    HostStarted,
    LeaseToken,
    LossProof,
    NextTurn,
    ProbedFacts,
    ReceiptFailure,
    ReceiptSuccess,
    RecordEffects,
    RecordHostEvents,
    RecordHostStarted,
    RecordReceipt,
    RecordRecoveryReport,
    RecordTurnLost,
    RecordWriteBack,
    RecoveryBinding,
    RecoveryReport,
    RecoveryResolved,
    ReleaseLease,
    RenewLease,
    ReplayedFacts,
    ReportUnboundTurn,
    ResolveHostRecovery,
    RunnableTodo,
    SessionCommand,
    SessionEvent,
    SessionState,
    SetStatus,
    SnapshotRef,
    TurnAbandoned,
    TurnAccepted,
    TurnCompleted,
    TurnEnvelope,
    TurnFailed,
    TurnLost,
    decide_session,
    envelope_for,
    event_from_json,
    event_to_json,
    evolve_session,
    fold_session,
    plan_next_turn,
)

MAX_STATE_BYTES = 6_000
GOAL_VIEW = GoalView(
    goal_id=GOAL,
    runnable_todos=(
        RunnableTodo(todo_id="todo-1", title="a"),
        RunnableTodo(todo_id="todo-2", title="b"),
    ),
)


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.state: SessionState | None = None
        self.events: list[SessionEvent] = []
        self.next_turn = 0
        self.accepted: list[str] = []
        self.terminals: dict[str, list[str]] = defaultdict(list)
        self.host_seqs: dict[str, list[int]] = defaultdict(list)
        self.recovered: set[str] = set()
        self.rejections = 0
        self.step(CreateSession(session_id=SID, goal_id=GOAL, workspace="/ws", host_kind=HOST))
        self.step(AcquireLease(owner="a", expires_at=T0 + timedelta(hours=1)))

    # --- plumbing ---------------------------------------------------------------

    @property
    def s(self) -> SessionState:
        assert self.state is not None
        return self.state

    def token(self, stale: bool = False) -> LeaseToken:
        lease = self.s.lease
        if stale or lease.owner is None:
            return LeaseToken(owner="a" if lease.owner != "a" else "b", epoch=max(lease.epoch, 1))
        return LeaseToken(owner=lease.owner, epoch=lease.epoch)

    def step(self, command: SessionCommand) -> None:
        before = self.state
        try:
            emitted = decide_session(self.state, command, self.now)
        except TurnkeeperError:
            self.rejections += 1
            assert self.state == before  # a rejection writes nothing
            return
        for event in emitted:
            self.state = evolve_session(self.state, event)
            self.events.append(event)
            self._track(event)

    def _track(self, event: SessionEvent) -> None:
        if isinstance(event, TurnAccepted):
            self.accepted.append(event.envelope.turn_id)
        elif isinstance(event, TurnCompleted | TurnFailed | TurnLost | TurnAbandoned):
            self.terminals[event.turn_id].append(event.type)
            if isinstance(event, TurnLost):
                self.recovered.add(event.turn_id)
        elif isinstance(event, HostEventsJournaled):
            self.host_seqs[event.turn_id].extend(e.seq for e in event.events)
        elif isinstance(event, RecoveryResolved):
            self.recovered.add(event.turn_id)
        elif isinstance(event, HostStarted):
            assert event.turn_id not in self.recovered  # invariant 2

    def in_flight_id(self) -> str:
        return self.s.in_flight.envelope.turn_id if self.s.in_flight else "t-none"

    def target(self, pick: int) -> str:
        """Usually the in-flight turn, sometimes a past or unknown one."""
        end = self.s.last_turn_end
        return [
            self.in_flight_id(),
            self.in_flight_id(),
            end.turn_id if end else "t-x",
            "t-unknown",
        ][pick]

    # --- rules --------------------------------------------------------------------

    @rule(steps=st.integers(1, 8))
    def progress(self, steps: int) -> None:
        """Drive the happy path so runs get deep: many turns, all phases."""
        for _ in range(steps):
            self._progress_once()

    def _progress_once(self) -> None:
        s = self.s
        if s.status == "closed":
            return
        if not s.lease.is_live(self.now):
            self.step(AcquireLease(owner="a", expires_at=self.now + timedelta(hours=1)))
        elif s.status in ("suspended", "crashed"):
            self.step(SetStatus(lease=self.token(), action="resume"))
        elif s.in_flight is None:
            if s.recovery is not None and s.recovery.status == "awaiting_resolution":
                self.resolve(None)
            else:
                self.accept(planned=True, kind="start", resume=False, stale=False, reuse=False)
        else:
            turn = s.in_flight
            turn_id = turn.envelope.turn_id
            phase = turn.phase
            if phase == "accepted":
                handle = s.host_session_handle if turn.envelope.resume_host_session else "th-1"
                self.step(
                    RecordHostStarted(
                        lease=self.token(),
                        turn_id=turn_id,
                        host_kind=HOST,
                        process=proc(),
                        host_session_handle=handle,
                    )
                )
            elif phase == "host_started" and turn.last_host_seq < 2:
                self.host_events(pick=0, offset=0, count=2)
            elif phase == "host_started":
                self.step(
                    RecordReceipt(
                        lease=self.token(), turn_id=turn_id, receipt=ReceiptSuccess(result={"n": 1})
                    )
                )
            elif phase == "receipt":
                self.finish_steps(pick=0, which=0)
            else:
                self.finish_steps(pick=0, which=2)

    @rule(seconds=st.integers(0, 400))
    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(owner=st.sampled_from(["a", "b"]), ttl=st.integers(-10, 3600))
    def acquire(self, owner: str, ttl: int) -> None:
        self.step(AcquireLease(owner=owner, expires_at=self.now + timedelta(seconds=ttl)))

    @rule(stale=st.booleans(), ttl=st.integers(1, 3600), release=st.booleans())
    def renew_or_release(self, stale: bool, ttl: int, release: bool) -> None:
        token = self.token(stale)
        if release:
            self.step(ReleaseLease(lease=token))
        else:
            self.step(RenewLease(lease=token, expires_at=self.now + timedelta(seconds=ttl)))

    @rule(
        planned=st.booleans(),
        kind=st.sampled_from(["start", "continuation", "repair", "replan"]),
        resume=st.booleans(),
        stale=st.booleans(),
        reuse=st.booleans(),
    )
    def accept(self, planned: bool, kind: str, resume: bool, stale: bool, reuse: bool) -> None:
        spec = plan_next_turn(self.s, GOAL_VIEW, self.now) if planned else None
        if not isinstance(spec, NextTurn):
            spec = NextTurn.model_validate(
                {
                    "kind": kind,
                    "todo_id": "todo-1",
                    "attempt": 1,
                    "instructions": "x",
                    "resume_host_session": resume,
                }
            )
        if reuse and self.s.in_flight is not None:
            turn_id = self.in_flight_id()
        else:
            self.next_turn += 1
            turn_id = f"t{self.next_turn}"
        envelope: TurnEnvelope = envelope_for(self.s, spec, turn_id, CONTRACT)
        self.step(AcceptTurn(lease=self.token(stale), envelope=envelope))

    @rule(pick=st.integers(0, 3), handle=st.sampled_from([None, "th-1", "th-2"]))
    def host_started(self, pick: int, handle: str | None) -> None:
        self.step(
            RecordHostStarted(
                lease=self.token(),
                turn_id=self.target(pick),
                host_kind=HOST,
                process=proc(),
                host_session_handle=handle,
            )
        )

    @rule(pick=st.integers(0, 3), offset=st.integers(-1, 1), count=st.integers(1, 3))
    def host_events(self, pick: int, offset: int, count: int) -> None:
        last = self.s.in_flight.last_host_seq if self.s.in_flight else 0
        first = max(1, last + 1 + offset)
        batch = tuple(HostEvent(seq=first + i, kind="item") for i in range(count))
        self.step(RecordHostEvents(lease=self.token(), turn_id=self.target(pick), events=batch))

    @rule(
        pick=st.integers(0, 3),
        ok=st.booleans(),
        kind=st.sampled_from(["signal", "exit_code", "timeout", "protocol", "spawn", "lost"]),
    )
    def receipt(self, pick: int, ok: bool, kind: Any) -> None:
        turn_id = self.target(pick)
        if ok:
            self.step(
                RecordReceipt(
                    lease=self.token(), turn_id=turn_id, receipt=ReceiptSuccess(result={"n": 1})
                )
            )
            return
        attempt = self.s.in_flight.envelope.attempt if self.s.in_flight else 1
        binding = RecoveryBinding(
            session_id=SID,
            generation=self.s.generation,
            host_kind=HOST,
            host_session_handle=self.s.host_session_handle,
            turn_id=turn_id,
            attempt=attempt,
        )
        failure = ReceiptFailure(error_kind=kind, host_recovery=HostRecoveryRecord(binding=binding))
        self.step(RecordReceipt(lease=self.token(), turn_id=turn_id, receipt=failure))

    @rule(pick=st.integers(0, 3), which=st.integers(0, 2))
    def finish_steps(self, pick: int, which: int) -> None:
        turn_id = self.target(pick)
        if which == 0:
            self.step(RecordWriteBack(lease=self.token(), turn_id=turn_id))
        elif which == 1:
            self.step(RecordEffects(lease=self.token(), turn_id=turn_id))
        else:
            snap = SnapshotRef(
                kernel_seq=len(self.events), workspace_revision="r", host_artifact_digest=None
            )
            self.step(CompleteTurn(lease=self.token(), turn_id=turn_id, snapshot=snap))

    @rule(pick=st.integers(0, 3), killed=st.booleans(), abandon=st.booleans())
    def lose_or_abandon(self, pick: int, killed: bool, abandon: bool) -> None:
        turn_id = self.target(pick)
        if abandon:
            self.step(AbandonTurn(lease=self.token(), turn_id=turn_id, reason="test"))
            return
        proof = (
            LossProof(ended="killed", killed_pids=(7,))
            if killed
            else LossProof(ended="proven_gone")
        )
        self.step(RecordTurnLost(lease=self.token(), turn_id=turn_id, proof=proof))

    @rule(
        corrupt=st.sampled_from(
            [None, "generation", "host_session_handle", "session_id", "schema_version"]
        )
    )
    def resolve(self, corrupt: str | None) -> None:
        pending = self.s.recovery
        turn_id, attempt = (pending.turn_id, pending.attempt) if pending else ("t-x", 1)
        binding: dict[str, Any] = {
            "session_id": SID,
            "generation": self.s.generation,
            "host_kind": HOST,
            "host_session_handle": self.s.host_session_handle,
            "turn_id": turn_id,
            "attempt": attempt,
        }
        record: dict[str, Any] = {
            "schema_version": "turnkeeper.host_recovery.v1",
            "kind": "resume_session",
            "failed_phase": "host_execute",
            "binding": binding,
        }
        if corrupt == "schema_version":
            record["schema_version"] = "v0"
        elif corrupt == "generation":
            binding["generation"] = self.s.generation + 1
        elif corrupt == "host_session_handle":
            binding["host_session_handle"] = "th-forged"
        elif corrupt == "session_id":
            binding["session_id"] = "00000000-0000-4000-8000-000000000000"
        self.step(ResolveHostRecovery(lease=self.token(), record=record))

    @rule(
        terminal=st.sampled_from(["completed", "failed", "lost"]),
        cause=st.sampled_from([None, "lost_on_restore"]),
    )
    def unbound(self, terminal: Any, cause: str | None) -> None:
        self.step(
            ReportUnboundTurn(
                lease=self.token(), turn_id=f"u{len(self.events)}", terminal=terminal, cause=cause
            )
        )

    @rule(
        action=st.sampled_from(["stop", "suspend", "resume", "resume", "mark_crashed", "close"]),
        really_close=st.integers(0, 9),
    )
    def status(self, action: Any, really_close: int) -> None:
        if action == "close" and really_close:
            return  # closing is final: keep it rare so runs stay deep
        self.step(SetStatus(lease=self.token(), action=action))

    @rule()
    def report(self) -> None:
        probed = ProbedFacts(probed_at=self.now, workspace_revision="r", workspace_dirty=False)
        rep = RecoveryReport(
            started_at=self.now,
            finished_at=self.now,
            replayed=ReplayedFacts(goal_id=GOAL),
            probed=probed,
        )
        self.step(RecordRecoveryReport(lease=self.token(), report=rep))

    # --- invariants ---------------------------------------------------------------

    @invariant()
    def fold_equals_evolved(self) -> None:
        replayed = fold_session(event_from_json(event_to_json(e)) for e in self.events)
        assert replayed == self.state

    @invariant()
    def every_turn_in_flight_or_ended_once(self) -> None:
        in_flight = self.s.in_flight.envelope.turn_id if self.s.in_flight else None
        assert len(set(self.accepted)) == len(self.accepted)
        for turn_id in self.accepted:
            ends = self.terminals.get(turn_id, [])
            assert len(ends) == (0 if turn_id == in_flight else 1), (turn_id, ends)
        c = self.s.counters
        ended = c.turns_completed + c.turns_failed + c.turns_lost + c.turns_abandoned
        assert c.turns_accepted == ended + (1 if in_flight else 0) == len(self.accepted)

    @invariant()
    def host_seqs_contiguous(self) -> None:
        for seqs in self.host_seqs.values():
            assert seqs == list(range(1, len(seqs) + 1))

    @invariant()
    def status_matches_turn(self) -> None:
        if self.s.status == "running":
            assert self.s.in_flight is not None
        if self.s.status == "ready":
            assert self.s.in_flight is None

    @invariant()
    def state_size_bounded(self) -> None:
        assert len(self.s.model_dump_json()) < MAX_STATE_BYTES


SessionMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSessionMachine = SessionMachine.TestCase
