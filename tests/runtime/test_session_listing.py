"""Sessions listed from their projection rows without decoding them
(runtime/services/session_listing.py).

A summary of a real session holds its decoded state key for key and the fields a
listing shows; a row whose JSON lacks one of them, or holds it with the wrong type, is
DATA_LOSS with the reason a decoded read gives; a row whose checksum fails is DATA_LOSS
from the store, as on every read.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from turnkeeper.errors import DataLoss
from turnkeeper.kernel.proposals import CreateGoal
from turnkeeper.kernel.session.state import SessionStatus
from turnkeeper.runtime.control.controller import Controller
from turnkeeper.runtime.services import sessions as session_runtime
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.session_listing import (
    FINISHED_SESSION_STATUSES,
    SESSION_KIND,
    SESSION_PROJECTION_VERSION,
    list_sessions,
    recovery_report,
    summarize,
)
from turnkeeper.runtime.services.sessions import SessionService, session_stream
from turnkeeper.store import NewEvent, SqlEventStore, open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlEventStore]:
    opened = open_store(tmp_path / "listing.db")
    GoalService(opened).create(CreateGoal(goal_id="g1", title="a goal"))
    try:
        yield opened
    finally:
        opened.close()


def _two_sessions(store: SqlEventStore, workspace: Path) -> list[str]:
    sessions = SessionService(store)
    first = sessions.create("g1", workspace, "scripted", {}, snapshots=False).session_id
    second = sessions.create("g1", workspace, "scripted", {"script": []}, snapshots=False)
    Controller(store, owner="listing-test").acquire(first)  # a lease held, one not
    return [first, second.session_id]


def test_a_summary_is_the_decoded_state_key_for_key(store: SqlEventStore, tmp_path: Path) -> None:
    ids = _two_sessions(store, tmp_path)
    listed = list_sessions(store)
    decoded = SessionService(store).list()
    assert [s.session_id for s in listed] == ids  # oldest first, as the store lists them
    assert [s.state for s in listed] == [d.model_dump(mode="json") for d in decoded]
    for summary, state in zip(listed, decoded, strict=True):
        dumped = state.model_dump(mode="json")
        assert (summary.goal_id, summary.host_kind, summary.status) == ("g1", "scripted", "ready")
        assert summary.status_reason == state.status_reason
        assert dict(summary.counters) == dumped["counters"]
        assert summary.in_flight_turn_id is None and state.in_flight is None
        assert (summary.lease_owner, summary.lease_expires_at) == (
            dumped["lease"]["owner"],
            dumped["lease"]["expires_at"],
        )
        assert summary.turns_without_progress == state.turns_without_progress
        assert summary.replans_without_progress == state.replans_without_progress
        assert summary.consecutive_host_failures == state.consecutive_host_failures
        assert not summary.has_recovery_report and recovery_report(summary) is None
    assert listed[0].lease_owner == "listing-test" and listed[1].lease_owner is None


def test_the_listing_reads_the_streams_the_runtime_writes() -> None:
    assert SESSION_KIND == session_runtime.SESSION_KIND
    codec = session_runtime.SESSION_CODEC
    assert codec.projection_schema_version == SESSION_PROJECTION_VERSION


def test_a_row_of_another_shape_lists_as_the_decoded_state(
    store: SqlEventStore, tmp_path: Path
) -> None:
    """A projection written in an older shape (here: without a key that has a default)
    lists with the key, as decoding it gives, not as stored."""
    state = _valid(store, tmp_path)
    older = {k: v for k, v in state.items() if k != "operation"}
    stream = session_stream("00000000-0000-4000-8000-000000000002")
    event = NewEvent(type="session.created", schema_version=1, payload="{}")
    older["session_id"] = stream.removeprefix("session:")
    store.append(stream, SESSION_KIND, 0, [event], json.dumps(older), 0)
    listed = {s.session_id: s.state for s in list_sessions(store)}
    decoded = {d.session_id: d.model_dump(mode="json") for d in SessionService(store).list()}
    assert listed == decoded
    assert listed[older["session_id"]]["operation"] is None


def _valid(store: SqlEventStore, workspace: Path) -> dict[str, Any]:
    sid = _two_sessions(store, workspace)[0]
    state: dict[str, Any] = SessionService(store).load(sid).model_dump(mode="json")
    return state


def _with(state: dict[str, Any], path: tuple[str, ...], value: Any) -> str:
    changed = json.loads(json.dumps(state))
    target = changed
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(changed)


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        (("counters",), KeyError, "counters is not dict"),
        (("status",), 3, "status is not str"),
        (("session_id",), None, "session_id is not str"),
        (("status_reason",), ["no"], "status_reason is not str"),
        (("turns_without_progress",), True, "turns_without_progress is not int"),
        (("counters", "turns_lost"), "1", "turns_lost is not int"),
        # A bool is an int to Python, never a count; nor is a float that looks like one.
        (("counters", "turns_lost"), False, "turns_lost is not int"),
        (("counters", "turns_completed"), 2.0, "turns_completed is not int"),
        (("lease",), "held", "lease is not dict"),
        (("lease", "owner"), 7, "owner is not str"),
        (("in_flight",), [], "in_flight is not an object"),
        (("in_flight",), {"envelope": {"kind": "start"}}, "turn_id is not str"),
    ],
)
def test_a_row_without_what_a_listing_shows_is_data_loss(
    store: SqlEventStore, tmp_path: Path, path: tuple[str, ...], value: Any, problem: str
) -> None:
    text = _with(_valid(store, tmp_path), path, value)
    with pytest.raises(DataLoss) as caught:
        summarize("session:damaged", text)
    assert caught.value.reason == "undecodable_projection"
    assert caught.value.details == {"stream_id": "session:damaged", "problem": problem}


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '"a string"', '{"session_id": '])
def test_text_that_is_not_a_json_object_is_data_loss(text: str) -> None:
    with pytest.raises(DataLoss) as caught:
        summarize("session:damaged", text)
    assert caught.value.reason == "undecodable_projection"


def test_a_row_the_decoder_refuses_the_listing_refuses_alike(store: SqlEventStore) -> None:
    """A projection whose checksum holds but whose JSON is no session state: both the
    decoded read and the listing say DATA_LOSS, undecodable_projection."""
    stream = session_stream("00000000-0000-4000-8000-000000000001")
    event = NewEvent(type="session.created", schema_version=1, payload="{}")
    store.append(stream, SESSION_KIND, 0, [event], '{"session_id": "x"}', 1)
    with pytest.raises(DataLoss) as listed:
        list_sessions(store)
    with pytest.raises(DataLoss) as decoded:
        SessionService(store).list()
    assert listed.value.reason == decoded.value.reason == "undecodable_projection"
    assert listed.value.details["stream_id"] == decoded.value.details["stream_id"] == stream


def test_a_row_whose_checksum_fails_is_data_loss(store: SqlEventStore, tmp_path: Path) -> None:
    sid = _two_sessions(store, tmp_path)[1]
    stream = session_stream(sid)
    conn = sqlite3.connect(tmp_path / "listing.db")
    try:
        conn.execute(
            "UPDATE projections SET state = replace(state, '\"ready\"', '\"closed\"') "
            "WHERE stream_id = ?",
            (stream,),
        )
        conn.commit()
    finally:
        conn.close()
    with pytest.raises(DataLoss) as caught:
        list_sessions(store)
    assert caught.value.reason == "checksum_mismatch"
    assert caught.value.details["stream_id"] == stream
    assert caught.value.details["record"] == "projection"


def test_a_recovery_report_that_does_not_decode_is_data_loss(
    store: SqlEventStore, tmp_path: Path
) -> None:
    text = _with(_valid(store, tmp_path), ("latest_recovery_report",), {"replayed": "?"})
    summary = summarize("session:damaged", text)
    assert summary.has_recovery_report
    with pytest.raises(DataLoss) as caught:
        recovery_report(summary)
    assert caught.value.reason == "undecodable_projection"
    assert caught.value.details["stream_id"] == f"session:{summary.session_id}"


def test_the_finished_statuses_are_the_kernels_terminal_ones() -> None:
    """A closed session can only be deleted, a deleted one nothing: those two are what
    ``status`` counts instead of drawing."""
    assert {SessionStatus.CLOSED.value, SessionStatus.DELETED.value} == FINISHED_SESSION_STATUSES
