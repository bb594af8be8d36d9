"""End to end: the real ``turnkeeper mcp`` process, driven by the MCP SDK's stdio client.

What an agent CLI does with the tool server a turn names: start it with the turn's
environment, list its tools, call them. And what must never work: a server without
this turn's capability, or a call after the turn ended — each an MCP error result
that leaves the journal byte for byte as it was and runs nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from mcp.client.session import ClientSession
from mcp_types import CallToolResult, TextContent

from tests.tools.support import Opened, Session, open_channel, serve_tools
from turnkeeper.hosts.base import TOOLS_DIR_ENV, TOOLS_TOKEN_ENV
from turnkeeper.tools.calls import TOOL_NAMES, AddTodoCall, OpenGateCall, RecordEvidenceCall
from turnkeeper.tools.channel import ToolChannels
from turnkeeper.tools.service import ToolService

TIMEOUT = 60.0


def _git_repo(path: Path) -> Path:
    path.mkdir()
    for args in (
        ["init", "-q"],
        [
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "start",
        ],
    ):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, timeout=TIMEOUT)
    return path


def _text(result: CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, TextContent)
    return content.text


def test_an_agent_calls_its_tools_over_stdio(tmp_path: Path) -> None:
    workspace = _git_repo(tmp_path / "ws")
    opened = open_channel(tmp_path / "turns", workspace)
    answers: dict[str, str] = {}

    async def session(client: ClientSession) -> None:
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == list(TOOL_NAMES)
        by_name = {t.name: t for t in listed.tools}
        described = by_name["record_evidence"].description or ""
        assert "A todo that requires evidence `tests`" in described and "\n" not in described
        assert by_name["add_todo"].input_schema["required"] == ["title"]

        async def call(name: str, arguments: dict[str, object]) -> str:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, _text(result)
            return _text(result)

        answers["failing"] = await call(
            "record_evidence",
            {"command": "test -s notes.md || { echo no notes; exit 1; }", "key": "tests"},
        )
        answers["refused"] = await call("todo_done", {"summary": "notes"})
        (workspace / "notes.md").write_text("# notes\n")
        answers["passing"] = await call(
            "record_evidence", {"command": "test -s notes.md", "key": "tests"}
        )
        answers["done"] = await call("todo_done", {"summary": "wrote notes.md"})
        answers["todo"] = await call(
            "add_todo", {"title": "Review the notes", "depends_on": ["t1"]}
        )
        answers["gate"] = await call(
            "open_gate", {"title": "Publish the notes?", "gate_id": "publish"}
        )
        answers["goal"] = await call("goal", {})
        answers["brief"] = await call("brief", {})
        # A value of the wrong type is refused by the schema check: an error, unjournaled.
        wrong = await client.call_tool("add_todo", {"title": ["not", "a", "string"]})
        assert wrong.is_error
        # A malformed value: INVALID_ARGUMENT, unjournaled.
        empty = await client.call_tool("add_todo", {"title": "  "})
        assert empty.is_error
        assert "INVALID_ARGUMENT (empty_text)" in _text(empty)

    serve_tools(opened.server.env, workspace, session)
    assert "exit 1" in answers["failing"] and "no notes" in answers["failing"]
    assert "evidence_failed — required evidence `tests` failed (exit 1)" in answers["refused"]
    assert "no notes" in answers["refused"]
    assert "exit 0" in answers["passing"]
    assert "todo_done now: the kernel would accept it" in answers["passing"]
    assert answers["done"].startswith("journaled; the kernel would accept it now (todo `t1` done)")
    assert answers["todo"].startswith("todo `turn-0001-todo-4`: journaled; the kernel would accept")
    assert answers["gate"].startswith("gate `publish`: journaled; the kernel would accept it now")
    assert "- t1: Write the tokenizer — done (this turn's todo)" in answers["goal"]
    assert "- publish: Publish the notes? — blocking, on the whole goal" in answers["goal"]
    assert answers["brief"].startswith("# turnkeeper turn turn-0001 — start, attempt 1")

    calls = opened.channels.calls(opened.turn.turn_id)
    assert [c.tool for c in calls] == [
        "record_evidence",
        "todo_done",
        "record_evidence",
        "todo_done",
        "add_todo",
        "open_gate",
    ]
    assert [c.seq for c in calls] == list(range(6))
    first, second = (c for c in calls if isinstance(c, RecordEvidenceCall))
    assert (first.exit_code, first.output_tail) == (1, "no notes")
    assert (second.exit_code, second.output_tail) == (0, "")
    assert isinstance(calls[4], AddTodoCall) and calls[4].depends_on == ["t1"]
    assert isinstance(calls[5], OpenGateCall) and calls[5].gate_id == "publish"


def _refused(result: CallToolResult, reason: str) -> None:
    assert result.is_error
    assert f"PERMISSION_DENIED ({reason})" in _text(result)


def _refuses_everything(reason: str, ran: Path) -> Session:
    async def session(client: ClientSession) -> None:
        _refused(await client.call_tool("record_evidence", {"command": f"touch {ran}"}), reason)
        _refused(await client.call_tool("todo_done", {}), reason)
        _refused(await client.call_tool("goal", {}), reason)

    return session


def test_calls_without_this_turns_capability_are_refused(tmp_path: Path) -> None:
    workspace = _git_repo(tmp_path / "ws")
    opened = open_channel(tmp_path / "turns", workspace)
    other = open_channel(tmp_path / "turns", workspace, turn_id="turn-0002")
    ToolService(opened.server.env).todo_done("a journal that holds a call already")
    before = opened.calls_file.read_bytes()
    assert before
    env = opened.server.env
    ran = workspace / "ran-anyway"
    for reason, bad in (
        ("not_this_turn", {**env, TOOLS_TOKEN_ENV: "f" * 64}),
        ("not_this_turn", {**env, TOOLS_TOKEN_ENV: other.server.env[TOOLS_TOKEN_ENV]}),
        ("no_channel", {TOOLS_DIR_ENV: str(tmp_path / "nowhere"), TOOLS_TOKEN_ENV: "x"}),
    ):
        serve_tools(bad, workspace, _refuses_everything(reason, ran))
    assert opened.calls_file.read_bytes() == before
    assert not ran.exists()


def test_a_call_after_the_turn_ended_is_refused(tmp_path: Path) -> None:
    workspace = _git_repo(tmp_path / "ws")
    opened: Opened = open_channel(tmp_path / "turns", workspace)
    ran = workspace / "ran-anyway"
    snapshot: list[bytes] = []

    async def session(client: ClientSession) -> None:
        result = await client.call_tool("todo_done", {})
        assert not result.is_error
        ToolChannels(tmp_path / "turns").close(opened.turn.turn_id)  # the turn ends
        snapshot.append(opened.calls_file.read_bytes())
        late = await client.call_tool("record_evidence", {"command": f"touch {ran}"})
        _refused(late, "turn_ended")
        assert "has ended" in _text(late)
        _refused(await client.call_tool("add_todo", {"title": "late"}), "turn_ended")

    serve_tools(opened.server.env, workspace, session)
    assert opened.calls_file.read_bytes() == snapshot[0]
    assert [c.tool for c in opened.channels.calls(opened.turn.turn_id)] == ["todo_done"]
    assert not ran.exists()
