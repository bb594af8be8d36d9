"""Random effect protocols against the session kernel, with crashes anywhere.

A simulated external system keeps how often each key was applied. The simulated
runtime follows the protocol — intent, readback first, apply only on a provable
``not_applied``, readback, outcome — but may stop (crash) between any two steps,
and its readback may be unable to tell. Stray commands (stale leases, other turns,
contradicting outcomes) are mixed in. After every step: invariant 3 (each key
applied at most once; a recorded outcome is final and needs an intent), every
completed turn had an outcome for every effect it requested, fold equals evolve,
and the state stays bounded.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Literal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from pydantic import JsonValue

from tests.kernel_session.helpers import CONTRACT, GOAL, HOST, SID, T0, proc, snapshot
from turnkeeper.errors import TurnkeeperError
from turnkeeper.kernel.session import (
    AcceptTurn,
    AcquireLease,
    CompleteTurn,
    CreateSession,
    EffectIntended,
    EffectReadback,
    EffectRejected,
    EffectResolved,
    LeaseToken,
    NextTurn,
    ReceiptRecorded,
    ReceiptSuccess,
    RecordEffectIntended,
    RecordEffectRejected,
    RecordEffectResolved,
    RecordHostStarted,
    RecordReceipt,
    RecordWriteBack,
    SessionCommand,
    SessionEvent,
    SessionState,
    TurnCompleted,
    TurnEnvelope,
    decide_session,
    evolve_session,
    fold_session,
    plan_effects,
)

Outcome = Literal["applied", "indeterminate"]
ENTRIES: list[JsonValue] = [
    {"provider": "http", "request": {"n": 1}},
    {"provider": "cmd", "request": {}},
    "malformed",
]


class EffectsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.state: SessionState | None = None
        self.events: list[SessionEvent] = []
        self.applied: Counter[str] = Counter()  # the external system
        self.turns = 0
        self.step(CreateSession(session_id=SID, goal_id=GOAL, workspace="/ws", host_kind=HOST))
        self.step(AcquireLease(owner="a", expires_at=T0 + timedelta(days=30)))

    @property
    def s(self) -> SessionState:
        assert self.state is not None
        return self.state

    def token(self, stale: bool = False) -> LeaseToken:
        return LeaseToken(owner="b" if stale else "a", epoch=self.s.lease.epoch)

    def step(self, command: SessionCommand) -> bool:
        before = self.state
        try:
            emitted = decide_session(self.state, command, self.now)
        except TurnkeeperError:
            assert self.state == before
            return False
        for event in emitted:
            self.state = evolve_session(self.state, event)
            self.events.append(event)
        return True

    def planned(self) -> list[tuple[str, str, str, dict[str, JsonValue]]]:
        turn = self.s.in_flight
        if turn is None or turn.receipt is None:
            return []
        plan = plan_effects(turn.receipt.result, turn.envelope.idempotency_key)
        return [
            (p.effect_id, p.idempotency_key, p.provider, dict(p.request))
            for p in plan
            if p.rejection is None
        ]

    # --- rules ----------------------------------------------------------------------------

    @rule(entries=st.lists(st.sampled_from(range(len(ENTRIES))), max_size=4))
    def new_turn(self, entries: list[int]) -> None:
        if self.s.in_flight is not None:
            return
        self.turns += 1
        turn_id = f"t{self.turns}"
        spec = NextTurn(
            kind="replan", todo_id=None, attempt=1, instructions="x", resume_host_session=False
        )
        envelope = TurnEnvelope.create(
            turn_id=turn_id,
            session_id=SID,
            generation=1,
            goal_id=GOAL,
            spec=spec,
            contract=CONTRACT,
        )
        result: dict[str, JsonValue] = {"effects": [ENTRIES[i] for i in entries]}
        for command in (
            AcceptTurn(lease=self.token(), envelope=envelope),
            RecordHostStarted(lease=self.token(), turn_id=turn_id, host_kind=HOST, process=proc()),
            RecordReceipt(
                lease=self.token(), turn_id=turn_id, receipt=ReceiptSuccess(result=result)
            ),
            RecordWriteBack(lease=self.token(), turn_id=turn_id),
        ):
            assert self.step(command)

    @rule(pick=st.integers(0, 3), stale=st.booleans())
    def intend(self, pick: int, stale: bool) -> None:
        planned = self.planned()
        if not planned or self.s.in_flight is None:
            return
        effect_id, key, provider, request = planned[pick % len(planned)]
        turn_id = self.s.in_flight.envelope.turn_id
        self.step(
            RecordEffectIntended(
                lease=self.token(stale),
                turn_id=turn_id,
                effect_id=effect_id,
                idempotency_key=key,
                provider=provider,
                request=request,
            )
        )

    @rule(pick=st.integers(0, 3), blind=st.booleans(), crash_after_apply=st.booleans())
    def settle(self, pick: int, blind: bool, crash_after_apply: bool) -> None:
        planned = self.planned()
        if planned:
            effect_id, key, _, _ = planned[pick % len(planned)]
            self._settle(effect_id, key, blind, crash_after_apply)

    def _settle(self, effect_id: str, key: str, blind: bool, crash_after_apply: bool) -> None:
        """The runtime's protocol for one effect the kernel says is open."""
        turn = self.s.in_flight
        entry = turn.effect(effect_id) if turn is not None else None
        if turn is None or entry is None or entry.outcome != "open":
            return  # no intent, or already resolved: nothing may be called
        apply_called = False
        readback = self._readback(key, blind)
        if readback.status == "not_applied":
            self.applied[key] += 1
            apply_called = True
            if crash_after_apply:
                return  # the outcome is lost: a restart must read back first
            readback = self._readback(key, blind)
        outcome: Outcome = "applied" if readback.status == "applied" else "indeterminate"
        self.step(
            RecordEffectResolved(
                lease=self.token(),
                turn_id=turn.envelope.turn_id,
                effect_id=effect_id,
                outcome=outcome,
                readback=readback,
                apply_called=apply_called,
            )
        )

    @rule(
        steps=st.integers(1, 12),
        entries=st.lists(st.sampled_from(range(len(ENTRIES))), max_size=4),
        blind=st.booleans(),
        crash=st.booleans(),
    )
    def drive(self, steps: int, entries: list[int], blind: bool, crash: bool) -> None:
        """The runtime's happy path, so runs get deep: many turns and effects."""
        for _ in range(steps):
            self._drive_once(entries, blind, crash)

    def _drive_once(self, entries: list[int], blind: bool, crash: bool) -> None:
        turn = self.s.in_flight
        if turn is None:
            self.new_turn(entries)
            return
        assert turn.receipt is not None
        turn_id = turn.envelope.turn_id
        for item in plan_effects(turn.receipt.result, turn.envelope.idempotency_key):
            entry = turn.effect(item.effect_id)
            if entry is None and item.rejection is not None:
                self.step(
                    RecordEffectRejected(
                        lease=self.token(), turn_id=turn_id, effect_id=item.effect_id, reason="x"
                    )
                )
            elif entry is None:
                self.step(
                    RecordEffectIntended(
                        lease=self.token(),
                        turn_id=turn_id,
                        effect_id=item.effect_id,
                        idempotency_key=item.idempotency_key,
                        provider=item.provider,
                        request=item.request,
                    )
                )
            elif entry.outcome == "open":
                self._settle(item.effect_id, item.idempotency_key, blind, crash)
            else:
                continue
            return
        self.complete()

    def _readback(self, key: str, blind: bool) -> EffectReadback:
        if blind:
            return EffectReadback(status="unknown")
        if self.applied[key]:
            return EffectReadback(status="applied")
        return EffectReadback(status="not_applied")

    @rule(pick=st.integers(0, 3), outcome=st.sampled_from(["applied", "indeterminate"]))
    def stray_outcome(self, pick: int, outcome: Outcome) -> None:
        """An outcome nobody read back: the kernel must keep recorded outcomes final."""
        turn = self.s.in_flight
        if turn is None:
            return
        readback = EffectReadback(status="applied" if outcome == "applied" else "unknown")
        self.step(
            RecordEffectResolved(
                lease=self.token(),
                turn_id=turn.envelope.turn_id,
                effect_id=f"e{pick}",
                outcome=outcome,
                readback=readback,
                apply_called=False,
            )
        )

    @rule(pick=st.integers(0, 4))
    def reject(self, pick: int) -> None:
        turn = self.s.in_flight
        if turn is not None:
            self.step(
                RecordEffectRejected(
                    lease=self.token(),
                    turn_id=turn.envelope.turn_id,
                    effect_id=f"e{pick}",
                    reason="x",
                )
            )

    @rule()
    def complete(self) -> None:
        turn = self.s.in_flight
        if turn is not None:
            self.step(
                CompleteTurn(lease=self.token(), turn_id=turn.envelope.turn_id, snapshot=snapshot())
            )

    # --- invariants -----------------------------------------------------------------------

    @invariant()
    def each_key_applied_at_most_once(self) -> None:
        assert all(n <= 1 for n in self.applied.values()), self.applied

    @invariant()
    def outcomes_need_an_intent_and_are_final(self) -> None:
        intended: set[str] = set()
        resolved: set[str] = set()
        for event in self.events:
            if isinstance(event, EffectIntended):
                assert event.idempotency_key not in intended
                intended.add(event.idempotency_key)
            elif isinstance(event, EffectResolved):
                assert event.idempotency_key in intended
                assert event.idempotency_key not in resolved
                resolved.add(event.idempotency_key)

    @invariant()
    def completed_turns_settled_every_effect(self) -> None:
        open_ids: dict[str, set[str]] = {}
        for event in self.events:
            if isinstance(event, ReceiptRecorded) and event.receipt.outcome == "success":
                effects = event.receipt.result.get("effects")
                count = min(len(effects), 16) if isinstance(effects, list) else 0
                open_ids[event.turn_id] = {f"e{n}" for n in range(count)}
            elif isinstance(event, EffectResolved | EffectRejected):
                open_ids[event.turn_id].discard(event.effect_id)
            elif isinstance(event, TurnCompleted):
                assert open_ids[event.turn_id] == set()

    @invariant()
    def fold_equals_evolved_and_bounded(self) -> None:
        assert fold_session(self.events) == self.state
        assert len(self.s.model_dump_json()) < 8_000


EffectsMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEffectsMachine = EffectsMachine.TestCase
