"""The notifications' pieces: which events notify, the key, the signature, the stream's
records; and one deliverer against a real HTTP receiver on a real store (SQLite and
PostgreSQL), retried through failures."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from tests import pg
from tests.notify.receiver import receiving
from turnkeeper.kernel.events import GateOpened, GoalClosed
from turnkeeper.kernel.model import NoFollowUp
from turnkeeper.kernel.proposals import CreateGoal, CriterionSpec, OpenGate
from turnkeeper.kernel.session.events import StatusChanged, TurnFailed
from turnkeeper.kernel.session.state import SessionStatus
from turnkeeper.notify import derive as derive_module
from turnkeeper.notify import outbox
from turnkeeper.notify.deliverer import Deliverer, DeliveryPolicy
from turnkeeper.notify.derive import derive
from turnkeeper.notify.endpoints import add_endpoint, endpoint_rows
from turnkeeper.notify.records import (
    Delivered,
    DeliveryFailed,
    EndpointAdded,
    Scanned,
    evolve_notify,
)
from turnkeeper.notify.signing import idempotency_key, signature, verify
from turnkeeper.notify.urls import shown_url
from turnkeeper.runtime.services import goal_reads
from turnkeeper.runtime.services import goals as goal_service
from turnkeeper.runtime.services import sessions as session_service
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.store import EventStore, open_store
from turnkeeper.store.records import EventRecord
from turnkeeper.vocabulary import HostErrorKind

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _record(stream_id: str, seq: int, event: object) -> EventRecord:
    assert hasattr(event, "model_dump_json") and hasattr(event, "type")
    return EventRecord(
        stream_id=stream_id,
        seq=seq,
        type=event.type,
        schema_version=1,
        payload=event.model_dump_json(),
        recorded_at=AT,
        checksum="-",
    )


# --- which events notify -------------------------------------------------------------------


def test_a_gate_a_closed_goal_a_crash_a_suspension_and_a_hang_notify() -> None:
    gate = GateOpened(gate_id="ship", title="May it ship?", blocking=True, scope=["t1"], at=AT)
    found = derive(_record("goal:g1", 7, gate))
    assert found is not None and found.event == "gate_opened"
    assert (found.goal_id, found.stream_id, found.seq) == ("g1", "goal:g1", 7)
    assert found.details["title"] == "May it ship?" and "ship" in found.summary

    closure = NoFollowUp(reason="acceptance_met", summary="all done", at=AT)
    closed = derive(_record("goal:g1", 8, GoalClosed(closure=closure, at=AT)))
    assert closed is not None and closed.event == "goal_closed"

    sid = "session:" + "1" * 8 + "-1111-4111-8111-" + "1" * 12
    crash = StatusChanged(action="mark_crashed", status=SessionStatus.CRASHED, reason="x", at=AT)
    crashed = derive(_record(sid, 3, crash), goal_of_session="g1")
    assert crashed is not None and crashed.event == "session_crashed"
    assert crashed.goal_id == "g1" and crashed.session_id == sid.removeprefix("session:")

    hung = StatusChanged(action="suspend", status=SessionStatus.SUSPENDED, reason="hung", at=AT)
    suspended = derive(_record(sid, 4, hung))
    assert suspended is not None and suspended.event == "session_suspended"
    # A stop a person asked for tells nobody anything new.
    stop = StatusChanged(action="stop", status=SessionStatus.SUSPENDED, reason="stop", at=AT)
    assert derive(_record(sid, 5, stop)) is None

    turn = TurnFailed(turn_id="turn-1", error_kind=HostErrorKind.HUNG, message="silent", at=AT)
    assert (n := derive(_record(sid, 6, turn))) is not None and n.event == "turn_hung"
    other = TurnFailed(turn_id="turn-2", error_kind=HostErrorKind.EXIT_CODE, at=AT)
    assert derive(_record(sid, 7, other)) is None


def test_the_stream_names_agree_with_the_runtime() -> None:
    assert derive_module.GOAL_KIND == goal_reads.GOAL_KIND
    assert derive_module.SESSION_KIND == session_service.SESSION_KIND
    assert goal_service.goal_stream("g").removesuffix("g") == derive_module.GOAL_PREFIX
    assert session_service.session_stream("s").removesuffix("s") == derive_module.SESSION_PREFIX


# --- key and signature ---------------------------------------------------------------------


def test_the_key_is_stable_and_names_endpoint_stream_and_seq() -> None:
    key = idempotency_key("ep-1", "goal:g", 3)
    assert key == idempotency_key("ep-1", "goal:g", 3)
    others = {
        idempotency_key("ep-2", "goal:g", 3),
        idempotency_key("ep-1", "goal:h", 3),
        idempotency_key("ep-1", "goal:g", 4),
    }
    assert key not in others and len(others) == 3


def test_the_signature_is_the_hmac_of_timestamp_and_body() -> None:
    secret, body = SecretStr("s" * 32), b'{"event":"gate_opened"}'
    expected = hmac.new(b"s" * 32, b"1700000000." + body, hashlib.sha256).hexdigest()
    header = signature(secret, 1_700_000_000, body)
    assert header == f"sha256={expected}"
    assert verify(secret, "1700000000", body, header)
    assert not verify(secret, "1700000000", body + b" ", header)
    assert not verify(secret, "1700000001", body, header)
    assert not verify(SecretStr("t" * 32), "1700000000", body, header)


# --- the stream's records ------------------------------------------------------------------


def test_the_secret_is_kept_in_the_store_json_only() -> None:
    added = EndpointAdded(
        endpoint_id="ep-1",
        url="http://h/x",
        events=("gate_opened",),
        secret=SecretStr("k" * 20),
        at=AT,
    )
    assert "k" * 20 in added.model_dump_json()
    assert "k" * 20 not in repr(added) and "k" * 20 not in str(added.model_dump())
    state = evolve_notify(None, added)
    assert "k" * 20 not in repr(state)
    assert all("k" * 20 not in str(row) for row in endpoint_rows(state))


def test_cursors_only_move_forward_and_a_delivery_ends_the_failing() -> None:
    added = EndpointAdded(
        endpoint_id="ep-1", url="http://h/x", events=("gate_opened",), secret=SecretStr("k" * 20),
        start={"goal:g": 2}, at=AT,
    )  # fmt: skip
    state = evolve_notify(None, added)
    where = {"endpoint_id": "ep-1", "stream_id": "goal:g", "seq": 5, "key": "k1", "at": AT}
    retry = AT + timedelta(seconds=1)
    for n in (1, 2):
        state = evolve_notify(
            state, DeliveryFailed(**where, attempt=n, error="HTTP 500", next_attempt_at=retry)
        )
    failing = state.endpoints["ep-1"].failing
    assert failing is not None and failing.failures == 2 and failing.last_error == "HTTP 500"
    state = evolve_notify(state, Delivered(**where, attempts=3, status_code=200))
    endpoint = state.endpoints["ep-1"]
    assert endpoint.failing is None and endpoint.cursor("goal:g") == 5 and endpoint.delivered == 1
    state = evolve_notify(state, Scanned(endpoint_id="ep-1", cursors={"goal:g": 4}, at=AT))
    assert state.endpoints["ep-1"].cursor("goal:g") == 5


def test_a_url_is_listed_without_its_password_or_query() -> None:
    assert shown_url("https://u:pw@hooks.example.com:8443/a/b?token=x") == (
        "https://hooks.example.com:8443/a/b?…"
    )


# --- a deliverer, a real receiver, a real store --------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    url = str(tmp_path / "tk.db") if request.param == "sqlite" else pg.fresh_postgres_url()
    opened = open_store(url)
    try:
        yield opened
    finally:
        opened.close()


FAST = DeliveryPolicy(first_backoff_seconds=0.05, max_backoff_seconds=0.2, max_attempts=5)


def test_a_gate_reaches_the_receiver_once_through_two_failures(store: EventStore) -> None:
    goals = GoalService(store)
    goals.create(CreateGoal(goal_id="g", title="g", criteria=[CriterionSpec(id="c1", text="done")]))
    with receiving([500, 503]) as receiver:
        added = add_endpoint(store, receiver.url, ("gate_opened", "goal_closed"))
        goals.submit("g", OpenGate(gate_id="ship", title="May it ship?"))
        deliverer = Deliverer(store, FAST)
        tick = deliverer.drain(10.0)
        assert (tick.more, tick.due) == (False, None), tick

        assert receiver.count() == 3
        (taken,) = receiver.accepted()
        assert {r.key for r in receiver.received} == {taken.key}
        assert [r.headers["X-Turnkeeper-Attempt"] for r in receiver.received] == ["1", "2", "3"]
        assert taken.signed_with(added.secret.get_secret_value())
        body = taken.json()
        assert (body["event"], body["goal_id"], body["details"]["gate_id"]) == (
            "gate_opened",
            "g",
            "ship",
        )
        # A second deliverer (a restart) finds nothing left to send.
        assert Deliverer(store, FAST).drain(1.0).sent == 0
        assert receiver.count() == 3

    state, _ = outbox.load(store)
    (endpoint,) = state.endpoints.values()
    assert (endpoint.delivered, endpoint.failing, endpoint.gave_up) == (1, None, 0)
    assert store.verify(kernel_folder()).ok
