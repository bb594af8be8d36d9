"""One turn of each real CLI through its host: events, handles, results, typed failures.

The CLIs are the pinned real ones; the model is a fake server on 127.0.0.1 whose
scripted replies make the CLI run real shell commands in a real git worktree.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path

import pytest

from tests.agents.conftest import CLI_NAMES, MakeKit, MakeRequest, marked
from tests.agents.fakes import Malformed, Rule, Shell, Stall, Text
from turnkeeper.hosts import HostErrorKind, HostStatus, load_host
from turnkeeper.hosts.agent_cli import SessionArtifactError, check_session_file
from turnkeeper.hosts.claude import session_artifact as claude_artifact
from turnkeeper.hosts.codex import session_artifact as codex_artifact

pytestmark = pytest.mark.timeout(120)


def artifact(cli: str, config: dict[str, object], handle: str) -> Path | None:
    return codex_artifact(config, handle) if cli == "codex" else claude_artifact(config, handle)


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_a_turn_runs_real_commands_binds_the_session_and_a_resume_continues_it(
    cli: str, make_kit: MakeKit, make_request: MakeRequest, repo: Path
) -> None:
    kit = make_kit(
        cli,
        [
            Rule("todo t-a", [Shell("echo A > a.txt; exit 3"), Text("Wrote A. TODO DONE")]),
            Rule("todo t-b", [Shell("cat a.txt && echo B > b.txt"), Text("Wrote B.")]),
        ],
    )
    evidence = {"t-a": [{"key": "a-file", "command": "test -f a.txt"}]}
    config = kit.host_config(evidence=evidence, complete_todo="on_marker")
    host = load_host(cli, config)

    first = host.start(make_request())
    outcome = first.wait(90)
    events = list(first.events(0))
    assert outcome.status is HostStatus.SUCCEEDED, (outcome, events)
    assert (repo / "a.txt").read_text() == "A\n"
    handle = outcome.host_session_handle
    assert handle is not None
    kinds = [e.kind for e in events]
    assert kinds[0] == "session.bound"
    assert events[0].data["handle"] == handle
    done = next(e for e in events if e.kind == "command.completed")
    assert "echo A > a.txt" in str(done.data["command"])
    assert done.data["exit_code"] == 3
    assert any(e.kind == "message" and "Wrote A" in str(e.data["text"]) for e in events)
    assert "usage" in kinds
    assert kinds[-1] == "result"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))

    result = outcome.result
    assert result["summary"] == "Wrote A. TODO DONE"
    assert result["todo_done"] is True  # on_marker: the final message carries the marker
    assert result["evidence"] == [
        {"key": "a-file", "command": "test -f a.txt", "freshness_seconds": 3600}
    ]
    path = artifact(cli, config, handle)
    assert path is not None
    digest = result["host_artifact"]
    assert isinstance(digest, dict)
    assert digest["path"] == str(path)
    assert len(str(digest["sha256"])) == 64

    # A later turn resumes the same CLI session: the model sees the earlier history.
    second = host.start(
        make_request(
            instructions="Continue todo t-b: write B.",
            kind="continuation",
            host_session_handle=handle,
            todo_id="t-b",
            todo_title="write B",
        )
    )
    resumed = second.wait(90)
    assert resumed.status is HostStatus.SUCCEEDED, (resumed, list(second.events(0)))
    assert resumed.host_session_handle == handle
    assert (repo / "b.txt").read_text() == "B\n"
    assert resumed.result["todo_done"] is False  # no marker in "Wrote B."
    assert resumed.result["evidence"] == []  # none declared for t-b
    last = kit.server.model_requests()[-1]
    assert last.prompt is not None and "todo t-b" in last.prompt
    assert "todo t-a" in last.text()  # the resumed history
    resumed_digest = resumed.result["host_artifact"]
    assert isinstance(resumed_digest, dict)
    assert resumed_digest["sha256"] != digest["sha256"]


@pytest.mark.parametrize("cli", CLI_NAMES)
@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_damaged_session_file_fails_the_resume_as_protocol_naming_the_file(
    cli: str, damage: str, make_kit: MakeKit, make_request: MakeRequest
) -> None:
    kit = make_kit(cli, [Rule("todo t-a", [Text("Hello.")])])
    config = kit.host_config()
    host = load_host(cli, config)
    outcome = host.start(make_request()).wait(90)
    assert outcome.succeeded, outcome
    handle = outcome.host_session_handle
    assert handle is not None
    path = artifact(cli, config, handle)
    assert path is not None
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) - 7])  # cut inside the last line
    else:
        path.unlink()
    requests_before = len(kit.server.requests)

    run = host.start(make_request(kind="continuation", host_session_handle=handle))
    failed = run.wait(30)
    assert failed.status is HostStatus.FAILED
    assert failed.error_kind is HostErrorKind.PROTOCOL
    assert damage in failed.message
    assert f"{handle}.jsonl" in failed.message  # names the file
    if damage == "truncated":
        assert str(path) in failed.message
    assert failed.host_session_handle == handle
    assert len(kit.server.requests) == requests_before  # the CLI never ran
    assert [e.kind for e in run.events(0)] == ["error"]


# Appends half a JSON line to every session file the CLI can see: the CLI's own next
# write then lands after it, leaving a corrupt line inside its transcript. Claude Code
# writes its transcript from a queue it flushes now and then, so on a busy machine the
# file may not exist yet when the tool runs: wait for it (up to 20 s) first.
_SESSION_FILES = (
    'find "${CODEX_HOME:-/nonexistent}" "${CLAUDE_CONFIG_DIR:-/nonexistent}" '
    "-name '*.jsonl' 2>/dev/null"
)
CORRUPT = (
    f'for i in $(seq 200); do [ -n "$({_SESSION_FILES} | head -n 1)" ] && break; '
    "sleep 0.1; done; "
    f'{_SESSION_FILES} | while read -r f; do printf \'{{"cut\' >> "$f"; done'
)


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_a_session_file_corrupted_during_the_turn_fails_it_as_protocol_naming_the_file(
    cli: str, make_kit: MakeKit, make_request: MakeRequest
) -> None:
    kit = make_kit(cli, [Rule("todo t-a", [Shell(CORRUPT), Text("Done.")])])
    config = kit.host_config(sandbox="danger-full-access") if cli == "codex" else kit.host_config()
    host = load_host(cli, config)
    run = host.start(make_request())
    outcome = run.wait(90)
    handle = outcome.host_session_handle
    assert handle is not None
    path = artifact(cli, config, handle)
    assert path is not None
    # The set-up itself: the agent's tool did reach the session file.
    assert b'{"cut' in path.read_bytes(), f"the tool never corrupted {path}"
    assert outcome.status is HostStatus.FAILED, (outcome, list(run.events(0)))
    assert outcome.error_kind is HostErrorKind.PROTOCOL
    assert str(path) in outcome.message
    assert "corrupt or truncated" in outcome.message
    assert outcome.result["summary"] == "Done."  # what the agent said is kept
    # The digest function reports the same, and digests a good file.
    with pytest.raises(SessionArtifactError) as err:
        check_session_file(path, "after the turn")
    assert str(path) in err.value.message
    assert err.value.reason == "host_session_artifact"
    good = path.read_bytes().replace(b'{"cut', b"")
    path.write_bytes(good)
    digest = check_session_file(path, "repaired")
    assert digest.sha256 == hashlib.sha256(good).hexdigest()
    assert digest.size == len(good)


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_a_malformed_model_stream_is_a_typed_failure_not_a_hang(
    cli: str, make_kit: MakeKit, make_request: MakeRequest
) -> None:
    kit = make_kit(cli, [Rule("todo t-a", [Malformed()])])
    host = load_host(cli, kit.host_config())
    started = time.monotonic()
    run = host.start(make_request(timeout_seconds=60))
    outcome = run.wait(90)
    assert time.monotonic() - started < 30
    assert outcome.status is HostStatus.FAILED
    assert outcome.error_kind is HostErrorKind.EXIT_CODE
    assert outcome.exit_code == 1
    assert outcome.message.startswith(cli)
    assert "malformed" in outcome.message or "stream" in outcome.message, outcome.message
    errors = [e for e in run.events(0) if e.kind == "error"]
    assert errors and errors[-1].data["fatal"] is True
    assert "Traceback" not in outcome.stderr_tail


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_a_stalled_model_times_the_turn_out_and_leaves_nothing_running(
    cli: str, make_kit: MakeKit, make_request: MakeRequest
) -> None:
    kit = make_kit(cli, [Rule("todo t-a", [Shell("sleep 300 &"), Stall()])])
    host = load_host(cli, kit.host_config())
    request = make_request(timeout_seconds=5)
    run = host.start(request)
    assert kit.server.stalled.wait(60)
    outcome = run.wait(60)
    assert outcome.status is HostStatus.FAILED
    assert outcome.error_kind is HostErrorKind.TIMEOUT
    assert marked("TURNKEEPER_TURN_ID", request.turn_id) == {}
    kit.server.release()


def test_events_are_journal_sized(make_kit: MakeKit, make_request: MakeRequest) -> None:
    kit = make_kit("codex", [Rule("todo t-a", [Shell("seq 1 20000"), Text("ok")])])
    host = load_host("codex", kit.host_config(max_output_chars=200))
    run = host.start(make_request())
    outcome = run.wait(90)
    assert outcome.succeeded, outcome
    done = next(e for e in run.events(0) if e.kind == "command.completed")
    output = str(done.data["output"])
    assert len(output) <= 201
    assert output.rstrip().endswith("20000")
    assert len(json.dumps(done.data)) < 1000


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_the_default_permissions_confine_the_agent(
    cli: str, make_kit: MakeKit, make_request: MakeRequest, repo: Path
) -> None:
    # Outside the worktree and outside /tmp (which Codex's sandbox leaves writable).
    probe = Path("/var/tmp") / f"turnkeeper-probe-{uuid.uuid4().hex}"
    command = f"echo in > inside.txt; echo out > {probe}"
    kit = make_kit(cli, [Rule("todo t-a", [Shell(command), Text("Tried.")])])
    config = kit.host_config()
    config.pop("allowed_tools", None)  # the defaults: workspace-write / acceptEdits
    try:
        run = load_host(cli, config).start(make_request())
        outcome = run.wait(90)
        assert outcome.succeeded, outcome
        assert not probe.exists()
        if cli == "codex":  # the sandbox lets it write in the worktree only
            assert (repo / "inside.txt").read_text() == "in\n"
            # (Codex reports a sandbox-denied command to the model, not as an item.)
            assert "Read-only file system" in kit.server.model_requests()[-1].text()
        else:  # an unlisted shell command is refused, and the result says so
            assert not (repo / "inside.txt").exists()
            done = next(e for e in run.events(0) if e.kind == "command.completed")
            assert done.data["status"] == "failed"
            assert done.data["exit_code"] is None
            denied = outcome.result["permission_denials"]
            assert isinstance(denied, list) and isinstance(denied[0], dict)
            assert denied[0]["tool_name"] == "Bash"
    finally:
        probe.unlink(missing_ok=True)
