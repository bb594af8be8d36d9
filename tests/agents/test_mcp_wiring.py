"""The turn's tool server handed to the real agent CLIs over MCP.

The command lines and the event translation run everywhere; the live tests run the
pinned CLIs against the fake model servers, scripted to call the tools of a small
recording MCP server (tests/agents/fakes/recording_mcp.py) the way a model would.
"""

from __future__ import annotations

import json
import stat
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import CLI_NAMES, MakeKit, MakeRequest
from tests.agents.fakes import RecordedRequest, Rule, Text, Tool
from tests.agents.fakes.recording_mcp import read_calls
from turnkeeper.hosts import HostErrorKind, HostOutcome, HostStatus, TurnKind, load_host
from turnkeeper.hosts.agent_cli import TOOL_CALL_SECONDS, TOOL_STARTUP_SECONDS, SessionFiles
from turnkeeper.hosts.base import TOOLS_DIR_ENV, TOOLS_TOKEN_ENV, ToolServer, TurnRequest
from turnkeeper.hosts.claude import (
    MCP_CONFIG_FILE,
    ClaudeAdapter,
    ClaudeHostConfig,
    write_mcp_config,
)
from turnkeeper.hosts.claude import build_command as claude_command
from turnkeeper.hosts.codex import CodexAdapter, CodexHostConfig
from turnkeeper.hosts.codex import build_command as codex_command
from turnkeeper.json_types import JsonDict
from turnkeeper.tools.checks import CHECK_TIMEOUT_SECONDS

RECORDING_SERVER = Path(__file__).resolve().parent / "fakes" / "recording_mcp.py"
NO_FILES = SessionFiles(find=lambda handle: None, expected=lambda handle: f"<{handle}>")


def tool_server(folder: Path, log: Path, token: str = "tok-1", delay: float = 0) -> ToolServer:
    """The recording server, bound to a turn by ``folder`` and ``token``; it starts
    answering after ``delay`` seconds."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    slow = [str(delay)] if delay else []
    return ToolServer(
        command=[sys.executable, str(RECORDING_SERVER), str(log), *slow],
        env={TOOLS_DIR_ENV: str(folder), TOOLS_TOKEN_ENV: token},
        names=["todo_done", "refuse"],
    )


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


# --- command lines ------------------------------------------------------------------


def test_without_tools_the_command_lines_name_no_mcp_server(tmp_path: Path) -> None:
    plain = request(tmp_path)
    codex = codex_command(CodexHostConfig(), plain, Path("codex"))
    claude = claude_command(ClaudeHostConfig(allowed_tools=["Bash"]), plain, Path("claude"), "S")
    for arg in codex + claude:
        assert "mcp" not in arg.lower(), arg
    assert "--allowedTools=Bash" in claude


def test_codex_gets_the_tool_server_as_overrides_without_its_token(tmp_path: Path) -> None:
    tools = tool_server(tmp_path / "tools", tmp_path / "calls.jsonl", token="secret-token")
    args = codex_command(CodexHostConfig(), request(tmp_path, tools=tools), Path("codex"))
    overrides = [args[i + 1] for i, arg in enumerate(args) if arg == "-c"]
    server = [o for o in overrides if o.startswith("mcp_servers.turnkeeper.")]
    assert server == [
        f'mcp_servers.turnkeeper.command="{sys.executable}"',
        f'mcp_servers.turnkeeper.args=["{RECORDING_SERVER}", "{tmp_path / "calls.jsonl"}"]',
        "mcp_servers.turnkeeper.env_vars=["
        '"TURNKEEPER_ATTEMPT", "TURNKEEPER_SESSION_ID", '
        '"TURNKEEPER_TOOLS_DIR", "TURNKEEPER_TOOLS_TOKEN", "TURNKEEPER_TURN_ID"]',
        "mcp_servers.turnkeeper.required=true",
        f"mcp_servers.turnkeeper.startup_timeout_sec={TOOL_STARTUP_SECONDS}",
        f"mcp_servers.turnkeeper.tool_timeout_sec={TOOL_CALL_SECONDS}",
        'mcp_servers.turnkeeper.default_tools_approval_mode="approve"',
    ]
    # The token reaches the server through the environment, never through argv.
    assert not any("secret-token" in arg for arg in args)
    assert args[-2:] == ["--", "-"]


def test_claude_gets_a_private_mcp_config_and_keeps_its_allowed_tools(tmp_path: Path) -> None:
    tools = tool_server(tmp_path / "tools", tmp_path / "calls.jsonl", token="secret-token")
    path = write_mcp_config(tools)
    assert path == tmp_path / "tools" / MCP_CONFIG_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "mcpServers": {
            "turnkeeper": {
                "type": "stdio",
                "command": sys.executable,
                "args": [str(RECORDING_SERVER), str(tmp_path / "calls.jsonl")],
                "env": tools.env,
                "timeout": TOOL_CALL_SECONDS * 1000,
            }
        }
    }
    cfg = ClaudeHostConfig(allowed_tools=["Bash", "mcp__turnkeeper__refuse"])
    args = claude_command(cfg, request(tmp_path, tools=tools), Path("claude"), "S")
    assert f"--mcp-config={path}" in args
    assert "--strict-mcp-config" in args
    allowed = [a for a in args if a.startswith("--allowedTools=")]
    assert allowed == ["--allowedTools=Bash,mcp__turnkeeper__refuse,mcp__turnkeeper__todo_done"]
    assert not any("secret-token" in arg for arg in args)
    # A tool server that lists no tools is allowed as a whole.
    bare = tools.model_copy(update={"names": []})
    args = claude_command(ClaudeHostConfig(), request(tmp_path, tools=bare), Path("claude"), "S")
    assert "--allowedTools=mcp__turnkeeper" in args


def test_a_tool_call_may_outlast_the_longest_check() -> None:
    assert TOOL_CALL_SECONDS > CHECK_TIMEOUT_SECONDS


# --- event translation --------------------------------------------------------------


def obj(value: dict[str, Any]) -> JsonDict:
    """A CLI's JSON line as the adapters get it."""
    out = json.loads(json.dumps(value))
    assert isinstance(out, dict)
    return out


def mcp_item(status: str, **fields: Any) -> dict[str, Any]:
    """A Codex ``mcp_tool_call`` item, as 0.171.0 prints it."""
    return {
        "id": "item_1",
        "type": "mcp_tool_call",
        "server": "turnkeeper",
        "tool": "todo_done",
        "arguments": {"summary": "A"},
        "result": None,
        "error": None,
        "status": status,
        **fields,
    }


def test_codex_mcp_calls_become_bounded_tool_events(tmp_path: Path) -> None:
    cfg = CodexHostConfig(max_output_chars=40)
    adapter = CodexAdapter(cfg, request(tmp_path), NO_FILES)
    started = adapter.translate("item.started", obj({"item": mcp_item("in_progress")}))
    assert started == [
        (
            "tool.started",
            {
                "id": "item_1",
                "name": "mcp__turnkeeper__todo_done",
                "server": "turnkeeper",
                "tool": "todo_done",
                "arguments": {"summary": "A"},
            },
        )
    ]
    long = "x" * 500 + "END"
    result = {"content": [{"type": "text", "text": long}], "structured_content": None}
    item = mcp_item("completed", result=result)
    ((kind, data),) = adapter.translate("item.completed", obj({"item": item}))
    assert kind == "tool.completed"
    assert data["result"] == "…" + long[-40:]
    assert "error" not in data
    item = mcp_item("failed", error={"message": "timed out awaiting tools/call"})
    ((_, failed),) = adapter.translate("item.completed", obj({"item": item}))
    assert failed["error"] == "timed out awaiting tools/call" and "result" not in failed
    refused = {"content": [{"type": "text", "text": "refused: no"}], "structured_content": None}
    item = mcp_item("failed", result=refused)
    ((_, by_server),) = adapter.translate("item.completed", obj({"item": item}))
    assert by_server["error"] == "refused: no"
    item = mcp_item("in_progress", arguments={"s": "y" * 99})
    big = adapter.translate("item.started", obj({"item": item}))
    clipped = big[0][1]["arguments"]
    assert isinstance(clipped, str) and len(clipped) == 41 and clipped.startswith('{"s": "yy')


def test_claude_mcp_calls_become_tool_events(tmp_path: Path) -> None:
    adapter = ClaudeAdapter(ClaudeHostConfig(), request(tmp_path), "SID")
    use = {"type": "tool_use", "id": "tu1", "name": "mcp__turnkeeper__todo_done",
           "input": {"summary": "A"}}  # fmt: skip
    events = adapter.translate("assistant", obj({"message": {"content": [use]}}))
    call = {"id": "tu1", "name": "mcp__turnkeeper__todo_done", "server": "turnkeeper",
            "tool": "todo_done", "arguments": {"summary": "A"}}  # fmt: skip
    assert events == [("tool.started", call)]
    answer = {"type": "tool_result", "tool_use_id": "tu1", "content": '{"result":"ok"}'}
    events = adapter.translate("user", obj({"message": {"content": [answer]}}))
    assert events == [("tool.completed", {**call, "result": '{"result":"ok"}'})]
    use2 = {**use, "id": "tu2"}
    adapter.translate("assistant", obj({"message": {"content": [use2]}}))
    refused = {"type": "tool_result", "tool_use_id": "tu2", "is_error": True,
               "content": [{"type": "text", "text": "refused: no"}]}  # fmt: skip
    ((_, data),) = adapter.translate("user", obj({"message": {"content": [refused]}}))
    assert data["error"] == "refused: no" and data["id"] == "tu2"


def test_a_tool_server_that_did_not_connect_is_reported(tmp_path: Path) -> None:
    tools = tool_server(tmp_path / "tools", tmp_path / "calls.jsonl")

    def init(status: str | None, with_tools: bool = True) -> list[tuple[str, JsonDict]]:
        turn = request(tmp_path, tools=tools if with_tools else None)
        adapter = ClaudeAdapter(ClaudeHostConfig(), turn, "SID")
        servers = [] if status is None else [{"name": "turnkeeper", "status": status}]
        line = {"subtype": "init", "session_id": "SID", "mcp_servers": servers}
        return adapter.translate("system", obj(line))

    assert [kind for kind, _ in init("connected")] == ["session.bound", "turn.started"]
    for status in ("failed", None):
        *_, (kind, data) = init(status)
        assert kind == "error" and data["fatal"] is True
        assert data["message"] == f"claude: the turnkeeper tool server is {status or 'missing'}"
    *_, (kind, data) = init("pending")
    assert kind == "error" and data["fatal"] is False
    assert len(init(None, with_tools=False)) == 2  # without tools, no server is expected


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_a_call_of_the_turnkeeper_server_takes_todo_done_from_the_config(
    cli: str, tmp_path: Path
) -> None:
    evidence = {"*": [{"key": "k", "command": "true"}]}
    adapter: CodexAdapter | ClaudeAdapter
    ok = HostOutcome(status=HostStatus.SUCCEEDED, result={"summary": "s"})
    if cli == "codex":
        cfg = CodexHostConfig.model_validate(
            {"evidence": evidence, "require_session_artifact": False}
        )
        adapter = CodexAdapter(cfg, request(tmp_path), NO_FILES)
        other = {**mcp_item("in_progress"), "server": "docs"}
        adapter.translate("item.started", obj({"item": other}))
        assert adapter.finish(ok).result["todo_done"] is True  # another server: the config
        adapter.translate("item.started", obj({"item": mcp_item("in_progress")}))
    else:
        claude_cfg = ClaudeHostConfig.model_validate(
            {"evidence": evidence, "require_session_artifact": False}
        )
        adapter = ClaudeAdapter(claude_cfg, request(tmp_path), "SID")
        use = {"type": "tool_use", "id": "t", "name": "mcp__turnkeeper__brief", "input": {}}
        adapter.translate("assistant", obj({"message": {"content": [use]}}))
    # A todo_done of the completion rule (a CLI that ended without a result) goes too.
    ruled = ok.model_copy(update={"result": {"summary": "s", "todo_done": True}})
    result = adapter.finish(ruled).result
    assert "todo_done" not in result and "evidence" not in result
    assert result["summary"] == "s"


# --- the real CLIs --------------------------------------------------------------------


def model_call(requests: list[RecordedRequest], step: int) -> RecordedRequest:
    found = [r for r in requests if r.step == step]
    assert found, [(r.step, r.reply) for r in requests]
    return found[-1]


def offered_tools(cli: str, first: RecordedRequest) -> list[str]:
    """The turnkeeper tools the model was offered in a request, by their tool names."""
    tools = first.body.get("tools") or []
    if cli == "codex":
        spaces = [t for t in tools if t.get("type") == "namespace"]
        ours = [t for t in spaces if t.get("name") == "mcp__turnkeeper"]
        return sorted(str(t.get("name")) for space in ours for t in space.get("tools", []))
    prefix = "mcp__turnkeeper__"
    names = [str(t.get("name")) for t in tools]
    return sorted(n.removeprefix(prefix) for n in names if n.startswith(prefix))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("cli", CLI_NAMES)
def test_the_cli_calls_the_turns_tool_server_and_the_model_reads_its_answers(
    cli: str, make_kit: MakeKit, make_request: MakeRequest, tmp_path: Path
) -> None:
    kit = make_kit(
        cli,
        [
            Rule(
                "todo t-a",
                [
                    Tool("todo_done", {"summary": "A is written"}),
                    Tool("refuse", {"reason": "no evidence"}),
                    Text("Reported A."),
                ],
            ),
            Rule("todo t-b", [Tool("todo_done", {"summary": "B too"}), Text("Reported B.")]),
        ],
    )
    # The config would complete the todo with evidence: the tool calls decide instead.
    evidence = {"*": [{"key": "k", "command": "true"}]}
    host = load_host(cli, kit.host_config(complete_todo="on_success", evidence=evidence))
    log = tmp_path / "calls.jsonl"
    token = f"tok-{uuid.uuid4().hex}"
    # A slow start: the CLI must wait for the server before it asks the model.
    tools = tool_server(tmp_path / "tools-1", log, token, delay=2)
    first = make_request(tools=tools)
    run = host.start(first)
    outcome = run.wait(60)
    events = list(run.events(0))
    assert outcome.status is HostStatus.SUCCEEDED, (outcome, events)

    # The calls reached the server with their arguments and the turn's environment.
    calls = read_calls(log)
    assert [(c["tool"], c["arguments"]) for c in calls] == [
        ("todo_done", {"summary": "A is written"}),
        ("refuse", {"reason": "no evidence"}),
    ]
    for call in calls:
        assert call["env"] == {
            TOOLS_DIR_ENV: str(tmp_path / "tools-1"),
            TOOLS_TOKEN_ENV: token,
            "TURNKEEPER_TURN_ID": first.turn_id,
            "TURNKEEPER_SESSION_ID": first.session_id,
        }, call["env_names"]

    # The model was offered the tools and read their answers in its next requests.
    requests = kit.server.model_requests()
    assert offered_tools(cli, model_call(requests, 0)) == ["refuse", "todo_done"]
    assert model_call(requests, 0).last_tool_output() is None
    assert "recorded: A is written" in str(model_call(requests, 1).last_tool_output())
    assert "refused: no evidence" in str(model_call(requests, 2).last_tool_output())

    # The host events show each call and its end.
    started = [e.data for e in events if e.kind == "tool.started"]
    completed = [e.data for e in events if e.kind == "tool.completed"]
    assert [(d["server"], d["tool"], d["arguments"]) for d in started] == [
        ("turnkeeper", "todo_done", {"summary": "A is written"}),
        ("turnkeeper", "refuse", {"reason": "no evidence"}),
    ]
    assert [d["id"] for d in completed] == [d["id"] for d in started]
    assert "recorded: A is written" in str(completed[0]["result"])
    assert "error" not in completed[0]
    assert "refused: no evidence" in str(completed[1]["error"])
    # The agent reported through its tools: the config's rule and evidence stand aside.
    assert "todo_done" not in outcome.result and "evidence" not in outcome.result
    assert outcome.result["summary"] == "Reported A."
    if cli == "claude":
        written = tmp_path / "tools-1" / MCP_CONFIG_FILE
        assert stat.S_IMODE(written.stat().st_mode) == 0o600

    # A resumed session gets the next turn's server (its own folder and token).
    token2 = f"tok-{uuid.uuid4().hex}"
    second = make_request(
        instructions="Continue todo t-b: write B.",
        kind="continuation",
        host_session_handle=outcome.host_session_handle,
        todo_id="t-b",
        todo_title="write B",
        tools=tool_server(tmp_path / "tools-2", log, token2),
    )
    resumed = host.start(second).wait(60)
    assert resumed.status is HostStatus.SUCCEEDED, resumed
    last = read_calls(log)[-1]
    assert (last["tool"], last["arguments"]) == ("todo_done", {"summary": "B too"})
    assert last["env"][TOOLS_TOKEN_ENV] == token2
    assert last["env"]["TURNKEEPER_TURN_ID"] == second.turn_id
    assert "recorded: B too" in str(kit.server.model_requests()[-1].last_tool_output())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cli", CLI_NAMES)
def test_a_tool_server_that_cannot_start_fails_the_turn(
    cli: str, make_kit: MakeKit, make_request: MakeRequest, tmp_path: Path
) -> None:
    kit = make_kit(cli, [Rule("todo t-a", [Text("Worked without tools.")])])
    host = load_host(cli, kit.host_config())
    broken = tool_server(tmp_path / "tools", tmp_path / "calls.jsonl").model_copy(
        update={"command": [str(tmp_path / "no-such-server")]}
    )
    outcome = host.start(make_request(tools=broken)).wait(45)
    assert outcome.status is HostStatus.FAILED, outcome
    assert outcome.error_kind is HostErrorKind.EXIT_CODE
    assert "turnkeeper" in outcome.message, outcome.message
    if cli == "codex":
        # Codex waits for a required server: the model is never asked.
        assert "required MCP servers failed to initialize" in outcome.message
        assert kit.server.model_requests() == []
    else:
        assert "tool server is failed" in outcome.message
