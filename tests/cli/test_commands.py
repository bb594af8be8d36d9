"""The CLI end to end: happy paths with --json, and every kind of bad input.

Each bad-input test checks the typed error (exit code and reason) and that the
durable rows are byte-for-byte what they were before the command.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.cli.conftest import Invoke, durable_digest, run_json, with_json
from turnkeeper.errors import EXIT_CODES, ErrorCode


def _goal_with_todo(tk: Invoke, *todo_args: str) -> tuple[str, str]:
    goal = run_json(tk, "goal", "add", "Ship it", "--id", "g1", "-c", "tests pass")
    assert goal["head_seq"] == 1
    todo = run_json(tk, "todo", "add", "g1", "Write code", "--id", "t1", *todo_args)
    assert todo["events"][0]["type"] == "todo_added"
    return "g1", "t1"


def _error(tk: Invoke, *args: str, code: ErrorCode) -> dict[str, object]:
    result = tk(*with_json(args))
    assert result.exit_code == EXIT_CODES[code], result.output
    error = json.loads(result.stdout)["error"]
    assert error["code"] == code.value
    return dict(error)


def test_init_creates_state_dir_and_ignores_it(project: Path, tk: Invoke) -> None:
    assert (project / ".turnkeeper" / "turnkeeper.db").is_file()
    assert ".turnkeeper/" in (project / ".gitignore").read_text().splitlines()
    again = run_json(tk, "init", str(project))
    assert again["created"] is False
    assert (project / ".gitignore").read_text().count(".turnkeeper/") == 1


def test_goal_lifecycle_through_the_cli(project: Path, tk: Invoke) -> None:
    _goal_with_todo(tk, "--requires-evidence", "unit")
    claim = run_json(tk, "todo", "claim", "t1")
    assert claim == claim | {"owner": "tester", "epoch": 1}
    ev = run_json(tk, "evidence", "record", "g1", "--key", "unit", "--", sys.executable, "-c", "0")
    evidence = ev["evidence"]
    assert evidence["exit_code"] == 0 and evidence["key"] == "unit"
    run_json(tk, "todo", "done", "t1", "--epoch", "1", "--evidence", evidence["id"])
    shown = run_json(tk, "goal", "show", "g1")
    assert shown["state"]["todos"]["t1"]["status"] == "done"
    assert [r["seq"] for r in shown["history"]] == list(range(1, len(shown["history"]) + 1))
    proposal = {"kind": "satisfy_criterion", "criterion_id": "c1", "evidence_ids": [evidence["id"]]}
    run_json(tk, "propose", "g1", "--proposal", json.dumps(proposal))
    audit = run_json(tk, "audit", "g1")
    # All todos done and the criterion met, yet the exhausted frontier raised a
    # replan obligation that only an observable delta may discharge.
    assert audit["counters"]["replan_obligations"] == 1
    obligation = shown_obligation(tk)
    note = {"kind": "note", "author": "me", "text": "re-assessed", "discharges": [obligation]}
    _error(tk, "propose", "g1", "--proposal", json.dumps(note), code=ErrorCode.FAILED_PRECONDITION)
    no_follow = {
        "kind": "record_no_follow_up",
        "reason": "acceptance_met",
        "summary": "done",
        "discharges": [obligation],
    }
    run_json(tk, "propose", "g1", "--proposal", json.dumps(no_follow))
    run_json(tk, "goal", "close", "g1", "--summary", "shipped")
    status = run_json(tk, "status")
    assert status["goals"][0]["status"] == "closed"
    verify = run_json(tk, "verify")
    assert verify["ok"] is True and verify["events_checked"] >= 8


def shown_obligation(tk: Invoke) -> str:
    state = run_json(tk, "goal", "show", "g1")["state"]
    open_ids = [k for k, o in state["obligations"].items() if o["status"] == "open"]
    assert len(open_ids) == 1
    return str(open_ids[0])


def test_gate_and_monitor_commands(tk: Invoke) -> None:
    _goal_with_todo(tk)
    gate_id = run_json(tk, "gate", "open", "g1", "Approve release", "--scope", "t1")["gate_id"]
    blocked = _error(tk, "todo", "claim", "t1", code=ErrorCode.FAILED_PRECONDITION)
    assert blocked["reason"] == "gate_blocks"
    run_json(
        tk,
        "gate",
        "resolve",
        gate_id,
        "--decision",
        "approved",
        "--by",
        "alice",
        "--payload",
        '{"ticket": 42}',
    )
    assert run_json(tk, "todo", "claim", "t1")["epoch"] == 1
    mon = run_json(tk, "monitor", "add", "g1", "ci:main", "--cadence", "60")["monitor_id"]
    first = run_json(tk, "monitor", "readback", mon, "--value", '"green"')
    second = run_json(tk, "monitor", "readback", mon, "--value", '"green"')
    assert first["monitor"]["no_change_streak"] == 0
    assert second["monitor"]["no_change_streak"] == 1


def test_unknown_ids_are_not_found_and_write_nothing(project: Path, tk: Invoke) -> None:
    _goal_with_todo(tk)
    before = durable_digest(project)
    for args in (
        ("goal", "show", "nope"),
        ("goal", "close", "nope", "--summary", "x"),
        ("todo", "add", "nope", "x"),
        ("todo", "claim", "nope"),
        ("todo", "done", "nope", "--epoch", "1"),
        ("gate", "resolve", "nope", "--decision", "ok", "--by", "me"),
        ("monitor", "readback", "nope", "--value", "1"),
        ("audit", "nope"),
    ):
        _error(tk, *args, code=ErrorCode.NOT_FOUND)
    # A todo id is not a gate id: the kind is checked too.
    _error(tk, "gate", "resolve", "t1", "--decision", "ok", "--by", "me", code=ErrorCode.NOT_FOUND)
    assert durable_digest(project) == before


def test_closing_with_open_work_names_blockers(project: Path, tk: Invoke) -> None:
    _goal_with_todo(tk)
    before = durable_digest(project)
    error = _error(
        tk, "goal", "close", "g1", "--summary", "early", code=ErrorCode.FAILED_PRECONDITION
    )
    assert error["reason"] == "goal_not_terminal"
    kinds = {b["kind"] for b in error["details"]["blockers"]}  # type: ignore[index]
    assert {"open_todo", "acceptance_gap"} <= kinds
    assert durable_digest(project) == before


def test_done_without_required_evidence_is_refused(project: Path, tk: Invoke) -> None:
    _goal_with_todo(tk, "--requires-evidence", "unit")
    run_json(tk, "todo", "claim", "t1")
    # A failing command is recorded, and the record command exits 1 to say it failed.
    failing = run_json(
        tk,
        "evidence",
        "record",
        "g1",
        "--key",
        "unit",
        "--",
        sys.executable,
        "-c",
        "raise SystemExit(3)",
        expect=1,
    )
    assert failing["evidence"]["exit_code"] == 3
    before = durable_digest(project)
    missing = _error(tk, "todo", "done", "t1", "--epoch", "1", code=ErrorCode.FAILED_PRECONDITION)
    assert missing["reason"] == "evidence_missing"
    failed = _error(
        tk,
        "todo",
        "done",
        "t1",
        "--epoch",
        "1",
        "--evidence",
        failing["evidence"]["id"],
        code=ErrorCode.FAILED_PRECONDITION,
    )
    assert failed["reason"] == "evidence_failed"
    assert durable_digest(project) == before


def test_resolving_a_resolved_gate_is_refused(project: Path, tk: Invoke) -> None:
    _goal_with_todo(tk)
    gate_id = run_json(tk, "gate", "open", "g1", "Approve")["gate_id"]
    run_json(tk, "gate", "resolve", gate_id, "--decision", "approved", "--by", "alice")
    before = durable_digest(project)
    error = _error(
        tk,
        "gate",
        "resolve",
        gate_id,
        "--decision",
        "rejected",
        "--by",
        "bob",
        code=ErrorCode.FAILED_PRECONDITION,
    )
    assert error["reason"] == "gate_already_resolved"
    assert durable_digest(project) == before


def test_live_lease_and_stale_epoch_are_aborted(project: Path, tk: Invoke) -> None:
    _goal_with_todo(tk)
    run_json(tk, "todo", "claim", "t1", "--lease", "1")
    held = _error(tk, "todo", "claim", "t1", "--owner", "rival", code=ErrorCode.ABORTED)
    assert held["reason"] == "lease_held"
    time.sleep(1.2)  # let the one-second lease expire: a takeover needs a dead lease
    takeover = run_json(tk, "todo", "claim", "t1", "--owner", "rival")
    assert takeover["epoch"] == 2
    before = durable_digest(project)
    stale = _error(tk, "todo", "done", "t1", "--epoch", "1", code=ErrorCode.ABORTED)
    assert stale["reason"] == "stale_epoch"
    _error(tk, "todo", "renew", "t1", "--epoch", "1", code=ErrorCode.ABORTED)
    _error(tk, "todo", "release", "t1", "--epoch", "1", code=ErrorCode.ABORTED)
    assert durable_digest(project) == before


def test_malformed_json_input_is_invalid_argument(project: Path, tk: Invoke) -> None:
    _goal_with_todo(tk)
    gate_id = run_json(tk, "gate", "open", "g1", "Approve")["gate_id"]
    mon = run_json(tk, "monitor", "add", "g1", "ci", "--cadence", "60")["monitor_id"]
    before = durable_digest(project)
    bad = (
        ("gate", "resolve", gate_id, "--decision", "ok", "--by", "me", "--payload", "{not json"),
        ("gate", "resolve", gate_id, "--decision", "ok", "--by", "me", "--payload", "[1, 2]"),
        ("monitor", "readback", mon, "--value", '{"state": green}'),
        ("propose", "g1", "--proposal", "{"),
        ("propose", "g1", "--proposal", '{"kind": "no_such_proposal"}'),
        ("propose", "g1", "--proposal", '{"kind": "add_todo", "todo": {"title": 5}}'),
    )
    for args in bad:
        error = _error(tk, *args, code=ErrorCode.INVALID_ARGUMENT)
        assert error["reason"] in {"malformed_json", "malformed_proposal"}
    assert durable_digest(project) == before


def test_bad_values_are_invalid_argument(project: Path, tk: Invoke) -> None:
    _goal_with_todo(tk)
    before = durable_digest(project)
    _error(tk, "monitor", "add", "g1", "ci", "--cadence", "-5", code=ErrorCode.INVALID_ARGUMENT)
    _error(tk, "todo", "add", "g1", "   ", code=ErrorCode.INVALID_ARGUMENT)
    _error(tk, "evidence", "record", "g1", "--", "/no/such/binary", code=ErrorCode.INVALID_ARGUMENT)
    assert durable_digest(project) == before


def test_commands_outside_a_project_say_so(tmp_path: Path, monkeypatch: object) -> None:
    import pytest
    from typer.testing import CliRunner

    from turnkeeper.cli.main import app

    mp = pytest.MonkeyPatch()
    try:
        mp.chdir(tmp_path)
        mp.delenv("TURNKEEPER_DIR", raising=False)
        result = CliRunner().invoke(app, ["status", "--json"])
    finally:
        mp.undo()
    assert result.exit_code == EXIT_CODES[ErrorCode.FAILED_PRECONDITION]
    assert json.loads(result.stdout)["error"]["reason"] == "project_not_initialised"
