"""The agent CLI hosts without the CLIs: command lines, event translation, config.

These run everywhere (no Node.js needed); the live behaviour is in the other files.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from turnkeeper.errors import InvalidArgument
from turnkeeper.hosts import (
    HostErrorKind,
    HostOutcome,
    HostSpawnFailed,
    HostStatus,
    TurnKind,
    TurnRequest,
    available_host_kinds,
    load_host,
)
from turnkeeper.hosts.agent_cli import (
    CLAUDE_CODE_VERSION,
    CODEX_VERSION,
    SessionFiles,
    check_session_file,
    resolve_binary,
    todo_result,
    toml_value,
)
from turnkeeper.hosts.claude import (
    ClaudeAdapter,
    ClaudeHostConfig,
    project_dir_name,
    session_id_for,
)
from turnkeeper.hosts.claude import build_command as claude_command
from turnkeeper.hosts.claude import session_artifact as claude_artifact
from turnkeeper.hosts.codex import CodexAdapter, CodexHostConfig, native_binary
from turnkeeper.hosts.codex import build_command as codex_command
from turnkeeper.hosts.codex import session_artifact as codex_artifact
from turnkeeper.json_types import JsonDict, JsonValue

ROOT = Path(__file__).resolve().parents[2]


def request(tmp_path: Path, **overrides: Any) -> TurnRequest:
    fields: dict[str, Any] = {
        "turn_id": "turn-0123456789abcdef",
        "session_id": "s-1",
        "generation": 1,
        "attempt": 1,
        "kind": TurnKind.START,
        "instructions": "Start todo t-a: write A (attempt 1).",
        "workspace": tmp_path,
        "todo_id": "t-a",
        "todo_title": "write A",
    }
    fields.update(overrides)
    return TurnRequest(**fields)


def test_pinned_versions_match_the_install_script() -> None:
    script = (ROOT / "scripts" / "install_agent_clis.sh").read_text()
    assert f'CODEX_VERSION="{CODEX_VERSION}"' in script
    assert f'CLAUDE_CODE_VERSION="{CLAUDE_CODE_VERSION}"' in script


def test_both_hosts_are_entry_points() -> None:
    assert {"codex", "claude"} <= set(available_host_kinds())
    assert load_host("codex", {}).kind == "codex"
    assert load_host("claude", {}).kind == "claude"
    with pytest.raises(InvalidArgument):
        load_host("codex", {"sandbox": "everything"})
    with pytest.raises(InvalidArgument):
        load_host("claude", {"no_such_key": 1})


# --- command lines ----------------------------------------------------------------------


def test_codex_command_defaults_are_safe_and_leave_the_user_config_alone(tmp_path: Path) -> None:
    args = codex_command(CodexHostConfig(), request(tmp_path), Path("/bin/codex"))
    assert args == [
        "/bin/codex", "exec", "--json",
        "-c", 'sandbox_mode="workspace-write"',
        "-c", 'approval_policy="never"',
        "-C", str(tmp_path), "--", "-",
    ]  # fmt: skip
    # No model, provider or home: those come from the user's own config and env.
    cfg = CodexHostConfig(sandbox=None, approval_policy=None)
    assert "-c" not in codex_command(cfg, request(tmp_path), Path("/bin/codex"))


def test_codex_resume_names_the_thread_and_passes_settings_as_overrides(tmp_path: Path) -> None:
    cfg = CodexHostConfig(
        model="gpt-x",
        sandbox="danger-full-access",
        config={"model_reasoning_effort": "high", "features": {"web_search": False}},
        skip_git_repo_check=True,
        extra_args=["--ephemeral"],
    )
    args = codex_command(cfg, request(tmp_path, host_session_handle="thr-1"), Path("codex"))
    assert args[:4] == ["codex", "exec", "resume", "--json"]
    assert args[-3:] == ["--", "thr-1", "-"]  # the prompt on stdin, after the thread id
    assert "-C" not in args  # resume does not take it: the worktree is the process's cwd
    assert args[4:6] == ["-m", "gpt-x"]
    assert "features={web_search = false}" in args
    assert 'model_reasoning_effort="high"' in args
    assert "--skip-git-repo-check" in args and "--ephemeral" in args


def test_claude_command_chooses_the_session_id_up_front_and_resumes_it(tmp_path: Path) -> None:
    cfg = ClaudeHostConfig(allowed_tools=["Bash(pytest:*)", "Read"], model="sonnet")
    sid = session_id_for("turn-1")
    assert sid == session_id_for("turn-1") != session_id_for("turn-2")
    assert uuid.UUID(sid).version == 5
    args = claude_command(cfg, request(tmp_path), Path("claude"), sid)
    assert args == [
        "claude", "-p", "--output-format", "stream-json", "--verbose",
        "--model", "sonnet", "--permission-mode", "acceptEdits",
        "--allowedTools=Bash(pytest:*),Read", "--session-id", sid,
    ]  # fmt: skip
    resumed = claude_command(cfg, request(tmp_path, host_session_handle=sid), Path("claude"), sid)
    assert resumed[-2:] == ["--resume", sid]
    assert "--dangerously-skip-permissions" not in resumed
    assert "--dangerously-skip-permissions" in claude_command(
        ClaudeHostConfig(skip_permissions=True), request(tmp_path), Path("claude"), sid
    )


def test_toml_values() -> None:
    assert toml_value('a"b') == '"a\\"b"'
    assert toml_value(True) == "true"
    assert toml_value(3) == "3"
    assert toml_value([1, "x"]) == '[1, "x"]'
    assert toml_value({"a-b": 1, "c d": "e"}) == '{a-b = 1, "c d" = "e"}'


# --- binaries --------------------------------------------------------------------------


def test_a_missing_binary_is_a_spawn_failure_that_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(HostSpawnFailed) as err:
        resolve_binary(str(tmp_path / "nope"), "codex")
    assert err.value.outcome.error_kind is HostErrorKind.SPAWN
    assert "install_agent_clis.sh" in err.value.message
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TURNKEEPER_AGENT_CLIS_DIR", str(tmp_path / "empty"))
    with pytest.raises(HostSpawnFailed):
        resolve_binary(None, "claude")
    with pytest.raises(HostSpawnFailed):  # through the host, before any process starts
        load_host("claude", {}).start(request(tmp_path))


def test_the_codex_node_wrapper_is_replaced_by_its_native_binary(tmp_path: Path) -> None:
    modules = tmp_path / "node_modules"
    wrapper = modules / "@openai" / "codex" / "bin" / "codex.js"
    native = modules / "@openai" / "codex-linux-x64" / "vendor"
    native = native / "x86_64-unknown-linux-musl" / "bin" / "codex"
    for path in (wrapper, native):
        path.parent.mkdir(parents=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    link = modules / ".bin" / "codex"
    link.parent.mkdir()
    link.symlink_to(wrapper)
    found = native_binary(link)
    assert found in (native, link)  # the native one on x86_64 Linux
    assert native_binary(tmp_path / "elsewhere" / "codex") == tmp_path / "elsewhere" / "codex"


# --- session files -----------------------------------------------------------------------


def test_session_artifacts_are_found_where_the_clis_keep_them(tmp_path: Path) -> None:
    codex_home = tmp_path / "codex"
    rollout = (
        codex_home / "sessions" / "2026" / "01" / "02" / "rollout-2026-01-02T03-04-05-t1.jsonl"
    )
    rollout.parent.mkdir(parents=True)
    rollout.write_text('{"type": "session_meta"}\n')
    assert codex_artifact({"codex_home": str(codex_home)}, "t1") == rollout
    assert codex_artifact({"env": {"CODEX_HOME": str(codex_home)}}, "t1") == rollout
    assert codex_artifact({"codex_home": str(codex_home)}, "t2") is None

    workspace = Path("/work/my_repo.git")
    assert project_dir_name(workspace) == "-work-my-repo-git"
    transcript = tmp_path / "claude" / "projects" / "-work-my-repo-git" / "s1.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text('{"type": "user"}\n')
    config = {"config_dir": str(tmp_path / "claude")}
    assert claude_artifact(config, "s1", workspace) == transcript
    assert claude_artifact(config, "s1") == transcript  # searched without the workspace
    assert claude_artifact(config, "s2") is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "is missing"),
        (b"", "is empty"),
        (b'{"a": 1}\n{"b": 2', "is truncated"),
        (b'{"a": 1}\n{"b": \n{"c": 3}\n', "line 2 is not a JSON object"),
        (b'{"a": 1}\n[1]\n', "line 2 is not a JSON object"),
    ],
)
def test_damaged_session_files_are_named_in_a_typed_error(
    tmp_path: Path, content: bytes | None, problem: str
) -> None:
    path = tmp_path / "s.jsonl"
    if content is not None:
        path.write_bytes(content)
    from turnkeeper.hosts.agent_cli import SessionArtifactError

    with pytest.raises(SessionArtifactError) as err:
        check_session_file(path, "resume")
    assert problem in err.value.message
    assert str(path) in err.value.message
    assert err.value.reason == "host_session_artifact"


def test_a_good_session_file_has_a_stable_digest(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"b": 2}\n')
    first = check_session_file(path, "x")
    assert first == check_session_file(path, "x")
    assert first.as_result() == {"path": str(path), "sha256": first.sha256, "bytes": 19}


# --- results ------------------------------------------------------------------------------


def evidence_keys(result: JsonDict) -> list[JsonValue]:
    evidence = result["evidence"]
    assert isinstance(evidence, list)
    keys: list[JsonValue] = []
    for spec in evidence:
        assert isinstance(spec, dict)
        keys.append(spec["key"])
    return keys


def test_todo_results_follow_the_config(tmp_path: Path) -> None:
    evidence = {
        "t-a": [{"key": "k-id", "command": "true"}],
        "write B": [{"key": "k-title", "command": "true"}],
        "*": [{"key": "k-any", "command": "true"}],
    }
    cfg = CodexHostConfig.model_validate({"evidence": evidence})
    by_id = todo_result(cfg, request(tmp_path), "done")
    assert by_id["todo_done"] is True
    assert evidence_keys(by_id) == ["k-id"]
    by_title = todo_result(cfg, request(tmp_path, todo_id="t-b", todo_title="write B"), "")
    assert evidence_keys(by_title) == ["k-title"]
    other = todo_result(cfg, request(tmp_path, todo_id="t-c", todo_title="c"), "")
    assert evidence_keys(other) == ["k-any"]
    assert todo_result(cfg, request(tmp_path, todo_id=None), "") == {}
    marker = CodexHostConfig(complete_todo="on_marker", done_marker="ALL DONE")
    assert todo_result(marker, request(tmp_path), "not yet")["todo_done"] is False
    assert todo_result(marker, request(tmp_path), "ALL DONE.")["todo_done"] is True
    never = CodexHostConfig(complete_todo="never")
    assert todo_result(never, request(tmp_path), "ALL DONE")["todo_done"] is False


# --- event translation ---------------------------------------------------------------------

NO_FILES = SessionFiles(find=lambda handle: None, expected=lambda handle: f"<{handle}>")

CODEX_LINES: list[dict[str, Any]] = [
    {"type": "thread.started", "thread_id": "thr-9"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "i0", "type": "error", "message": "no metadata"}},
    {
        "type": "item.started",
        "item": {"id": "i1", "type": "command_execution", "command": "ls", "status": "in_progress"},
    },
    {
        "type": "item.completed",
        "item": {
            "id": "i1",
            "type": "command_execution",
            "command": "ls",
            "aggregated_output": "a\nb\n",
            "exit_code": 2,
            "status": "failed",
        },
    },
    {"type": "item.completed", "item": {"id": "i2", "type": "reasoning", "text": "hmm"}},
    {"type": "item.completed", "item": {"id": "i3", "type": "agent_message", "text": "Done."}},
    {"type": "item.started", "item": {"id": "i4", "type": "mcp_tool_call", "server": "s"}},
    {"type": "item.completed", "item": {"id": "i5", "type": "brand_new", "x": 1}},
    {"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 1}},
    {"type": "something.else", "n": 1},
]


def translate_all(adapter: CodexAdapter | ClaudeAdapter, lines: list[dict[str, Any]]) -> list[Any]:
    out = []
    for line in lines:
        out += adapter.translate(str(line["type"]), line)
    return out


def test_codex_events_become_host_events(tmp_path: Path) -> None:
    adapter = CodexAdapter(CodexHostConfig(), request(tmp_path), NO_FILES)
    events = translate_all(adapter, CODEX_LINES)
    assert [k for k, _ in events] == [
        "session.bound", "turn.started", "error", "command.started", "command.completed",
        "reasoning", "message", "tool.started", "codex.item.completed", "usage", "result",
        "codex.something.else",
    ]  # fmt: skip
    data = dict(events)
    assert data["session.bound"] == {"handle": "thr-9", "cli": "codex"}
    assert data["error"] == {"message": "codex: no metadata", "fatal": False}
    assert data["command.completed"]["exit_code"] == 2
    assert data["command.completed"]["output"] == "a\nb\n"
    assert data["result"] == {"summary": "Done.", "usage": {"input_tokens": 5, "output_tokens": 1}}


def test_codex_failures_and_a_foreign_thread_are_fatal(tmp_path: Path) -> None:
    adapter = CodexAdapter(
        CodexHostConfig(), request(tmp_path, host_session_handle="thr-1"), NO_FILES
    )
    ((kind, data),) = adapter.translate("thread.started", {"thread_id": "thr-2"})
    assert kind == "error" and data["fatal"] is True and data["error_kind"] == "protocol"
    assert "thr-2" in str(data["message"]) and "thr-1" in str(data["message"])
    ((kind, data),) = adapter.translate("turn.failed", {"error": {"message": "stream closed"}})
    assert data == {
        "message": "codex turn failed: stream closed",
        "fatal": True,
        "error_kind": "exit_code",
    }


CLAUDE_LINES: list[dict[str, Any]] = [
    {"type": "system", "subtype": "init", "session_id": "SID", "model": "m", "cwd": "/w"},
    {
        "type": "assistant",
        "message": {
            "content": [
                {"type": "thinking", "thinking": "plan"},
                {"type": "text", "text": "Running it."},
                {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"command": "make"}},
                {"type": "tool_use", "id": "tu2", "name": "Read", "input": {"file_path": "x"}},
            ]
        },
    },
    {
        "type": "user",
        "message": {
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "tu1",
                    "is_error": True,
                    "content": "Exit code 2\nmake: *** no rule",
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "tu2",
                    "content": [{"type": "text", "text": "x"}],
                },
            ]
        },
    },
    {"type": "assistant", "message": {"content": [{"type": "text", "text": "Fixed."}]}},
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "All fixed.",
        "num_turns": 2,
        "total_cost_usd": 0.1,
        "usage": {"input_tokens": 3},
    },
    {"type": "stream_event", "event": {}},
    {"type": "rate_limit", "x": 1},
]


def test_claude_events_become_host_events(tmp_path: Path) -> None:
    adapter = ClaudeAdapter(ClaudeHostConfig(), request(tmp_path), "SID")
    events = translate_all(adapter, CLAUDE_LINES)
    assert [k for k, _ in events] == [
        "session.bound", "turn.started", "reasoning", "message", "command.started",
        "tool.started", "command.completed", "tool.completed", "message", "usage", "result",
        "claude.rate_limit",
    ]  # fmt: skip
    done = next(d for k, d in events if k == "command.completed")
    assert done["command"] == "make"
    assert done["exit_code"] == 2
    assert done["status"] == "failed"
    tool = next(d for k, d in events if k == "tool.completed")
    assert tool == {"id": "tu2", "name": "Read", "is_error": False}
    result = events[-2][1]
    assert result["summary"] == "All fixed."
    assert result["num_turns"] == 2


def test_claude_errors_and_a_foreign_session_are_fatal(tmp_path: Path) -> None:
    adapter = ClaudeAdapter(ClaudeHostConfig(), request(tmp_path), "SID")
    (kind, data), _ = adapter.translate("system", {"subtype": "init", "session_id": "OTHER"})
    assert kind == "error" and data["error_kind"] == "protocol"
    api_error: JsonDict = {"type": "assistant", "error": "unknown",
                 "message": {"content": [{"type": "text", "text": "API Error: boom"}]}}  # fmt: skip
    ((kind, data),) = adapter.translate("assistant", api_error)
    assert (kind, data["fatal"]) == ("error", False)
    events = adapter.translate("result", {"subtype": "success", "is_error": True, "result": "x"})
    assert events[-1][1] == {"message": "claude: x", "fatal": True, "error_kind": "exit_code"}
    events = adapter.translate("result", {"subtype": "error_max_turns", "is_error": False})
    assert events[-1][1]["message"] == "claude: error_max_turns"


def test_a_bare_exit_code_is_explained_by_the_last_cli_error(tmp_path: Path) -> None:
    adapter = CodexAdapter(CodexHostConfig(), request(tmp_path), NO_FILES)
    adapter.translate("error", {"message": "401 Unauthorized"})
    failed = HostOutcome(
        status=HostStatus.FAILED,
        error_kind=HostErrorKind.EXIT_CODE,
        exit_code=1,
        message="host exited with code 1",
    )
    assert adapter.finish(failed).message == "codex exited with code 1: codex: 401 Unauthorized"


def test_a_success_without_a_session_file_is_a_protocol_failure(tmp_path: Path) -> None:
    adapter = CodexAdapter(CodexHostConfig(), request(tmp_path), NO_FILES)
    ok = HostOutcome(status=HostStatus.SUCCEEDED, host_session_handle="thr-1")
    failed = adapter.finish(ok)
    assert failed.error_kind is HostErrorKind.PROTOCOL
    assert "<thr-1>" in failed.message and "missing" in failed.message
    relaxed = CodexAdapter(
        CodexHostConfig(require_session_artifact=False), request(tmp_path), NO_FILES
    )
    assert relaxed.finish(ok).succeeded


def test_event_output_is_bounded(tmp_path: Path) -> None:
    adapter = CodexAdapter(CodexHostConfig(max_output_chars=10), request(tmp_path), NO_FILES)
    item: JsonDict = {"id": "i", "type": "command_execution", "command": "c", "exit_code": 0,
            "aggregated_output": "x" * 1000 + "END"}  # fmt: skip
    ((_, data),) = adapter.translate("item.completed", {"item": item})
    output = data["output"]
    assert isinstance(output, str)
    assert output.endswith("END") and len(output) == 11
    assert re.fullmatch(r"…x*END", output)
    assert len(json.dumps(data)) < 200


def test_without_a_cli_error_the_last_stderr_line_explains_an_exit_code(tmp_path: Path) -> None:
    adapter = ClaudeAdapter(ClaudeHostConfig(), request(tmp_path), "SID")
    failed = HostOutcome(
        status=HostStatus.FAILED,
        error_kind=HostErrorKind.EXIT_CODE,
        exit_code=1,
        message="host exited with code 1",
        stderr_tail="warming up\nError: Session ID SID is already in use.\n\n",
    )
    message = adapter.finish(failed).message
    assert message == "claude exited with code 1: Error: Session ID SID is already in use."
