"""Host kind ``claude``: Anthropic Claude Code (``claude -p --output-format stream-json``).

A turn runs ``claude -p --output-format stream-json --verbose [--model M]
[--permission-mode P] [--allowedTools=...] --session-id <uuid>`` in the worktree with
the instructions on stdin; a later turn of the same session runs ``... --resume
<session id>``. The session id is chosen up front — derived from the turn id, so it
can be recomputed — and confirmed by the CLI's ``system/init.session_id``; it is the
host session handle. Example host config (all keys optional)::

    {
      "binary": "claude",                 # default: claude on PATH, else the install cache
      "model": "claude-sonnet-4-5",       # default: the user's settings
      "permission_mode": "acceptEdits",   # --permission-mode; null: the user's settings
      "allowed_tools": ["Bash(pytest:*)", "Bash(git status)"],   # --allowedTools
      "config_dir": "~/.claude-work",     # sets CLAUDE_CONFIG_DIR; default: inherited
      "env": {"ANTHROPIC_BASE_URL": "..."},   # no secrets: a key stays in run's env
      "evidence": {"t-tests": [{"key": "tests", "command": "pytest -q"}]}
    }

Defaults are the safe ones for unattended turns: ``acceptEdits`` (file edits inside
the worktree are accepted; other shell commands and anything outside the worktree
are refused — reported as ``permission_denials`` in the result — unless
``allowed_tools`` lists them, e.g. ``"Bash"`` or ``"Bash(make test:*)"``) and no
``--dangerously-skip-permissions`` (opt in with ``skip_permissions``; as root the
CLI also wants ``IS_SANDBOX=1``). ``DISABLE_AUTOUPDATER=1`` is set unless the user
set it, so a turn never updates the CLI under the control plane. API keys,
``ANTHROPIC_BASE_URL``, settings files and ``CLAUDE_CONFIG_DIR`` come from the
user's own environment, untouched.

A turn with tools (``TurnRequest.tools``) writes the turn's tool server as MCP server
``turnkeeper`` into ``claude-mcp.json`` (0600) in the turn's tool folder
(``TURNKEEPER_TOOLS_DIR``): ``{"mcpServers": {"turnkeeper": {"type": "stdio",
"command", "args", "env", "timeout"}}}``, ``env`` the tool server's variables (Claude
Code starts an MCP server with its whole environment plus these) and ``timeout`` the
per-call limit in ms. It runs the CLI with ``--mcp-config=<file>
--strict-mcp-config`` (only this server: the user's own MCP servers are not part of a
turn) and adds ``mcp__turnkeeper__<tool>`` for each tool to ``--allowedTools`` (else
``acceptEdits`` refuses them). ``MCP_CONNECTION_NONBLOCKING=0`` makes ``-p`` wait for
the server before the first model request (by default it does not, and a call made
while the server is still starting fails with "still connecting"); ``MCP_TIMEOUT``
bounds that wait. A server that fails to start (``system/init`` lists it as
``failed``) fails the turn.

The session file (host session artifact) is
``$CLAUDE_CONFIG_DIR/projects/<worktree path with non-alphanumerics as '-'>/<id>.jsonl``
(``~/.claude`` by default): see :func:`session_artifact`. Observed on 2.1.197: a
SIGKILL may leave the last tool call out of that file (a resume drops it), and
Claude Code keeps running, with its commands, when the control plane dies.
"""

from __future__ import annotations

import glob
import json
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field

from turnkeeper.hosts.agent_cli import (
    TOOL_CALL_SECONDS,
    TOOL_STARTUP_SECONDS,
    AgentCliConfig,
    CliAdapter,
    Event,
    LayeredConfig,
    SessionFiles,
    env_value,
    merged_env,
    resolve_binary,
    start_cli,
    tail,
)
from turnkeeper.hosts.base import (
    TOOLS_DIR_ENV,
    TOOLS_SERVER_NAME,
    HostSpawnFailed,
    ToolServer,
    TurnRequest,
)
from turnkeeper.hosts.subprocess_config import validate_config
from turnkeeper.hosts.subprocess_host import SubprocessRun
from turnkeeper.json_types import JsonDict, JsonValue

_SESSION_NAMESPACE = uuid.UUID("5b0e3f55-8a57-4d43-9d38-5f7c1b0e7a11")
_EXIT_CODE = re.compile(r"^(?:Error: )?Exit code (\d+)")
#: The file the turn's MCP config is written to, in the turn's tool folder.
MCP_CONFIG_FILE = "claude-mcp.json"
_MCP_PREFIX = "mcp__"


class ClaudeHostConfig(AgentCliConfig):
    permission_mode: Literal["default", "acceptEdits", "plan", "bypassPermissions"] | None = (
        "acceptEdits"
    )
    allowed_tools: list[str] = Field(default_factory=list)
    disallowed_tools: list[str] = Field(default_factory=list)
    skip_permissions: bool = False
    max_turns: int | None = Field(default=None, gt=0)
    config_dir: str | None = None


def config_dir(cfg: ClaudeHostConfig) -> Path:
    if cfg.config_dir:
        return Path(cfg.config_dir).expanduser()
    value = env_value(cfg, "CLAUDE_CONFIG_DIR")
    return Path(value).expanduser() if value else Path.home() / ".claude"


def project_dir_name(workspace: Path) -> str:
    """How Claude Code names a working directory's folder under ``projects/``."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(workspace))


def session_artifact(
    config: Mapping[str, object], handle: str, workspace: Path | None = None
) -> Path | None:
    """The transcript of Claude Code session ``handle`` under the host config, or None.

    With ``workspace`` the expected project folder is tried first; otherwise (or if
    it is not there) every project folder is searched: session ids are UUIDs.
    """
    cfg: ClaudeHostConfig = validate_config(ClaudeHostConfig, dict(config))
    return _find_transcript(cfg, handle, workspace)


def _find_transcript(cfg: ClaudeHostConfig, handle: str, workspace: Path | None) -> Path | None:
    projects = config_dir(cfg) / "projects"
    if workspace is not None:
        for ws in dict.fromkeys((workspace, workspace.resolve())):
            candidate = projects / project_dir_name(ws) / f"{handle}.jsonl"
            if candidate.is_file():
                return candidate
    found = sorted(projects.glob(f"*/{glob.escape(handle)}.jsonl"))
    return found[0] if found else None


def session_id_for(turn_id: str) -> str:
    """The Claude Code session id a fresh turn starts (a UUID derived from the turn id)."""
    return str(uuid.uuid5(_SESSION_NAMESPACE, turn_id))


def mcp_config_path(tools: ToolServer) -> Path:
    """Where a turn's MCP config goes: its tool folder (the driver always names one)."""
    folder = tools.env.get(TOOLS_DIR_ENV)
    if not folder:
        raise HostSpawnFailed(f"the turn's tool server names no {TOOLS_DIR_ENV}")
    return Path(folder) / MCP_CONFIG_FILE


def mcp_config(tools: ToolServer) -> JsonDict:
    """The ``--mcp-config`` document of a turn's tool server."""
    server: JsonDict = {
        "type": "stdio",
        "command": tools.command[0],
        "args": list(tools.command[1:]),
        "env": dict(tools.env),
        "timeout": TOOL_CALL_SECONDS * 1000,
    }
    return {"mcpServers": {TOOLS_SERVER_NAME: server}}


def write_mcp_config(tools: ToolServer) -> Path:
    """Write the turn's MCP config (0600: it holds the turn's capability token)."""
    path = mcp_config_path(tools)
    data = json.dumps(mcp_config(tools), indent=2).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise HostSpawnFailed(f"cannot write the turn's MCP config {path}: {exc}") from exc
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), 0o600)  # a file left by an earlier attempt keeps its mode
        out.write(data)
    return path


def tool_names(tools: ToolServer) -> list[str]:
    """The tool server's tools as ``--allowedTools`` names them (the whole server when
    it lists none)."""
    prefix = f"{_MCP_PREFIX}{TOOLS_SERVER_NAME}"
    return [f"{prefix}__{name}" for name in tools.names] or [prefix]


def build_command(
    cfg: ClaudeHostConfig,
    request: TurnRequest,
    binary: Path,
    session_id: str,
    mcp_config_file: Path | None = None,
) -> list[str]:
    """The CLI's command line; ``mcp_config_file``: the turn's MCP config (written by
    :func:`write_mcp_config`; None: :func:`mcp_config_path`, when the turn has tools)."""
    args = [str(binary), "-p", "--output-format", "stream-json", "--verbose"]
    if cfg.model:
        args += ["--model", cfg.model]
    if cfg.permission_mode:
        args += ["--permission-mode", cfg.permission_mode]
    allowed = list(cfg.allowed_tools)
    if request.tools is not None:
        path = mcp_config_file or mcp_config_path(request.tools)
        # With "=", as below: --mcp-config takes several files.
        args += [f"--mcp-config={path}", "--strict-mcp-config"]
        allowed += [n for n in tool_names(request.tools) if n not in allowed]
    # With "=": a variadic option would otherwise swallow what follows it.
    if allowed:
        args.append(f"--allowedTools={','.join(allowed)}")
    if cfg.disallowed_tools:
        args.append(f"--disallowedTools={','.join(cfg.disallowed_tools)}")
    if cfg.skip_permissions:
        args.append("--dangerously-skip-permissions")
    if cfg.max_turns is not None:
        args += ["--max-turns", str(cfg.max_turns)]
    if request.host_session_handle:
        args += ["--resume", request.host_session_handle]
    else:
        args += ["--session-id", session_id]
    return args + cfg.extra_args  # the prompt comes on stdin


class ClaudeAdapter(CliAdapter):
    cli = "claude"

    def __init__(self, cfg: ClaudeHostConfig, request: TurnRequest, session_id: str) -> None:
        workspace = request.workspace
        files = SessionFiles(
            find=lambda handle: _find_transcript(cfg, handle, workspace),
            expected=lambda handle: str(
                config_dir(cfg) / "projects" / project_dir_name(workspace) / f"{handle}.jsonl"
            ),
        )
        super().__init__(cfg, request, files)
        self.session_id = session_id
        self._bash: dict[str, str] = {}  # tool_use id -> command
        self._tools: dict[str, str] = {}  # tool_use id -> tool name
        # tool_use id -> (server, tool, arguments) of an MCP tool call
        self._mcp: dict[str, tuple[str, str, JsonDict]] = {}

    def translate(self, kind: str, data: JsonDict) -> list[Event]:
        if kind == "system" and data.get("subtype") == "init":
            return [
                *self.bind(data.get("session_id"), self.session_id),
                ("turn.started", {"model": data.get("model"), "cwd": data.get("cwd")}),
                *self._tool_server_status(data.get("mcp_servers")),
            ]
        if kind == "assistant":
            return self._assistant(data)
        if kind == "user":
            return self._tool_results(data)
        if kind == "result":
            return self._result(data)
        if kind == "stream_event":
            return []
        return [(f"claude.{kind}", data)]

    def _assistant(self, data: JsonDict) -> list[Event]:
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        out: list[Event] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            type_ = block.get("type")
            if type_ == "text":
                text = str(block.get("text") or "")
                if data.get("error"):  # an API error the CLI shows as a message
                    out.append(self.error(f"claude: {text}", False))
                else:
                    out.append(self.message(text))
            elif type_ == "thinking":
                out.append(("reasoning", {"text": block.get("thinking")}))
            elif type_ == "tool_use":
                tid = str(block.get("id"))
                name = str(block.get("name"))
                given = block.get("input")
                args: JsonDict = given if isinstance(given, dict) else {}
                mcp = _mcp_name(name)
                if name == "Bash":
                    command = str(args.get("command", ""))
                    self._bash[tid] = command
                    out.append(("command.started", {"id": tid, "command": command}))
                elif mcp is not None:
                    self._mcp[tid] = (*mcp, args)
                    out.append(self.mcp_started(tid, *mcp, args))
                else:
                    self._tools[tid] = name
                    text = tail(json.dumps(args), self.cfg.max_output_chars)
                    out.append(("tool.started", {"id": tid, "name": name, "input": text}))
        return out

    def _tool_results(self, data: JsonDict) -> list[Event]:
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        out: list[Event] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tid = str(block.get("tool_use_id"))
            text = _text_of(block.get("content"))
            is_error = block.get("is_error") is True
            if tid in self._bash:
                match = _EXIT_CODE.match(text) if is_error else None
                exit_code = int(match.group(1)) if match else (None if is_error else 0)
                event: JsonDict = {
                    "id": tid,
                    "command": self._bash.pop(tid),
                    "exit_code": exit_code,
                    "status": "failed" if is_error else "completed",
                    "output": tail(text, self.cfg.max_output_chars),
                }
                out.append(("command.completed", event))
            elif tid in self._mcp:
                server, tool, args = self._mcp.pop(tid)
                answer = {"error": text} if is_error else {"result": text}
                out.append(self.mcp_completed(tid, server, tool, args, **answer))
            else:
                name = self._tools.pop(tid, None)
                out.append(("tool.completed", {"id": tid, "name": name, "is_error": is_error}))
        return out

    def _result(self, data: JsonDict) -> list[Event]:
        reported = data.get("usage")
        usage: JsonDict = reported if isinstance(reported, dict) else {}
        out: list[Event] = [("usage", dict(usage))]
        text = str(data.get("result") or "")
        if data.get("is_error") is True or data.get("subtype") != "success":
            why = text or str(data.get("subtype"))
            out.append(self.error(f"claude: {why}", True))
            return out
        if text:
            self.message(text)  # the CLI's final answer is the summary
        extra: JsonDict = {
            "num_turns": data.get("num_turns"),
            "cost_usd": data.get("total_cost_usd"),
        }
        denials = data.get("permission_denials")
        if isinstance(denials, list) and denials:
            # Tools the permission settings refused: say so rather than fail silently.
            extra["permission_denials"] = denials[:20]
        out.append(self.result(usage, **extra))
        return out

    def _tool_server_status(self, servers: JsonValue) -> list[Event]:
        """An error when the turn's tool server did not connect: fatal if it failed
        (the turn would run without the tools it was given)."""
        if self.request.tools is None:
            return []
        listed = servers if isinstance(servers, list) else []
        status = next(
            (
                s.get("status")
                for s in listed
                if isinstance(s, dict) and s.get("name") == TOOLS_SERVER_NAME
            ),
            None,
        )
        if status == "connected":
            return []
        message = f"claude: the turnkeeper tool server is {status or 'missing'}"
        return [self.error(message, status in ("failed", None))]


def _mcp_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of an MCP tool's name ``mcp__<server>__<tool>``, else None."""
    if not name.startswith(_MCP_PREFIX):
        return None
    server, sep, tool = name[len(_MCP_PREFIX) :].partition("__")
    return (server, tool) if sep and server and tool else None


def _text_of(content: JsonValue) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and "text" in b
        )
    return "" if content is None else str(content)


class ClaudeHost(LayeredConfig[ClaudeHostConfig]):
    """Host kind ``claude``; config: :class:`ClaudeHostConfig`."""

    kind = "claude"
    config_model = ClaudeHostConfig

    def session_artifact(self, handle: str, workspace: Path) -> Path | None:
        return _find_transcript(self.config_for(), handle, workspace)

    def private_dirs(self) -> list[Path]:
        """Where the CLI keeps its transcripts (runtime/workspaces/private_dirs.py)."""
        return [config_dir(self.config_for())]

    def start(self, request: TurnRequest) -> SubprocessRun:
        cfg = self.config_for(request)
        binary = resolve_binary(cfg.binary, "claude")
        session_id = request.host_session_handle or session_id_for(request.turn_id)
        updater = None if env_value(cfg, "DISABLE_AUTOUPDATER") else "1"
        extra: dict[str, str | None] = {
            "CLAUDE_CONFIG_DIR": str(config_dir(cfg)) if cfg.config_dir else None,
            "DISABLE_AUTOUPDATER": updater,
        }
        mcp_file = None
        if request.tools is not None:
            mcp_file = write_mcp_config(request.tools)
            # Wait for the tool server before the first model request, at most this long.
            extra["MCP_CONNECTION_NONBLOCKING"] = "0"
            extra["MCP_TIMEOUT"] = str(TOOL_STARTUP_SECONDS * 1000)
        env = merged_env(cfg, extra)
        adapter = ClaudeAdapter(cfg, request, session_id)
        args = build_command(cfg, request, binary, session_id, mcp_file)
        return start_cli(request, cfg, args, env, adapter)
