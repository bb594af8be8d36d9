"""The scripted agent: a real subprocess with files, sessions, faults and pauses."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.conftest import MakeRequest, gone, wait_until
from turnkeeper.errors import InvalidArgument
from turnkeeper.hosts import (
    HostErrorKind,
    HostOutcome,
    HostRun,
    TurnKind,
    load_host,
    process_tree,
)

EVIDENCE = [{"key": "tests", "command": "pytest -q"}]


def scripted(tmp_path: Path, turns: list[dict[str, Any]], **config: Any) -> dict[str, Any]:
    return {"state_dir": str(tmp_path / "host-state"), "script": {"turns": turns}, **config}


def start(config: dict[str, Any], make_request: MakeRequest, **request: Any) -> HostRun:
    return load_host("scripted", config).start(make_request(**request))


def runs(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "host-state" / "runs.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_edits_files_binds_a_handle_and_resumes(
    tmp_path: Path, workspace: Path, make_request: MakeRequest
) -> None:
    config = scripted(
        tmp_path,
        [
            {
                "match": {"todo": "docs", "kind": "start"},
                "steps": [
                    {"op": "write", "path": "docs/a.md", "content": "one\n"},
                    {"op": "append", "path": "docs/a.md", "content": "two\n"},
                    {"op": "shell", "command": "wc -l < docs/a.md"},
                    {"op": "message", "text": "wrote docs"},
                    {"op": "emit", "kind": "usage", "data": {"tokens": 5}},
                ],
                "result": {"todo_done": True, "evidence": EVIDENCE},
            },
            {"match": {"kind": "continuation"}, "steps": [{"op": "message", "text": "again"}]},
        ],
    )
    first = start(config, make_request, todo_title="docs")
    outcome = first.wait(20)
    assert outcome.succeeded, outcome
    assert (workspace / "docs/a.md").read_text() == "one\ntwo\n"
    kinds = [e.kind for e in first.events(0)]
    assert kinds == [
        "session.bound",
        *["file.changed", "file.changed", "command", "message", "usage"],
        "result",
    ]
    command = next(e for e in first.events(0) if e.kind == "command")
    assert command.data["exit_code"] == 0
    assert str(command.data["output"]).strip() == "2"
    handle = outcome.host_session_handle
    assert handle is not None
    assert handle.startswith("scripted-")
    assert outcome.result["todo_done"] is True
    assert outcome.result["evidence"] == EVIDENCE
    assert outcome.result["files_changed"] == ["docs/a.md", "docs/a.md"]

    second = start(
        config, make_request, kind=TurnKind.CONTINUATION, host_session_handle=handle, attempt=1
    )
    resumed = second.wait(20)
    assert resumed.succeeded, resumed
    assert resumed.host_session_handle == handle
    bound = next(second.events(0))
    assert bound.data == {
        "handle": handle,
        "resumed": True,
        "previous_turns": 1,
        "interrupted_turns": [],
    }
    assert [r["kind"] for r in runs(tmp_path)] == ["start", "continuation"]
    session = tmp_path / "host-state" / "sessions" / f"{handle}.jsonl"
    types = [json.loads(line)["type"] for line in session.read_text().splitlines()]
    assert types == ["session.created", "turn.started", "turn.completed"] * 1 + [
        "turn.started",
        "turn.completed",
    ]


def test_truncated_or_missing_session_is_a_protocol_failure(
    tmp_path: Path, make_request: MakeRequest
) -> None:
    config = scripted(tmp_path, [{"steps": []}], handle="scripted-fixed")
    assert start(config, make_request).wait(20).succeeded
    session = tmp_path / "host-state" / "sessions" / "scripted-fixed.jsonl"
    raw = session.read_bytes()
    session.write_bytes(raw[:-7])  # what a crash mid-write leaves

    resume = {"kind": TurnKind.CONTINUATION, "host_session_handle": "scripted-fixed"}
    outcome = start(config, make_request, **resume).wait(20)
    assert outcome.error_kind is HostErrorKind.PROTOCOL
    assert "truncated" in outcome.message

    resume["host_session_handle"] = "scripted-unknown"
    outcome = start(config, make_request, **resume).wait(20)
    assert outcome.error_kind is HostErrorKind.PROTOCOL
    assert "not found" in outcome.message
    assert len(runs(tmp_path)) == 3  # every run is counted, failed ones too


def test_resume_reports_an_interrupted_turn(tmp_path: Path, make_request: MakeRequest) -> None:
    config = scripted(
        tmp_path,
        [
            {"match": {"kind": "start"}, "steps": [{"op": "kill_self"}]},
            {"match": {"kind": "continuation"}, "steps": []},
        ],
    )
    lost = make_request()
    first = load_host("scripted", config).start(lost)
    outcome = first.wait(20)
    assert outcome.error_kind is HostErrorKind.SIGNAL
    assert outcome.signal == signal.SIGKILL
    assert "died" in outcome.message  # not "killed by the control plane"
    handle = outcome.host_session_handle  # bound before it died
    assert handle is not None

    second = start(
        config, make_request, kind=TurnKind.CONTINUATION, host_session_handle=handle, attempt=2
    )
    assert second.wait(20).succeeded
    assert next(second.events(0)).data["interrupted_turns"] == [lost.turn_id]


def test_script_is_keyed_by_todo_attempt_and_kind(
    tmp_path: Path, make_request: MakeRequest
) -> None:
    config = scripted(
        tmp_path,
        [
            {"match": {"todo": "t", "attempt": 1}, "steps": [], "result": {"which": "first"}},
            {"match": {"todo": "t", "kind": "retry"}, "steps": [], "result": {"which": "retry"}},
        ],
    )
    assert start(config, make_request, todo_title="t").wait(20).result["which"] == "first"
    retry = start(config, make_request, todo_title="t", attempt=2, kind=TurnKind.RETRY)
    assert retry.wait(20).result["which"] == "retry"
    unmatched = start(config, make_request, todo_title="other").wait(20)
    assert unmatched.error_kind is HostErrorKind.EXIT_CODE
    assert unmatched.exit_code == 2
    assert "no scripted turn matches" in unmatched.message


FaultCase = tuple[dict[str, Any], HostErrorKind, int | None, int | None]


@pytest.mark.parametrize(
    "case",
    [
        ({"op": "crash", "exit_code": 3}, HostErrorKind.EXIT_CODE, 3, None),
        ({"op": "segfault"}, HostErrorKind.SIGNAL, None, signal.SIGSEGV),
        ({"op": "kill_self"}, HostErrorKind.SIGNAL, None, signal.SIGKILL),
        ({"op": "garbage"}, HostErrorKind.PROTOCOL, 0, None),
        ({"op": "hang"}, HostErrorKind.TIMEOUT, None, signal.SIGKILL),
    ],
    ids=["crash", "segfault", "kill_self", "garbage", "hang"],
)
def test_fault_injection(
    tmp_path: Path, workspace: Path, make_request: MakeRequest, case: FaultCase
) -> None:
    step, error_kind, exit_code, sig = case
    steps = [{"op": "write", "path": "before.txt"}, step, {"op": "write", "path": "after.txt"}]
    config = scripted(tmp_path, [{"steps": steps}])
    outcome: HostOutcome = start(config, make_request, timeout_seconds=1.5).wait(20)
    assert (outcome.error_kind, outcome.exit_code, outcome.signal) == (error_kind, exit_code, sig)
    assert (workspace / "before.txt").exists()
    # Only garbage lets the agent go on; every other fault stops it at that step.
    assert (workspace / "after.txt").exists() == (step["op"] == "garbage")
    assert not list(workspace.glob("core*"))


def test_pause_point_lets_a_test_continue_the_agent(
    tmp_path: Path, workspace: Path, make_request: MakeRequest
) -> None:
    steps = [{"op": "checkpoint", "name": "mid", "pause": True}, {"op": "write", "path": "x"}]
    r = start(scripted(tmp_path, [{"steps": steps}]), make_request)
    pause = workspace / ".turnkeeper-pause" / "mid"
    wait_until(pause.exists, what="pause file")
    assert int(pause.read_text()) == r.identity.pid
    assert not (workspace / "x").exists()
    pause.unlink()
    assert r.wait(20).succeeded
    assert (workspace / "x").exists()
    assert [e.kind for e in r.events(0)][:2] == ["session.bound", "checkpoint"]


def test_sigkilled_host_leaves_a_setsid_child_that_kill_turn_processes_ends(
    tmp_path: Path, workspace: Path, make_request: MakeRequest
) -> None:
    steps = [
        {"op": "shell", "command": "exec sleep 600", "detach": True},
        {"op": "checkpoint", "name": "here", "pause": True},
    ]
    # kill_stragglers off: show what an agent CLI's SIGKILL leaves behind.
    config = scripted(tmp_path, [{"steps": steps}], kill_stragglers=False)
    request = make_request()
    r = load_host("scripted", config).start(request)
    wait_until((workspace / ".turnkeeper-pause" / "here").exists, what="pause")
    sleep_pid = next(e for e in r.events(0) if e.kind == "command").data["pid"]
    assert isinstance(sleep_pid, int)
    sleep_start = process_tree.read_stat(sleep_pid).start_time  # type: ignore[union-attr]

    os.kill(r.identity.pid, signal.SIGKILL)  # the host, which this test started
    assert r.wait(20).signal == signal.SIGKILL
    assert not gone(sleep_pid, sleep_start)  # the setsid child outlived its agent
    assert process_tree.find_marked_processes(request.turn_id) == [sleep_pid]

    report = process_tree.kill_turn_processes(request.turn_id, r.identity)
    assert [(k.pid, k.reason) for k in report.killed] == [(sleep_pid, "marker")]
    assert gone(sleep_pid, sleep_start)
    assert process_tree.find_marked_processes(request.turn_id) == []


def test_invalid_script_is_rejected_at_load() -> None:
    with pytest.raises(InvalidArgument):
        load_host("scripted", {"script": {"turns": [{"steps": [{"op": "crash", "exit_code": 0}]}]}})
