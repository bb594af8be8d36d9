"""Host kind ``codex``: OpenAI Codex CLI (``codex exec --json``), resumed by thread id.

A turn runs ``codex exec --json [-m MODEL] [-c ...] -C <worktree> -- -`` with the
instructions on stdin; a later turn of the same session runs ``codex exec resume
--json [...] -- <thread id> -``. The CLI's ``thread.started.thread_id`` is the host
session handle. Example host config (all keys optional)::

    {
      "binary": "codex",                  # default: codex on PATH, else the install cache
      "model": "gpt-5-codex",             # default: the user's config.toml
      "sandbox": "workspace-write",       # -c sandbox_mode=...; null: the user's config
      "approval_policy": "never",         # -c approval_policy=...; null: the user's config
      "codex_home": "~/.codex-work",      # sets CODEX_HOME; default: inherited / ~/.codex
      "config": {"model_reasoning_effort": "high"},   # more -c key=value (TOML values)
      "env": {"OPENAI_BASE_URL": "..."},  # added to the environment (no secrets)
      "pass_env": ["MY_PROVIDER_KEY"],    # from run's environment, beyond OPENAI_*,
                                          # CODEX_*, AZURE_OPENAI_* and the core
      "evidence": {"*": [{"key": "tests", "command": "pytest -q"}]}
    }

Defaults are the safe ones for unattended turns: ``workspace-write`` (writes only
in the worktree and temp dirs, no network for commands) and ``never`` ask for
approval (nobody is there to answer; a refused command is reported to the model).
Everything else — API keys, ``OPENAI_BASE_URL``, providers, profiles, ``CODEX_HOME``
— comes from the user's own environment and ``config.toml``, untouched.

The session file (host session artifact) is
``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<timestamp>-<thread id>.jsonl``: see
:func:`session_artifact`. The npm package's ``bin/codex.js`` is a Node wrapper;
the host runs the native binary it wraps so signals reach the CLI itself.

A turn with tools (``TurnRequest.tools``) adds the turn's tool server as MCP server
``turnkeeper`` with ``-c`` overrides (:func:`tool_overrides`): ``command``, ``args``;
``env_vars``, the names of the tool server's variables and the turn's markers, which
Codex copies from its own environment (where the host puts them) — Codex starts an MCP
server with a short list of its own variables only (``HOME``, ``PATH``, the locale),
and the capability token stays off the command line, which any local user can read;
``required = true`` (the CLI waits for the server before the first model request and
fails the turn if it cannot start, instead of a turn without its tools);
``startup_timeout_sec`` and ``tool_timeout_sec``; and ``default_tools_approval_mode =
"approve"`` (with ``approval_policy = "never"`` Codex refuses every MCP tool call
that needs approval, and by default they all do). The model sees them as the
namespace ``mcp__turnkeeper``; the JSON stream reports each call as an
``mcp_tool_call`` item.

Observed on 0.171.0: a command the sandbox refuses at once is reported to the model
but not as a ``command_execution`` item (so no ``command.*`` event); when the control
plane dies, Codex panics at its next write to the broken pipe and ends its
command's process group, while a SIGKILL of Codex itself leaves its commands
running (the host and restart recovery end them by marker).
"""

from __future__ import annotations

import glob
import json
import os
import platform
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
    toml_value,
)
from turnkeeper.hosts.base import (
    ATTEMPT_ENV,
    MARKER_ENV,
    SESSION_ENV,
    TOOLS_SERVER_NAME,
    ToolServer,
    TurnRequest,
)
from turnkeeper.hosts.subprocess_config import validate_config
from turnkeeper.hosts.subprocess_host import SubprocessRun
from turnkeeper.json_types import JsonDict, JsonValue

_TRIPLES = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl"}
_TOOL_ITEMS = ("web_search", "todo_list", "collab_tool_call", "image_view")


class CodexHostConfig(AgentCliConfig):
    sandbox: Literal["read-only", "workspace-write", "danger-full-access"] | None = (
        "workspace-write"
    )
    approval_policy: Literal["untrusted", "on-failure", "on-request", "never"] | None = "never"
    codex_home: str | None = None
    # Extra ``-c key=value`` overrides; values are written as TOML.
    config: dict[str, JsonValue] = Field(default_factory=dict)
    skip_git_repo_check: bool = False
    # Run the native binary behind the npm package's Node wrapper.
    native: bool = True


def codex_home(cfg: CodexHostConfig) -> Path:
    if cfg.codex_home:
        return Path(cfg.codex_home).expanduser()
    value = env_value(cfg, "CODEX_HOME")
    return Path(value).expanduser() if value else Path.home() / ".codex"


def session_artifact(config: Mapping[str, object], handle: str) -> Path | None:
    """The rollout file of Codex thread ``handle`` under the host config, or None.

    ``config`` is the session's host config (the same dict the host was loaded with).
    """
    cfg: CodexHostConfig = validate_config(CodexHostConfig, dict(config))
    return _find_rollout(cfg, handle)


def _find_rollout(cfg: CodexHostConfig, handle: str) -> Path | None:
    sessions = codex_home(cfg) / "sessions"
    pattern = f"*/*/*/rollout-*-{glob.escape(handle)}.jsonl"
    found = sorted(sessions.glob(pattern), key=lambda p: p.name)
    return found[-1] if found else None


def session_files(cfg: CodexHostConfig) -> SessionFiles:
    home = codex_home(cfg)
    return SessionFiles(
        find=lambda handle: _find_rollout(cfg, handle),
        expected=lambda handle: f"{home}/sessions/YYYY/MM/DD/rollout-*-{handle}.jsonl",
    )


def native_binary(path: Path) -> Path:
    """The native executable behind ``@openai/codex/bin/codex.js``, else ``path``."""
    real = path.resolve()
    if real.name != "codex.js" or real.parent.name != "bin":
        return path
    package = real.parent.parent  # node_modules/@openai/codex
    triple = _TRIPLES.get(platform.machine())
    if triple is None or platform.system() != "Linux":
        return path
    arch = "x64" if triple.startswith("x86_64") else "arm64"
    for vendor in (package.parent / f"codex-linux-{arch}" / "vendor", package / "vendor"):
        candidate = vendor / triple / "bin" / "codex"
        if os.access(candidate, os.X_OK):
            return candidate
    return path


def tool_overrides(tools: ToolServer) -> dict[str, JsonValue]:
    """The ``-c`` overrides that give Codex the turn's tool server (module docstring)."""
    key = f"mcp_servers.{TOOLS_SERVER_NAME}"
    # Sorted: the same turn gets the same command line.
    names = sorted({*tools.env, MARKER_ENV, SESSION_ENV, ATTEMPT_ENV})
    return {
        f"{key}.command": tools.command[0],
        f"{key}.args": list(tools.command[1:]),
        f"{key}.env_vars": list(names),
        f"{key}.required": True,
        f"{key}.startup_timeout_sec": TOOL_STARTUP_SECONDS,
        f"{key}.tool_timeout_sec": TOOL_CALL_SECONDS,
        f"{key}.default_tools_approval_mode": "approve",
    }


def build_command(cfg: CodexHostConfig, request: TurnRequest, binary: Path) -> list[str]:
    args = [str(binary), "exec"]
    if request.host_session_handle:
        args.append("resume")
    args.append("--json")
    if cfg.model:
        args += ["-m", cfg.model]
    overrides: dict[str, JsonValue] = {}
    if cfg.sandbox:
        overrides["sandbox_mode"] = cfg.sandbox
    if cfg.approval_policy:
        overrides["approval_policy"] = cfg.approval_policy
    overrides.update(cfg.config)
    if request.tools is not None:
        overrides.update(tool_overrides(request.tools))  # after the config: these win
    for key, value in overrides.items():
        args += ["-c", f"{key}={toml_value(value)}"]
    if cfg.skip_git_repo_check:
        args.append("--skip-git-repo-check")
    if not request.host_session_handle:
        args += ["-C", str(request.workspace)]  # resume takes the process's cwd instead
    args += cfg.extra_args
    args.append("--")
    if request.host_session_handle:
        args.append(request.host_session_handle)
    args.append("-")  # the prompt comes on stdin: no argv limits, not visible in ps
    return args


class CodexAdapter(CliAdapter):
    cli = "codex"

    def translate(self, kind: str, data: JsonDict) -> list[Event]:
        if kind == "thread.started":
            return self.bind(data.get("thread_id"))
        if kind == "turn.started":
            return [("turn.started", {})]
        if kind in ("item.started", "item.updated", "item.completed"):
            item = data.get("item")
            if isinstance(item, dict):
                return self._item(kind.removeprefix("item."), item)
        if kind == "turn.completed":
            reported = data.get("usage")
            usage: JsonDict = reported if isinstance(reported, dict) else {}
            return [("usage", dict(usage)), self.result(usage)]
        if kind == "turn.failed":
            error = data.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            return [self.error(f"codex turn failed: {message or data}", True)]
        if kind == "error":
            return [self.error(f"codex: {data.get('message', data)}", False)]
        return [(f"codex.{kind}", data)]

    def _item(self, phase: str, item: JsonDict) -> list[Event]:
        type_ = item.get("type")
        iid = item.get("id")
        if type_ == "command_execution":
            if phase == "started":
                return [("command.started", {"id": iid, "command": item.get("command")})]
            if phase == "completed":
                output = str(item.get("aggregated_output") or "")
                return [
                    (
                        "command.completed",
                        {
                            "id": iid,
                            "command": item.get("command"),
                            "exit_code": item.get("exit_code"),
                            "status": item.get("status"),
                            "output": tail(output, self.cfg.max_output_chars),
                        },
                    )
                ]
            return []
        if phase != "completed" and type_ in ("agent_message", "reasoning", "error"):
            return []
        if type_ == "agent_message":
            return [self.message(str(item.get("text") or ""), id=iid)]
        if type_ == "reasoning":
            return [("reasoning", {"id": iid, "text": item.get("text")})]
        if type_ == "error":
            return [self.error(f"codex: {item.get('message', item)}", False)]
        if type_ == "file_change":
            if phase != "completed":
                return []
            return [("files.changed", {"id": iid, "changes": item.get("changes"), **_status(item)})]
        if type_ == "mcp_tool_call":
            return self._mcp_item(phase, item)
        if type_ in _TOOL_ITEMS:
            if phase == "updated":
                return []
            name = "tool.started" if phase == "started" else "tool.completed"
            return [(name, {"id": iid, "name": type_, "item": item})]
        return [(f"codex.item.{phase}", item)]

    def _mcp_item(self, phase: str, item: JsonDict) -> list[Event]:
        iid = item.get("id")
        server = str(item.get("server") or "")
        tool = str(item.get("tool") or "")
        arguments = item.get("arguments")
        if phase == "started":
            return [self.mcp_started(iid, server, tool, arguments)]
        if phase != "completed":
            return []
        error = item.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        text = _result_text(item.get("result"))
        if message is None and item.get("status") == "failed":
            message = text or "failed"  # the server's own error result (is_error)
        if message is not None:
            return [self.mcp_completed(iid, server, tool, arguments, error=str(message))]
        return [self.mcp_completed(iid, server, tool, arguments, result=text)]


def _result_text(result: JsonValue) -> str:
    """The text of an MCP tool result (``{content: [{type: text, text}], ...}``), else
    its structured content as JSON."""
    if not isinstance(result, dict):
        return ""
    content = result.get("content")
    parts = content if isinstance(content, list) else []
    texts = [str(p.get("text")) for p in parts if isinstance(p, dict) and "text" in p]
    if texts:
        return "\n".join(texts)
    structured = result.get("structured_content")
    return "" if structured is None else json.dumps(structured)


def _status(item: JsonDict) -> JsonDict:
    return {"status": item.get("status")} if "status" in item else {}


class CodexHost(LayeredConfig[CodexHostConfig]):
    """Host kind ``codex``; config: :class:`CodexHostConfig`."""

    kind = "codex"
    config_model = CodexHostConfig

    def session_artifact(self, handle: str, workspace: Path) -> Path | None:
        del workspace  # rollouts live under CODEX_HOME, whatever the workspace
        return _find_rollout(self.config_for(), handle)

    def private_dirs(self) -> list[Path]:
        """Where the CLI keeps its sessions' rollouts (runtime/workspaces/private_dirs.py)."""
        return [codex_home(self.config_for())]

    def start(self, request: TurnRequest) -> SubprocessRun:
        cfg = self.config_for(request)
        binary = resolve_binary(cfg.binary, "codex")
        if cfg.native:
            binary = native_binary(binary)
        env = merged_env(cfg, {"CODEX_HOME": str(codex_home(cfg)) if cfg.codex_home else None})
        adapter = CodexAdapter(cfg, request, session_files(cfg))
        return start_cli(request, cfg, build_command(cfg, request, binary), env, adapter)
