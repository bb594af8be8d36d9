"""What the Codex CLI and Claude Code hosts share: config, binaries, the session file,
the turn's result, and the run adapter that translates a CLI's JSON events.

Both hosts are the subprocess host (:func:`~turnkeeper.hosts.subprocess_host.spawn`)
with ``jsonl`` events, the instructions on stdin and a :class:`CliAdapter` that
turns the CLI's own event stream into turnkeeper host events:

==================  ==========================================================
``session.bound``   ``{handle}``: the CLI's thread / session id (binds the session)
``turn.started``    the CLI started working on the prompt
``message``         ``{text}``: an agent message
``reasoning``       ``{text}``: a reasoning summary (Codex)
``command.started`` ``{id, command}``: a shell command the agent runs
``command.completed`` ``{id, command, exit_code, status, output}`` (output's tail)
``tool.started`` /  ``{id, name, ...}``: any other tool call and its end; a call of an
``tool.completed``  MCP server's tool is ``{id, name, server, tool, arguments}`` (its
                    JSON clipped to ``max_output_chars``), completed with ``result``
                    (the answer's text, its tail) or ``error``
``error``           ``{message, fatal}``: ``fatal`` ones fail the turn
``usage``           token counts as the CLI reports them
``result``          ``{summary, usage}`` at the CLI's successful end of turn
``<cli>.<type>``    any event type the adapter does not know, passed through as is
==================  ==========================================================

The turn's result (what the write-back reads) is ``summary`` plus, when the turn
works on a todo, ``todo_done`` and ``evidence`` derived from the host config::

    "complete_todo": "on_success",      # or "on_marker" (final message contains
    "done_marker": "TODO DONE",         #   done_marker) or "never"
    "evidence": {                       # per todo id, todo title, or "*" for any todo
      "t-docs": [{"key": "docs-build", "command": "make docs", "freshness_seconds": 3600}]
    }

The write-back runs each evidence command again in the worktree (the agent's word
is not proof) and the kernel completes the todo only if the evidence its
``required_evidence`` names passes.

A turn with tools (``TurnRequest.tools``) hands the CLI the turn's tool server as the
MCP server ``turnkeeper`` (each host says how; nothing for the user to configure),
with room to start (:data:`TOOL_STARTUP_SECONDS`) and to run a check
(:data:`TOOL_CALL_SECONDS`). When the agent called any tool of that server in the
turn, it reported through its tools: ``complete_todo`` and ``evidence`` do not decide
the turn's ``todo_done`` — the result carries neither, and the driver merges the
turn's tool calls into it. A turn whose agent called none is decided by the config as
without tools.

The CLI's session file is the host session artifact. After a successful turn its
digest goes into the result as ``host_artifact: {path, sha256, bytes}``; a missing
or truncated file fails the turn with error kind ``protocol`` naming the file, and
so does a resume whose file is missing or truncated (checked before the CLI runs).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from turnkeeper.errors import FailedPrecondition
from turnkeeper.hosts.base import (
    TOOLS_SERVER_NAME,
    HostOutcome,
    HostSpawnFailed,
    TurnRequest,
)
from turnkeeper.hosts.completion import (
    DEFAULT_COMPLETION_RULE,
    DEFAULT_DONE_MARKER,
    CompletionRule,
    DoneMarker,
    completes_todo,
)
from turnkeeper.hosts.launch import PassedName
from turnkeeper.hosts.subprocess_config import SubprocessHostConfig, validate_config
from turnkeeper.hosts.subprocess_host import SubprocessRun, spawn
from turnkeeper.json_types import JsonDict, JsonValue
from turnkeeper.vocabulary import HostErrorKind, HostStatus

#: The versions ``scripts/install_agent_clis.sh`` installs and the tests run against.
CODEX_VERSION = "0.171.0"
CLAUDE_CODE_VERSION = "2.1.197"
AGENT_CLIS_DIR_ENV = "TURNKEEPER_AGENT_CLIS_DIR"
AGENT_CLIS_CACHE_ENV = "TURNKEEPER_AGENT_CLIS_CACHE"

#: How long a CLI waits for the turn's tool server to start (a fresh Python process
#: importing turnkeeper on a busy machine takes seconds, not the CLIs' 10 s default).
TOOL_STARTUP_SECONDS = 30
#: How long one tool call may take: ``record_evidence`` runs the user's check for up to
#: 600 s (turnkeeper/tools/checks.py ``CHECK_TIMEOUT_SECONDS``), plus room to answer.
TOOL_CALL_SECONDS = 620

Event = tuple[str, JsonDict]


@dataclass(frozen=True)
class SessionFiles:
    """Where a CLI keeps its session files: ``find(handle)`` gives the file (None if
    there is none), ``expected(handle)`` says where it should be, for messages."""

    find: Callable[[str], Path | None]
    expected: Callable[[str], str]


# --- config --------------------------------------------------------------------------


class EvidenceSpec(BaseModel):
    """A check the write-back runs in the worktree after the turn, bound to its revision."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(min_length=1)
    command: str = Field(min_length=1)
    freshness_seconds: int = Field(default=3600, gt=0)


# The variables each CLI reads for its keys and provider settings: passed to it from
# the environment ``run`` started in (Bedrock or Vertex settings: name them in pass_env).
CLI_ENV: dict[str, tuple[str, ...]] = {
    "codex": ("OPENAI_*", "CODEX_*", "AZURE_OPENAI_*"),
    "claude": ("ANTHROPIC_*", "CLAUDE_*", "DISABLE_AUTOUPDATER", "IS_SANDBOX"),
}


class AgentCliConfig(BaseModel):
    """Settings both agent CLI hosts understand (see each host for its own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # A path, or a name looked up on PATH. Default: the CLI on PATH, else the install
    # cache of scripts/install_agent_clis.sh.
    binary: str | None = None
    # None: whatever the user's own CLI configuration selects.
    model: str | None = None
    # Added to the environment (no secrets: hosts/launch.py, boundary/config_secrets.py).
    env: dict[str, str] = Field(default_factory=dict)
    # More of the environment ``run`` started in than the core and the CLI's own
    # variables (``CLI_ENV``): names, or prefixes ending in ``*``.
    pass_env: list[PassedName] = Field(default_factory=list, max_length=256)
    # Appended to the CLI's arguments, before the prompt.
    extra_args: list[str] = Field(default_factory=list)
    # The same rule, and default, as a plain command's (hosts/completion.py).
    complete_todo: CompletionRule = DEFAULT_COMPLETION_RULE
    done_marker: DoneMarker = DEFAULT_DONE_MARKER
    evidence: dict[str, list[EvidenceSpec]] = Field(default_factory=dict)
    # Check the session file before a resume and digest it after a turn.
    require_session_artifact: bool = True
    # Bounds on what goes into the journal: a command's output tail, the summary.
    max_output_chars: int = Field(default=4000, ge=0)
    max_summary_chars: int = Field(default=16000, ge=0)
    kill_stragglers: bool = True
    drain_seconds: float = Field(default=2.0, ge=0)


ConfigT = TypeVar("ConfigT", bound=AgentCliConfig)


class LayeredConfig(Generic[ConfigT]):
    """An agent CLI host's configuration: what it was loaded with, checked at load (not
    at the first turn), with a turn's own ``host_config`` layered on top."""

    config_model: type[ConfigT]

    def __init__(self, config: Mapping[str, object] | None = None) -> None:
        self._config = dict(config or {})
        validate_config(self.config_model, self._config)

    def config_for(self, request: TurnRequest | None = None) -> ConfigT:
        layers = [self._config] + ([request.host_config] if request is not None else [])
        cfg: ConfigT = validate_config(self.config_model, *layers)
        return cfg


def merged_env(cfg: AgentCliConfig, extra: Mapping[str, str | None]) -> dict[str, str]:
    """The config's ``env`` plus host-derived variables (None: leave it unset)."""
    env = {k: v for k, v in extra.items() if v is not None}
    env.update(cfg.env)
    return env


def env_value(cfg: AgentCliConfig, name: str) -> str | None:
    """A variable as the CLI will see it: config ``env`` over the inherited environment."""
    return cfg.env.get(name) or os.environ.get(name) or None


# --- binaries ------------------------------------------------------------------------


def install_cache_dir() -> Path:
    """Where ``scripts/install_agent_clis.sh`` puts the pinned CLIs."""
    explicit = os.environ.get(AGENT_CLIS_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    root = os.environ.get(AGENT_CLIS_CACHE_ENV)
    if root:
        base = Path(root).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "turnkeeper-agent-clis"
    return base / f"codex-{CODEX_VERSION}_claude-code-{CLAUDE_CODE_VERSION}"


def cached_binary(name: str) -> Path | None:
    """``node_modules/.bin/<name>`` of a complete install cache, if there is one."""
    root = install_cache_dir()
    path = root / "node_modules" / ".bin" / name
    if (root / ".complete").is_file() and os.access(path, os.X_OK):
        return path
    return None


def resolve_binary(configured: str | None, name: str) -> Path:
    """The CLI to run: the configured one, else ``name`` on PATH, else the install cache."""
    hint = (
        f"set the host config's 'binary', put {name} on PATH, or run scripts/install_agent_clis.sh"
    )
    if configured:
        found = shutil.which(os.path.expanduser(configured))
        if found is None:
            raise HostSpawnFailed(f"{name} CLI not found at {configured!r}: {hint}")
        return Path(found)
    on_path = shutil.which(name)
    if on_path is not None:
        return Path(on_path)
    cached = cached_binary(name)
    if cached is not None:
        return cached
    raise HostSpawnFailed(f"{name} CLI not found: {hint}")


# --- the session file (host session artifact) ----------------------------------------


class SessionArtifactError(FailedPrecondition):
    """The CLI's session file is missing or not a complete JSONL transcript."""

    def __init__(self, message: str, path: Path | None):
        super().__init__(message, reason="host_session_artifact", details={"path": str(path or "")})
        self.path = path


@dataclass(frozen=True)
class ArtifactDigest:
    path: Path
    sha256: str
    size: int

    def as_result(self) -> JsonDict:
        return {"path": str(self.path), "sha256": self.sha256, "bytes": self.size}


def check_session_file(path: Path | None, what: str, expected: str = "") -> ArtifactDigest:
    """Digest a session file, or raise :class:`SessionArtifactError` naming it.

    Complete means: it exists, is not empty, ends with a newline, and every line
    is a JSON object. A file cut short by a crash fails the last two. ``expected``
    names the file in the message when ``path`` is None (nothing was found).
    """
    if path is None or not path.is_file():
        name = path or expected or "(unknown)"
        raise SessionArtifactError(f"{what}: session file {name} is missing", path)
    data = path.read_bytes()
    if not data.strip():
        raise SessionArtifactError(f"{what}: session file {path} is empty", path)
    if not data.endswith(b"\n"):
        raise SessionArtifactError(
            f"{what}: session file {path} is truncated (its last line is incomplete)", path
        )
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            ok = isinstance(json.loads(line), dict)
        except (UnicodeDecodeError, json.JSONDecodeError):
            ok = False
        if not ok:
            raise SessionArtifactError(
                f"{what}: session file {path} is corrupt or truncated "
                f"(line {number} is not a JSON object)",
                path,
            )
    return ArtifactDigest(path=path, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


# --- the turn's result ---------------------------------------------------------------


def todo_result(cfg: AgentCliConfig, request: TurnRequest, summary: str) -> JsonDict:
    """``todo_done`` and ``evidence`` for a successful turn on a todo, from the config."""
    if request.todo_id is None:
        return {}
    done = completes_todo(cfg.complete_todo, cfg.done_marker in summary)
    specs: list[EvidenceSpec] = []
    for key in (request.todo_id, request.todo_title, "*"):
        if key is not None and key in cfg.evidence:
            specs = cfg.evidence[key]
            break
    return {
        "todo_done": done,
        "evidence": [spec.model_dump() for spec in specs],
    }


def tail(text: str, limit: int) -> str:
    if limit <= 0:
        return ""
    return text if len(text) <= limit else "…" + text[-limit:]


def clipped(value: JsonValue, limit: int) -> JsonValue:
    """``value`` as is if its JSON fits in ``limit`` characters, else the start of its
    JSON text (a tool call's arguments: their start names what was asked)."""
    text = json.dumps(value)
    if len(text) <= limit:
        return value
    return text[: max(limit, 0)] + "…"


# --- the run adapter -----------------------------------------------------------------


class CliAdapter:
    """Translates one CLI run's events and finishes its outcome. Subclassed per CLI."""

    cli = "cli"

    def __init__(
        self,
        cfg: AgentCliConfig,
        request: TurnRequest,
        files: SessionFiles,
    ) -> None:
        self.cfg = cfg
        self.request = request
        self.files = files
        self.summary = ""
        self.handle: str | None = None
        self.last_error: str | None = None
        # The agent called a tool of the turn's own server: it reported through its
        # tools, so the config's completion rule does not decide the turn.
        self.reported_through_tools = False

    # Subclasses implement ``translate``.
    def translate(self, kind: str, data: JsonDict) -> list[Event]:
        raise NotImplementedError

    def bind(self, handle: object, expected: str | None = None) -> list[Event]:
        """``session.bound`` for the CLI's id, or a fatal error if it is not the one
        this turn resumes (or chose up front): a silent fork would lose the context."""
        want = expected or self.request.host_session_handle
        if not isinstance(handle, str) or not handle:
            message = f"{self.cli} reported no usable session id: {handle!r}"
            return [self.error(message, True, HostErrorKind.PROTOCOL)]
        if want is not None and handle != want:
            message = f"{self.cli} reported session {handle!r} where {want!r} was expected"
            return [self.error(message, True, HostErrorKind.PROTOCOL)]
        if self.handle == handle:
            return []
        self.handle = handle
        return [("session.bound", {"handle": handle, "cli": self.cli})]

    def check_artifact(self, handle: str, what: str) -> ArtifactDigest:
        return check_session_file(self.files.find(handle), what, self.files.expected(handle))

    def error(
        self, message: str, fatal: bool, kind: HostErrorKind = HostErrorKind.EXIT_CODE
    ) -> Event:
        self.last_error = message
        data: JsonDict = {"message": message, "fatal": fatal}
        if fatal:
            data["error_kind"] = kind.value
        return ("error", data)

    def message(self, text: str, **extra: JsonValue) -> Event:
        """An agent message; the last one is the turn's summary."""
        self.summary = text[: self.cfg.max_summary_chars]
        return ("message", {**extra, "text": self.summary})

    def result(self, usage: JsonDict | None, **extra: JsonValue) -> Event:
        return ("result", {"summary": self.summary, "usage": usage or {}, **extra})

    def mcp_started(self, tid: JsonValue, server: str, tool: str, arguments: JsonValue) -> Event:
        """``tool.started`` for a call of MCP server ``server``'s ``tool``."""
        if server == TOOLS_SERVER_NAME:
            self.reported_through_tools = True
        return ("tool.started", self._mcp_data(tid, server, tool, arguments))

    def mcp_completed(
        self,
        tid: JsonValue,
        server: str,
        tool: str,
        arguments: JsonValue,
        *,
        result: str | None = None,
        error: str | None = None,
    ) -> Event:
        """``tool.completed`` with the answer's tail (``result``) or the ``error``."""
        data = self._mcp_data(tid, server, tool, arguments)
        limit = self.cfg.max_output_chars
        if error is not None:
            data["error"] = tail(error, limit)
        else:
            data["result"] = tail(result or "", limit)
        return ("tool.completed", data)

    def _mcp_data(self, tid: JsonValue, server: str, tool: str, arguments: JsonValue) -> JsonDict:
        return {
            "id": tid,
            "name": f"mcp__{server}__{tool}",
            "server": server,
            "tool": tool,
            "arguments": clipped(arguments, self.cfg.max_output_chars),
        }

    def finish(self, outcome: HostOutcome) -> HostOutcome:
        if not outcome.succeeded:
            generic = outcome.message.startswith("host exited with code")
            if outcome.error_kind is HostErrorKind.EXIT_CODE and generic:
                # A bare exit code says little; the CLI's own last error says why
                # (an event, or else the last line it printed on stderr).
                lines = [ln.strip() for ln in outcome.stderr_tail.splitlines() if ln.strip()]
                why = self.last_error or (lines[-1][:500] if lines else "")
                if why:
                    message = f"{self.cli} {outcome.message[5:]}: {why}"
                    return outcome.model_copy(update={"message": message})
            return outcome
        result = dict(outcome.result)
        result.setdefault("summary", self.summary)
        summary = str(result.get("summary") or "")
        if self.reported_through_tools:
            # The agent's tool calls decide (merged by the driver), not the config: a
            # ``todo_done`` here came from the completion rule of a CLI that ended
            # without a result event.
            result.pop("todo_done", None)
        else:
            result.update(todo_result(self.cfg, self.request, summary))
        if self.cfg.require_session_artifact:
            handle = outcome.host_session_handle
            try:
                if handle is None:
                    raise SessionArtifactError(
                        f"{self.cli} finished the turn without reporting a session id", None
                    )
                digest = self.check_artifact(handle, f"{self.cli} session {handle}")
            except SessionArtifactError as exc:
                return protocol_failure(outcome, exc.message, result)
            result["host_artifact"] = digest.as_result()
        return outcome.model_copy(update={"result": result})


def protocol_failure(outcome: HostOutcome, message: str, result: JsonDict) -> HostOutcome:
    data = outcome.model_dump() | {
        "status": HostStatus.FAILED,
        "error_kind": HostErrorKind.PROTOCOL,
        "message": message,
        "result": result,
    }
    return HostOutcome.model_validate(data)


# --- starting a run ------------------------------------------------------------------

# The "host process" of a turn refused before the CLI starts (its resume target is
# unusable): it reports the typed failure as a fatal event, so the turn has a real
# process, a receipt and a host recovery record like any other failed host step.
_REPORTER = (
    "import json, sys\n"
    'print(json.dumps({"kind": "error", "data": json.loads(sys.argv[1])}), flush=True)\n'
    "sys.exit(1)\n"
)


def report_failure(
    request: TurnRequest, message: str, kind: HostErrorKind, cfg: AgentCliConfig
) -> SubprocessRun:
    data = {"message": message, "fatal": True, "error_kind": kind.value}
    sub = SubprocessHostConfig(
        command=[sys.executable, "-I", "-c", _REPORTER, json.dumps(data)],
        event_format="jsonl",
        inherit_env=False,
        kill_stragglers=cfg.kill_stragglers,
    )
    return spawn(request, sub)


def start_cli(
    request: TurnRequest,
    cfg: AgentCliConfig,
    args: list[str],
    env: dict[str, str],
    adapter: CliAdapter,
) -> SubprocessRun:
    """Run the CLI for one turn: instructions on stdin, JSON events on stdout."""
    if request.host_session_handle is not None and cfg.require_session_artifact:
        handle = request.host_session_handle
        try:
            adapter.check_artifact(handle, f"cannot resume {adapter.cli} session {handle}")
        except SessionArtifactError as exc:
            return report_failure(request, exc.message, HostErrorKind.PROTOCOL, cfg)
    sub = SubprocessHostConfig(
        command=args,
        event_format="jsonl",
        stdin="instructions",
        env=env,
        # The CLI's keys and provider settings pass; the rest only when named.
        pass_env=[*CLI_ENV.get(adapter.cli, ()), *cfg.pass_env],
        # The adapter's result always wins; the rule matters only if the CLI ends
        # without one, and then it is the CLI host's own.
        complete_todo=cfg.complete_todo,
        done_marker=cfg.done_marker,
        # The adapter emits ``session.bound {handle}`` and ``result``: the defaults.
        kill_stragglers=cfg.kill_stragglers,
        drain_seconds=cfg.drain_seconds,
    )
    return spawn(request, sub, adapter=adapter)


# --- small helpers -------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_value(value: JsonValue) -> str:
    """A JSON-like value as a TOML literal, for ``codex -c key=value``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic strings
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (
            f"{k if _BARE_KEY.match(k) else json.dumps(k)} = {toml_value(v)}"
            for k, v in value.items()
        )
        return "{" + ", ".join(items) + "}"
    raise ValueError(f"no TOML form for {type(value).__name__}")
