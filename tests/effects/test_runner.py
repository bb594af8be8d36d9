"""The runtime's effect step against a real store, with providers that script their answers:
readback before apply, outcomes recorded durably, indeterminate -> a blocking gate and
never a retry, rejections before any provider call, and a fence on every write."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from tests.effects.support import of_type, session_events
from turnkeeper.effects import ApplyResult, EffectProvider, Readback
from turnkeeper.errors import Aborted, InvalidArgument, NotFound
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.kernel.model import GateStatus
from turnkeeper.kernel.proposals import CreateGoal
from turnkeeper.kernel.session import (
    AcceptTurn,
    AcquireLease,
    CompleteTurn,
    EffectReadback,
    LeaseToken,
    NextTurn,
    ReceiptSuccess,
    RecordEffectIntended,
    RecordEffectResolved,
    RecordHostStarted,
    RecordReceipt,
    RecordWriteBack,
    SnapshotRef,
    TurnEnvelope,
    derive_effect_key,
)
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.project import init_project
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.driver import DEFAULT_CONTRACT
from turnkeeper.runtime.turn.effects import EffectRunner, effect_gate_id
from turnkeeper.store import open_store
from turnkeeper.store.sql import SqlEventStore

TURN = "turn-1"


@dataclass
class Fake:
    """Answers readbacks from a script (the last answer repeats); counts every call."""

    answers: list[Readback | Exception]
    calls: list[str] = field(default_factory=list)
    refuse: bool = False

    def readback(self, key: str, request: Any) -> Readback:
        self.calls.append("readback")
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def apply(self, key: str, request: Any) -> ApplyResult:
        self.calls.append("apply")
        return ApplyResult(accepted=True, detail="ok")

    def validate_request(self, request: Any) -> None:
        if self.refuse:
            raise InvalidArgument("no thanks", reason="invalid_effect_request")


@dataclass
class Bed:
    store: SqlEventStore
    sessions: SessionService
    goals: GoalService
    sid: str
    envelope: TurnEnvelope
    fakes: dict[str, Fake]
    token: LeaseToken

    def runner(self, token: LeaseToken | None = None) -> EffectRunner:
        def load(kind: str, config: dict[str, Any]) -> EffectProvider:
            if kind not in self.fakes:
                raise NotFound(f"no {kind}", reason="unknown_effect_provider")
            return self.fakes[kind]

        return EffectRunner(self.sessions, self.goals, lambda _: token or self.token, load)

    def key(self, n: int) -> str:
        return derive_effect_key(self.envelope.idempotency_key, n)

    def events(self, kind: str) -> list[Any]:
        return of_type(session_events(self.store, self.sid), kind)

    def complete(self) -> None:
        snap = SnapshotRef(kernel_seq=0, workspace_revision=None, host_artifact_digest=None)
        self.sessions.execute(self.sid, CompleteTurn(lease=self.token, turn_id=TURN, snapshot=snap))


@pytest.fixture
def make_bed(tmp_path: Path) -> Iterator[Any]:
    stores: list[SqlEventStore] = []

    def make(effects: list[JsonValue], fakes: dict[str, Fake], enabled: list[str]) -> Bed:
        project, _ = init_project(tmp_path)
        store = open_store(project.database_url)
        stores.append(store)
        sessions, goals = SessionService(store), GoalService(store)
        goals.create(CreateGoal(goal_id="g", title="effects"))
        providers: dict[str, JsonValue] = {name: {} for name in enabled}
        sid = sessions.create("g", tmp_path, "scripted", {"effects": {"providers": providers}})
        sid_ = sid.session_id
        until = sessions.now() + timedelta(hours=1)
        lease = sessions.execute(sid_, AcquireLease(owner="w", expires_at=until)).state
        assert lease is not None
        token = LeaseToken(owner="w", epoch=lease.lease.epoch)
        spec = NextTurn(
            kind="replan", todo_id=None, attempt=1, instructions="x", resume_host_session=False
        )
        envelope = TurnEnvelope.create(
            turn_id=TURN,
            session_id=sid_,
            generation=1,
            goal_id="g",
            spec=spec,
            contract=DEFAULT_CONTRACT,
        )
        process = ProcessIdentity(pid=1, start_time=1, boot_id="boot", marker=TURN)
        receipt = ReceiptSuccess(result={"effects": effects})
        for command in (
            AcceptTurn(lease=token, envelope=envelope),
            RecordHostStarted(lease=token, turn_id=TURN, host_kind="scripted", process=process),
            RecordReceipt(lease=token, turn_id=TURN, receipt=receipt),
            RecordWriteBack(lease=token, turn_id=TURN),
        ):
            sessions.execute(sid_, command)
        return Bed(store, sessions, goals, sid_, envelope, fakes, token)

    yield make
    for store in stores:
        store.close()


def _effect(provider: str = "p", n: int = 1) -> JsonValue:
    return {"provider": provider, "request": {"n": n}}


def test_found_applied_is_recorded_without_apply(make_bed: Any) -> None:
    fake = Fake([Readback.applied({"id": 7})])
    bed = make_bed([_effect()], {"p": fake}, ["p"])
    summary = bed.runner().settle(bed.sid, TURN)
    assert fake.calls == ["readback"]
    assert (summary.applied, summary.apply_calls) == (["e0"], 0)
    (resolved,) = bed.events("turn.effect_resolved")
    assert resolved.outcome == "applied" and resolved.apply_called is False
    assert resolved.readback.value == {"id": 7}
    bed.complete()


def test_provably_absent_is_applied_once_then_confirmed(make_bed: Any) -> None:
    fake = Fake([Readback.not_applied(), Readback.applied("done")])
    bed = make_bed([_effect()], {"p": fake}, ["p"])
    bed.runner().settle(bed.sid, TURN)
    assert fake.calls == ["readback", "apply", "readback"]
    (intended,) = bed.events("turn.effect_intended")
    assert (intended.idempotency_key, intended.request) == (bed.key(0), {"n": 1})
    (resolved,) = bed.events("turn.effect_resolved")
    assert resolved.apply_called is True and resolved.outcome == "applied"
    # Settling again is a no-op: no provider call, no event.
    before = len(session_events(bed.store, bed.sid))
    assert not bed.runner().settle(bed.sid, TURN).handled
    assert fake.calls == ["readback", "apply", "readback"]
    assert len(session_events(bed.store, bed.sid)) == before
    bed.complete()


def test_unknown_readback_is_indeterminate_gated_and_never_applied(make_bed: Any) -> None:
    fake = Fake([RuntimeError("provider down")])
    bed = make_bed([_effect()], {"p": fake}, ["p"])
    summary = bed.runner().settle(bed.sid, TURN)
    assert fake.calls == ["readback"]
    assert summary.indeterminate == ["e0"]
    (resolved,) = bed.events("turn.effect_resolved")
    assert resolved.outcome == "indeterminate" and "provider down" in resolved.readback.detail
    goal = bed.goals.load("g")
    gate = goal.gates[effect_gate_id(TURN, "e0")]
    assert gate.blocking and gate.status is GateStatus.OPEN
    assert "e0" in gate.title and bed.key(0) in gate.title
    assert bed.goals.audit("g").unresolved_blocking_gates == 1
    bed.runner().settle(bed.sid, TURN)  # a restart: still never retried
    assert fake.calls == ["readback"]
    assert len(bed.goals.load("g").gates) == 1
    bed.complete()


def test_apply_not_confirmed_is_indeterminate_after_one_apply(make_bed: Any) -> None:
    fake = Fake([Readback.not_applied()])
    bed = make_bed([_effect()], {"p": fake}, ["p"])
    bed.runner().settle(bed.sid, TURN)
    bed.runner().settle(bed.sid, TURN)
    assert fake.calls == ["readback", "apply", "readback"]
    (resolved,) = bed.events("turn.effect_resolved")
    assert resolved.outcome == "indeterminate" and resolved.apply_called
    assert "apply: ok" in resolved.readback.detail


def _intend(bed: Bed, n: int = 0) -> None:
    """What a control plane killed right after the intent left behind."""
    bed.sessions.execute(
        bed.sid,
        RecordEffectIntended(
            lease=bed.token,
            turn_id=TURN,
            effect_id=f"e{n}",
            idempotency_key=bed.key(n),
            provider="p",
            request={"n": 1},
        ),
    )


@pytest.mark.parametrize(
    ("answers", "calls", "apply_called"),
    [
        ([Readback.applied()], ["readback"], False),  # it was applied before the crash
        ([Readback.not_applied(), Readback.applied()], ["readback", "apply", "readback"], True),
    ],
)
def test_open_intent_is_read_back_first_on_restart(
    make_bed: Any, answers: list[Readback | Exception], calls: list[str], apply_called: bool
) -> None:
    fake = Fake(answers)
    bed = make_bed([_effect()], {"p": fake}, ["p"])
    _intend(bed)
    summary = bed.runner().settle(bed.sid, TURN)
    assert fake.calls == calls and summary.applied == ["e0"]
    (resolved,) = bed.events("turn.effect_resolved")
    assert resolved.apply_called is apply_called
    assert len(bed.events("turn.effect_intended")) == 1


def test_open_intent_whose_provider_is_gone_is_indeterminate(make_bed: Any) -> None:
    bed = make_bed([_effect()], {"p": Fake([Readback.applied()])}, ["p"])
    _intend(bed)
    bed.fakes.clear()  # uninstalled since the crash
    assert bed.runner().settle(bed.sid, TURN).indeterminate == ["e0"]
    (resolved,) = bed.events("turn.effect_resolved")
    assert "provider unavailable" in resolved.readback.detail
    assert effect_gate_id(TURN, "e0") in bed.goals.load("g").gates


def test_gate_is_opened_on_restart_when_the_crash_came_before_it(make_bed: Any) -> None:
    fake = Fake([Readback.unknown()])
    bed = make_bed([_effect()], {"p": fake}, ["p"])
    _intend(bed)
    bed.sessions.execute(
        bed.sid,
        RecordEffectResolved(
            lease=bed.token,
            turn_id=TURN,
            effect_id="e0",
            outcome="indeterminate",
            readback=EffectReadback(status="unknown"),
            apply_called=False,
        ),
    )
    assert effect_gate_id(TURN, "e0") not in bed.goals.load("g").gates
    bed.runner().settle(bed.sid, TURN)
    assert fake.calls == []
    assert effect_gate_id(TURN, "e0") in bed.goals.load("g").gates


def test_effects_that_cannot_run_are_rejected_before_any_call(make_bed: Any) -> None:
    ok, picky = Fake([Readback.applied()]), Fake([Readback.applied()], refuse=True)
    effects = [_effect("p"), _effect("unlisted"), "junk", _effect("picky"), _effect("gone")]
    bed = make_bed(effects, {"p": ok, "picky": picky}, ["p", "picky", "gone"])
    summary = bed.runner().settle(bed.sid, TURN)
    assert summary.applied == ["e0"] and summary.rejected == ["e1", "e2", "e3", "e4"]
    reasons = {e.effect_id: e.reason for e in bed.events("turn.effect_rejected")}
    assert reasons == {
        "e1": "provider_not_authorised",
        "e2": "malformed_effect",
        "e3": "invalid_effect_request",
        "e4": "unknown_effect_provider",
    }
    assert picky.calls == []
    assert not bed.goals.load("g").gates  # rejected is provably not applied: no gate
    bed.complete()


def test_large_readback_values_are_bounded(make_bed: Any) -> None:
    bed = make_bed([_effect()], {"p": Fake([Readback.applied("x" * 50_000)])}, ["p"])
    bed.runner().settle(bed.sid, TURN)
    (resolved,) = bed.events("turn.effect_resolved")
    value = resolved.readback.value
    assert isinstance(value, dict) and value["truncated"] is True and len(value["sha256"]) == 64


def test_a_stale_lease_writes_nothing_and_calls_nothing(make_bed: Any) -> None:
    fake = Fake([Readback.not_applied()])
    bed = make_bed([_effect()], {"p": fake}, ["p"])
    stale = LeaseToken(owner="someone-else", epoch=bed.token.epoch)
    with pytest.raises(Aborted):
        bed.runner(stale).settle(bed.sid, TURN)
    assert fake.calls == []
    assert bed.events("turn.effect_intended") == []
