"""Host recovery records at runtime: forged, stale and mismatched records
against a real failed turn in a real SQLite store are refused with their typed
reason and write nothing; the genuine record, read back from the log by the
``recover`` command, resumes the session exactly once, and the continuation that
follows resumes the same host session without running the failed host step again.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import durable_digest
from turnkeeper.errors import (
    EXIT_CODES,
    Aborted,
    ErrorCode,
    FailedPrecondition,
    InvalidArgument,
    TurnkeeperError,
)
from turnkeeper.hosts import process_tree
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import (
    HostEventsJournaled,
    LeaseToken,
    RecoveryPolicy,
    ResolveHostRecovery,
    TurnAccepted,
    event_from_json,
)
from turnkeeper.kernel.session.records import ReceiptFailure
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.project import init_project
from turnkeeper.runtime.services.sessions import SessionService, session_stream
from turnkeeper.store import open_store
from turnkeeper.store.sql import SqlEventStore

TODO_TITLE = "write a"


def _git_workspace(path: Path) -> Path:
    path.mkdir()
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True)
    (path / "README").write_text("workspace\n")
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=path, check=True)
    return path


def _script() -> dict[str, Any]:
    return {
        "turns": [
            {
                # The first attempt binds a host session, half-writes, then the host crashes.
                "match": {"todo": TODO_TITLE, "attempt": 1, "kind": "start"},
                "steps": [
                    {"op": "write", "path": "a.txt", "content": "half\n"},
                    {"op": "crash", "exit_code": 3},
                ],
            },
            {
                # Only the resumed continuation may finish the todo.
                "match": {"todo": TODO_TITLE, "attempt": 2, "kind": "continuation"},
                "steps": [{"op": "write", "path": "a.txt", "content": "A\n"}],
                "result": {"todo_done": True},
            },
        ]
    }


@dataclass
class FailedTurn:
    root: Path
    host_state: Path
    store: SqlEventStore
    sessions: SessionService
    session_id: str
    turn_id: str
    handle: str
    record: dict[str, Any]  # the genuine host recovery record, read back from the log

    def digest(self) -> str:
        return durable_digest(self.root)


@pytest.fixture
def failed_turn(tmp_path: Path) -> Iterator[FailedTurn]:
    project, _ = init_project(tmp_path)
    workspace = _git_workspace(tmp_path / "ws")
    host_state = tmp_path / "host-state"
    store = open_store(project.database_url)
    goals = GoalService(store)
    sessions = SessionService(store)
    goals.create(CreateGoal(goal_id="g", title="recover a crashed host"))
    goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t1", title=TODO_TITLE)))
    config = {"state_dir": str(host_state), "script": _script()}
    session = sessions.create("g", workspace, "scripted", config)
    sid = session.session_id
    turn_ids: list[str] = []
    try:
        # One turn through the real controller: the host crashes and the budget
        # stops the loop before it resolves the failure itself.
        summary = Controller(store, ControllerConfig(max_turns=1)).run([sid])
        assert (summary.turns, summary.failed_turns) == (1, 1)
        state = sessions.load(sid)
        assert state.recovery is not None
        assert state.recovery.status == "awaiting_resolution"
        assert state.recovery.error_kind == "exit_code"
        assert state.host_session_handle is not None
        turn_id = state.recovery.turn_id
        turn_ids.append(turn_id)
        receipt = sessions.receipt_event(sid, turn_id).receipt
        assert receipt.outcome == "failure"
        assert receipt.exit_code == 3
        record = receipt.host_recovery.model_dump(mode="json")
        yield FailedTurn(
            root=tmp_path,
            host_state=host_state,
            store=store,
            sessions=sessions,
            session_id=sid,
            turn_id=turn_id,
            handle=state.host_session_handle,
            record=record,
        )
    finally:
        store.close()
        for turn in turn_ids:
            process_tree.kill_turn_processes(turn)  # only processes our turns marked


def _forged(record: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``record`` with the dotted ``path`` set to ``value``."""
    forged = copy.deepcopy(record)
    *parents, leaf = path.split(".")
    node = forged
    for key in parents:
        node = node[key]
    node[leaf] = value
    return forged


FORGERIES: list[tuple[str, str, Any, type[TurnkeeperError], str]] = [
    # (case, field, forged value, error class, reason)
    ("other_session", "binding.session_id", "<new uuid>", FailedPrecondition, "session_mismatch"),
    ("other_generation", "binding.generation", 2, FailedPrecondition, "generation_mismatch"),
    (
        "other_host_handle",
        "binding.host_session_handle",
        "scripted-someone-else",
        FailedPrecondition,
        "host_handle_mismatch",
    ),
    (
        "no_host_handle",
        "binding.host_session_handle",
        None,
        FailedPrecondition,
        "host_handle_mismatch",
    ),
    (
        "other_host_kind",
        "binding.host_kind",
        "subprocess",
        FailedPrecondition,
        "host_kind_mismatch",
    ),
    (
        "unknown_schema_version",
        "schema_version",
        "turnkeeper.host_recovery.v2",
        FailedPrecondition,
        "unsupported_schema_version",
    ),
    ("wrong_failed_phase", "failed_phase", "write_back", FailedPrecondition, "wrong_failed_phase"),
    ("wrong_kind", "kind", "restart_session", FailedPrecondition, "unsupported_recovery_kind"),
    ("no_schema_version", "schema_version", None, InvalidArgument, "malformed_recovery_record"),
    ("missing_binding", "binding", None, InvalidArgument, "malformed_recovery_record"),
    ("unknown_field", "retry_host", True, InvalidArgument, "malformed_recovery_record"),
    (
        "not_the_failed_turn",
        "binding.turn_id",
        "turn-0123456789abcdef",
        FailedPrecondition,
        "turn_not_recoverable",
    ),
    ("other_attempt", "binding.attempt", 2, FailedPrecondition, "attempt_mismatch"),
]


def _expect_refused(
    failed: FailedTurn,
    command: ResolveHostRecovery,
    error: type[TurnkeeperError],
    reason: str,
    sessions: SessionService | None = None,
) -> None:
    before = failed.digest()
    with pytest.raises(error) as caught:
        (sessions or failed.sessions).execute(failed.session_id, command)
    assert caught.value.reason == reason, caught.value.to_dict()
    assert failed.digest() == before, f"a refused record ({reason}) wrote to the store"


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env["TURNKEEPER_DIR"] = str(root)
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", *args],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _stream_events(store: SqlEventStore, session_id: str) -> list[Any]:
    return [event_from_json(r.payload) for r in store.read_stream(session_stream(session_id))]


def _session_events(failed: FailedTurn) -> list[Any]:
    return _stream_events(failed.store, failed.session_id)


def test_forged_and_stale_records_are_refused_and_write_nothing(failed_turn: FailedTurn) -> None:
    failed = failed_turn
    controller = Controller(failed.store)
    token = controller.acquire(failed.session_id)
    try:
        for case, path, value, error, reason in FORGERIES:
            forged_value = str(uuid.uuid4()) if value == "<new uuid>" else value
            forged = _forged(failed.record, path, forged_value)
            assert forged != failed.record, case
            _expect_refused(failed, ResolveHostRecovery(lease=token, record=forged), error, reason)

        # The same record as JSON text is refused for the same reasons; broken text is malformed.
        text = json.dumps(_forged(failed.record, "binding.generation", 7))
        _expect_refused(
            failed,
            ResolveHostRecovery(lease=token, record=text),
            FailedPrecondition,
            "generation_mismatch",
        )
        for broken in ('{"schema_version": "turnkeeper.host_recovery.v1", ', "[]", "null"):
            _expect_refused(
                failed,
                ResolveHostRecovery(lease=token, record=broken),
                InvalidArgument,
                "malformed_recovery_record",
            )

        # The genuine record under a stale fencing token, or after the lease expired.
        for stale in (
            LeaseToken(owner=token.owner, epoch=token.epoch - 1),
            LeaseToken(owner="ctl:elsewhere:1:1", epoch=token.epoch),
        ):
            _expect_refused(
                failed,
                ResolveHostRecovery(lease=stale, record=failed.record),
                Aborted,
                "stale_lease",
            )
        later = SessionService(
            failed.store, clock=lambda: failed.sessions.now() + timedelta(days=1)
        )
        _expect_refused(
            failed,
            ResolveHostRecovery(lease=token, record=failed.record),
            Aborted,
            "lease_expired",
            sessions=later,
        )

        state = failed.sessions.load(failed.session_id)
        assert state.recovery is not None
        assert state.recovery.status == "awaiting_resolution"
        assert state.counters.turns_recovered == 0
    finally:
        controller.release(failed.session_id)


def _recover_via_cli(failed: FailedTurn) -> dict[str, Any]:
    """``turnkeeper recover TURN --json`` in a subprocess: the genuine record, read back."""
    done = _cli(failed.root, "recover", failed.turn_id, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    resolved: dict[str, Any] = json.loads(done.stdout)
    assert resolved["session_id"] == failed.session_id
    return resolved


def _expect_cli_refused(failed: FailedTurn, turn_id: str, code: ErrorCode, reason: str) -> None:
    before = failed.digest()
    refused = _cli(failed.root, "recover", turn_id, "--json")
    assert refused.returncode == EXIT_CODES[code], refused.stdout + refused.stderr
    assert json.loads(refused.stdout)["error"]["reason"] == reason
    # Nothing written: not the resolution, and not the lease the command would take.
    assert failed.digest() == before


def _runs(failed: FailedTurn) -> list[tuple[str, int, str]]:
    lines = (failed.host_state / "runs.jsonl").read_text().splitlines()
    return [(r["turn_id"], r["attempt"], r["kind"]) for r in map(json.loads, lines)]


def test_genuine_record_resolves_the_failed_turn_exactly_once(failed_turn: FailedTurn) -> None:
    failed = failed_turn
    assert _runs(failed) == [(failed.turn_id, 1, "start")]
    _expect_cli_refused(failed, "turn-ffffffffffffffff", ErrorCode.NOT_FOUND, "turn_not_found")

    resolved = _recover_via_cli(failed)
    assert resolved["recovery"]["status"] == "resolved"
    assert resolved["recovery"]["turn_id"] == failed.turn_id
    nxt = resolved["next"]
    assert (nxt["kind"], nxt["attempt"], nxt["todo_id"]) == ("continuation", 2, "t1")
    assert nxt["resume_host_session"] is True
    assert nxt["recovers_turn_id"] == failed.turn_id
    assert failed.turn_id in nxt["reconcile_note"]
    state = failed.sessions.load(failed.session_id)
    assert state.recovery is not None and state.recovery.status == "resolved"
    assert state.lease.owner is None  # the command released the lease it took

    # A second resolution of the same turn is refused and writes nothing.
    _expect_cli_refused(
        failed, failed.turn_id, ErrorCode.FAILED_PRECONDITION, "turn_not_recoverable"
    )
    # So is the genuine record submitted once more under a live lease.
    controller = Controller(failed.store)
    token = controller.acquire(failed.session_id)
    try:
        _expect_refused(
            failed,
            ResolveHostRecovery(lease=token, record=failed.record),
            FailedPrecondition,
            "turn_not_recoverable",
        )
    finally:
        controller.release(failed.session_id)
    assert _runs(failed) == [(failed.turn_id, 1, "start")]  # resolving ran no host


def test_after_resolution_a_continuation_resumes_the_host_session_and_completes_the_goal(
    failed_turn: FailedTurn,
) -> None:
    failed = failed_turn
    _recover_via_cli(failed)
    summary = Controller(failed.store).run([failed.session_id])
    assert (summary.turns, summary.failed_turns) == (1, 0)
    assert summary.stops == {failed.session_id: "goal_terminal"}
    assert GoalService(failed.store).load("g").is_closed

    state = failed.sessions.load(failed.session_id)
    assert state.host_session_handle == failed.handle
    assert state.recovery is None
    counters = state.counters
    assert (counters.turns_failed, counters.turns_completed, counters.turns_recovered) == (1, 1, 1)
    assert state.last_recovered is not None
    assert state.last_recovered.turn_id == failed.turn_id
    continuation_id = state.last_recovered.continued_by
    assert state.last_completed is not None
    assert state.last_completed.turn_id == continuation_id
    assert state.last_completed.attempt == 2

    events = _session_events(failed)
    accepted = [e.envelope for e in events if isinstance(e, TurnAccepted)]
    assert [env.turn_id for env in accepted] == [failed.turn_id, continuation_id]
    cont = accepted[1]
    assert (cont.kind, cont.attempt, cont.todo_id) == ("continuation", 2, "t1")
    assert cont.resume_host_session is True
    assert cont.recovers_turn_id == failed.turn_id
    bound = [
        host_event.data
        for e in events
        if isinstance(e, HostEventsJournaled) and e.turn_id == continuation_id
        for host_event in e.events
        if host_event.kind == "session.bound"
    ]
    assert bound == [
        {
            "handle": failed.handle,
            "resumed": True,
            "previous_turns": 1,
            "interrupted_turns": [failed.turn_id],
        }
    ]

    # The failed turn's host step never ran again: one run each, in order.
    assert _runs(failed) == [(failed.turn_id, 1, "start"), (continuation_id, 2, "continuation")]
    transcript = failed.host_state / "sessions" / f"{failed.handle}.jsonl"
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert [r["turn_id"] for r in records if r["type"] == "turn.started"] == [
        failed.turn_id,
        continuation_id,
    ]
    assert [r["turn_id"] for r in records if r["type"] == "turn.completed"] == [continuation_id]
    assert (Path(state.workspace) / "a.txt").read_text() == "A\n"
    assert failed.store.verify(kernel_folder()).ok


def test_recovering_a_continued_or_completed_turn_is_refused_and_writes_nothing(
    failed_turn: FailedTurn,
) -> None:
    failed = failed_turn
    _recover_via_cli(failed)
    Controller(failed.store).run([failed.session_id])
    state = failed.sessions.load(failed.session_id)
    assert state.last_completed is not None
    completed_turn = state.last_completed.turn_id
    for turn_id in (failed.turn_id, completed_turn):
        _expect_cli_refused(failed, turn_id, ErrorCode.FAILED_PRECONDITION, "turn_not_recoverable")
    # A session id is not a turn id.
    _expect_cli_refused(failed, failed.session_id, ErrorCode.NOT_FOUND, "turn_not_found")


def test_a_host_that_cannot_be_loaded_fails_its_turn_under_the_bounded_policy(
    tmp_path: Path,
) -> None:
    """An unknown host kind (say, a plugin uninstalled since the session was created)
    fails the accepted turn with a spawn receipt and a valid recovery record; the
    bounded policy retries it and then marks the session crashed. Nothing is left in
    flight to be lost, and re-accepted, on every restart."""
    workspace = _git_workspace(tmp_path / "ws")
    store = open_store(tmp_path / "tk.db")
    try:
        goals = GoalService(store)
        sessions = SessionService(store)
        goals.create(CreateGoal(goal_id="g", title="an unloadable host"))
        goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t1", title=TODO_TITLE)))
        sid = sessions.create("g", workspace, "no-such-host-kind").session_id
        policy = RecoveryPolicy(max_attempts=2, backoff_base_seconds=0, backoff_max_seconds=0)
        summary = Controller(store, ControllerConfig(policy=policy)).run([sid])
        assert (summary.turns, summary.failed_turns) == (2, 2)
        assert summary.stops == {sid: "crashed"}

        state = sessions.load(sid)
        assert state.status == "crashed"
        assert state.in_flight is None
        assert (state.counters.turns_failed, state.counters.turns_recovered) == (2, 1)
        envelopes = [e.envelope for e in _stream_events(store, sid) if isinstance(e, TurnAccepted)]
        assert [(e.kind, e.attempt) for e in envelopes] == [("start", 1), ("retry", 2)]
        for envelope in envelopes:
            receipt = sessions.receipt_event(sid, envelope.turn_id).receipt
            assert isinstance(receipt, ReceiptFailure)
            assert receipt.error_kind == "spawn"
            assert "unknown_host_kind" in receipt.message
            assert receipt.host_recovery.binding.turn_id == envelope.turn_id
        assert store.verify(kernel_folder()).ok
    finally:
        store.close()
