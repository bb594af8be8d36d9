"""The subprocess host on real commands: events, typed outcomes, process trees."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.conftest import MakeRequest, gone, wait_until
from turnkeeper.errors import InvalidArgument, Unavailable
from turnkeeper.hosts import HostErrorKind, HostSpawnFailed, HostStatus, process_tree
from turnkeeper.hosts.subprocess_host import SubprocessHost, SubprocessRun


def jsonl_emitter(lines: list[Any], delay: float = 0.0, exit_code: int = 0) -> list[str]:
    """A command printing each item (a str as is, anything else as JSON) on its own line."""
    code = (
        "import json, sys, time\n"
        f"for item in json.loads({json.dumps(json.dumps(lines))}):\n"
        "    print(item if isinstance(item, str) else json.dumps(item), flush=True)\n"
        f"    time.sleep({delay})\n"
        f"sys.exit({exit_code})\n"
    )
    return [sys.executable, "-c", code]


def run(make_request: MakeRequest, config: dict[str, Any], **request: Any) -> SubprocessRun:
    return SubprocessHost(config).start(make_request(**request))


def test_text_lines_become_output_events(make_request: MakeRequest) -> None:
    r = run(make_request, {"command": ["printf", "a\\nb\\nc"]})
    outcome = r.wait(10)
    assert outcome.status is HostStatus.SUCCEEDED
    assert outcome.exit_code == 0
    events = list(r.events(0))
    assert [(e.seq, e.kind, e.data["text"]) for e in events] == [
        (1, "output", "a"),
        (2, "output", "b"),
        (3, "output", "c"),  # a last line without newline still counts
    ]
    assert outcome.last_seq == 3


def test_jsonl_events_are_sequenced_and_rereadable_from_after_seq(
    make_request: MakeRequest,
) -> None:
    lines = [{"kind": "message", "data": {"i": i}} for i in range(5)]
    lines.append({"kind": "result", "data": {"summary": "done", "todo_done": True}})
    r = run(make_request, {"command": jsonl_emitter(lines, delay=0.05), "event_format": "jsonl"})
    seen = []
    for event in r.events(0):  # follow while running, then drop the consumer
        seen.append(event.seq)
        if event.seq == 2:
            break
    assert seen == [1, 2]
    # Reattach from the last acknowledged seq: nothing lost, nothing repeated.
    rest = [e.seq for e in r.events(after_seq=2)]
    assert rest == [3, 4, 5, 6]
    outcome = r.wait(10)
    assert outcome.succeeded
    assert outcome.result == {"summary": "done", "todo_done": True}
    assert outcome.last_seq == 6
    assert [e.data.get("i") for e in r.events(0, follow=False)][:5] == [0, 1, 2, 3, 4]
    assert list(r.events(6)) == []


def test_foreign_jsonl_maps_type_and_binds_handle(make_request: MakeRequest) -> None:
    lines = [
        {"type": "thread.started", "thread_id": "th-123"},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "hi"}},
        {"type": "turn.completed", "usage": {"input_tokens": 3}},
    ]
    config = {
        "command": jsonl_emitter(lines),
        "event_format": "jsonl",
        "handle_from": [{"kind": "thread.started", "field": "thread_id"}],
        "result_kind": "turn.completed",
    }
    r = run(make_request, config)
    outcome = r.wait(10)
    assert outcome.host_session_handle == "th-123"
    assert outcome.result["usage"] == {"input_tokens": 3}
    assert [e.kind for e in r.events(0)] == ["thread.started", "item.completed", "turn.completed"]


def test_nonzero_exit_is_typed_and_keeps_stderr(make_request: MakeRequest) -> None:
    r = run(make_request, {"command": ["sh", "-c", "echo boom >&2; exit 3"]})
    outcome = r.wait(10)
    assert outcome.status is HostStatus.FAILED
    assert outcome.error_kind is HostErrorKind.EXIT_CODE
    assert outcome.exit_code == 3
    assert outcome.signal is None
    assert outcome.stderr_tail == "boom\n"


def test_stderr_tail_is_bounded(make_request: MakeRequest) -> None:
    cmd = ["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x >&2; echo END >&2"]
    outcome = run(make_request, {"command": cmd, "stderr_tail_bytes": 100}).wait(10)
    assert len(outcome.stderr_tail) == 100
    assert outcome.stderr_tail.endswith("END\n")


def test_death_by_signal_is_typed(make_request: MakeRequest) -> None:
    outcome = run(make_request, {"command": ["sh", "-c", "kill -TERM $$"]}).wait(10)
    assert outcome.error_kind is HostErrorKind.SIGNAL
    assert outcome.signal == signal.SIGTERM
    assert outcome.exit_code is None
    assert "SIGTERM" in outcome.message


def test_timeout_kills_the_whole_tree(make_request: MakeRequest) -> None:
    cmd = ["sh", "-c", "setsid sleep 600 </dev/null >/dev/null 2>&1 & sleep 600"]
    request = make_request(timeout_seconds=1.0)
    r = SubprocessHost({"command": cmd}).start(request)
    wait_until(lambda: len(process_tree.find_marked_processes(request.turn_id)) == 3)
    outcome = r.wait(10)
    assert outcome.error_kind is HostErrorKind.TIMEOUT
    assert outcome.signal == signal.SIGKILL
    assert process_tree.find_marked_processes(request.turn_id) == []
    assert not r.is_alive()


def test_garbage_in_jsonl_is_a_protocol_failure(make_request: MakeRequest) -> None:
    lines = [{"kind": "message", "data": {}}, "not json {", [1, 2], {"no": "kind"}]
    r = run(make_request, {"command": jsonl_emitter(lines), "event_format": "jsonl"})
    outcome = r.wait(10)
    assert outcome.error_kind is HostErrorKind.PROTOCOL
    assert outcome.exit_code == 0
    assert "3 malformed" in outcome.message
    errors = [e for e in r.events(0) if e.kind == "error"]
    assert [e.data["error_kind"] for e in errors] == ["protocol"] * 3
    assert errors[0].data["line"] == "not json {"


def test_garbage_can_be_tolerated(make_request: MakeRequest) -> None:
    config = {
        "command": jsonl_emitter(["garbage", {"kind": "result", "data": {"ok": 1}}]),
        "event_format": "jsonl",
        "tolerate_malformed": True,
    }
    outcome = run(make_request, config).wait(10)
    assert outcome.succeeded
    assert outcome.result == {"ok": 1}


def test_fatal_error_event_sets_the_error_kind(make_request: MakeRequest) -> None:
    lines = [{"kind": "error", "data": {"fatal": True, "error_kind": "protocol", "message": "m"}}]
    config = {"command": jsonl_emitter(lines, exit_code=1), "event_format": "jsonl"}
    outcome = run(make_request, config).wait(10)
    assert (outcome.error_kind, outcome.message, outcome.exit_code) == (
        HostErrorKind.PROTOCOL,
        "m",
        1,
    )


def test_spawn_failures_raise_with_a_spawn_outcome(make_request: MakeRequest) -> None:
    with pytest.raises(HostSpawnFailed) as err:
        run(make_request, {"command": ["/nonexistent/agent-cli"]})
    assert err.value.outcome.error_kind is HostErrorKind.SPAWN
    assert err.value.code.value == "FAILED_PRECONDITION"
    with pytest.raises(HostSpawnFailed, match="/nonexistent-ws is not a directory"):
        run(make_request, {"command": ["true"]}, workspace="/nonexistent-ws")


def test_a_workspace_that_is_a_file_is_a_spawn_failure(
    make_request: MakeRequest, tmp_path: Path
) -> None:
    # "<file>/." does not resolve (ENOTDIR): the one access() that passes every
    # directory that may be entered fails, and the failure names the reason.
    afile = tmp_path / "a-file"
    afile.write_text("")
    afile.chmod(0o755)
    with pytest.raises(HostSpawnFailed, match=f"{afile} is not a directory") as err:
        run(make_request, {"command": ["true"]}, workspace=str(afile))
    assert err.value.outcome.error_kind is HostErrorKind.SPAWN


def test_instructions_placeholders_stdin_and_env(make_request: MakeRequest) -> None:
    script = 'echo "$1"; cat; echo; echo "$TURNKEEPER_TURN_ID $TURNKEEPER_SESSION_ID"; echo "$X"'
    config = {
        "command": ["sh", "-c", script, "sh", "{instructions}|{attempt}|{json: {}}"],
        "stdin": "instructions",
        "env": {"X": "from-config"},
    }
    request = make_request(instructions="fix it", attempt=2, env={"TURNKEEPER_TURN_ID": "forged"})
    r = SubprocessHost(config).start(request)
    assert r.wait(10).succeeded
    texts = [e.data["text"] for e in r.events(0)]
    assert texts == [
        "fix it|2|{json: {}}",
        "fix it",
        f"{request.turn_id} sess-1",  # the marker cannot be overridden by request env
        "from-config",
    ]


def test_resume_command_is_used_with_a_handle(make_request: MakeRequest) -> None:
    config = {"command": ["echo", "new"], "resume_command": ["echo", "resume", "{handle}"]}
    r = run(make_request, config, host_session_handle="th-9")
    outcome = r.wait(10)
    assert [e.data["text"] for e in r.events(0)] == ["resume th-9"]
    assert outcome.host_session_handle == "th-9"  # resumed handle is reported back


def test_kill_tree_is_typed_and_idempotent(make_request: MakeRequest) -> None:
    r = run(make_request, {"command": ["sh", "-c", "sleep 600 & sleep 600"]})
    wait_until(lambda: len(process_tree.list_descendants(r.identity.pid)) == 2)
    with pytest.raises(Unavailable):
        r.wait(0.05)
    assert r.is_alive()
    report = r.kill_tree()
    assert report.complete
    assert len(report.killed) == 3
    outcome = r.wait(10)
    assert outcome.error_kind is HostErrorKind.SIGNAL
    assert "killed by the control plane" in outcome.message
    assert r.kill_tree().killed == []
    assert not r.is_alive()
    assert all(gone(k.pid, k.start_time) for k in report.killed)


def test_stragglers_are_ended_after_the_host_exits(make_request: MakeRequest) -> None:
    cmd = ["sh", "-c", "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo started"]
    request = make_request()
    outcome = SubprocessHost({"command": cmd}).start(request).wait(10)
    assert outcome.succeeded
    assert len(outcome.stragglers_killed) == 1
    assert process_tree.find_marked_processes(request.turn_id) == []


def test_a_child_holding_stdout_does_not_hang_the_turn(make_request: MakeRequest) -> None:
    # The detached sleep inherits our stdout pipe: EOF would never come.
    cmd = ["sh", "-c", "setsid sleep 600 & echo hi"]
    config = {"command": cmd, "kill_stragglers": False, "drain_seconds": 0.3}
    request = make_request()
    started = time.monotonic()
    outcome = SubprocessHost(config).start(request).wait(10)
    assert time.monotonic() - started < 5
    assert outcome.succeeded
    assert outcome.stragglers_killed == []
    assert len(process_tree.find_marked_processes(request.turn_id)) == 1  # left, as configured


def test_invalid_config_is_invalid_argument(make_request: MakeRequest) -> None:
    with pytest.raises(InvalidArgument):
        SubprocessHost({})
    with pytest.raises(InvalidArgument):
        SubprocessHost({"command": ["true"], "typo": 1})
    with pytest.raises(InvalidArgument):
        run(make_request, {"command": ["true"]}, host_config={"event_format": "xml"})


def test_stdin_request_gets_the_request_and_the_validated_config(
    make_request: MakeRequest,
) -> None:
    # Only this stdin mode is handed the payload: it must still carry both halves.
    code = (
        "import json, sys; p = json.load(sys.stdin); "
        "print(p['request']['turn_id'], p['config']['stdin'])"
    )
    request = make_request()
    r = SubprocessHost({"command": [sys.executable, "-c", code], "stdin": "request"}).start(request)
    assert r.wait(10).succeeded
    assert [e.data["text"] for e in r.events(0)] == [f"{request.turn_id} request"]


def test_a_requests_host_config_still_overrides_the_loaded_one(make_request: MakeRequest) -> None:
    # A host validates its own config once; a request's layer is validated on top of it.
    host = SubprocessHost({"command": ["echo", '{"kind": "note", "data": {}}']})
    plain = host.start(make_request())
    assert plain.wait(10).succeeded
    assert [e.kind for e in plain.events(0)] == ["output"]
    as_jsonl = host.start(make_request(host_config={"event_format": "jsonl"}))
    assert as_jsonl.wait(10).succeeded
    assert [e.kind for e in as_jsonl.events(0)] == ["note"]
