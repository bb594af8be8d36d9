"""The host contract: what a turn driver hands a host and what it gets back.

A host executes one turn of an agent. The driver records ``turn.accepted``,
calls :meth:`Host.start`, records :attr:`HostRun.identity`, consumes
:meth:`HostRun.events` by sequence number and finally records the
:class:`HostOutcome` of :meth:`HostRun.wait` as the turn's receipt.

Every model here is frozen JSON-able pydantic so it can go into the journal as is.
The process identity and the events are the kernel's own records
(:mod:`turnkeeper.host_reports`): what a host reports is journaled unconverted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from turnkeeper.brief import TurnBrief
from turnkeeper.errors import FailedPrecondition

# Named from here by the hosts, as the rest of the contract.
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.json_types import JsonDict
from turnkeeper.vocabulary import HostErrorKind, HostStatus, TurnKind

# How a turn function written in Python reports an event (``kind``, ``data``), in
# process or under the Python runner.
Emit = Callable[[str, JsonDict], None]

#: The environment variable that marks every process of a turn. It is inherited by
#: ``setsid`` grandchildren, which is how a restarted control plane finds them.
MARKER_ENV = "TURNKEEPER_TURN_ID"
SESSION_ENV = "TURNKEEPER_SESSION_ID"
ATTEMPT_ENV = "TURNKEEPER_ATTEMPT"


class TurnLimits(BaseModel):
    """How much of one turn's output is journaled, and how large its result may be.

    Output is measured per event as the compact JSON of its ``kind`` and ``data``.
    Once a turn reaches ``max_events`` or ``max_output_bytes``, the rest of its output
    is counted and digested but neither kept nor journaled (one ``output.truncated``
    event says what was cut; see :mod:`turnkeeper.hosts.output_cap`). A result larger
    than ``max_result_bytes`` fails the turn (``protocol``): it would go into the
    durable receipt whole.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_events: int = Field(default=10_000, ge=1)
    max_output_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    max_result_bytes: int = Field(default=1024 * 1024, ge=1)


#: How a turn's agent reaches its turnkeeper tools (turnkeeper/tools/): the channel
#: folder of the turn and the capability that binds a call to this turn alone.
TOOLS_DIR_ENV = "TURNKEEPER_TOOLS_DIR"
TOOLS_TOKEN_ENV = "TURNKEEPER_TOOLS_TOKEN"
#: The name every host gives the tools' MCP server (Codex: ``mcp__turnkeeper``).
TOOLS_SERVER_NAME = "turnkeeper"


class ToolServer(BaseModel):
    """The turn's tool server: a stdio MCP server an agent CLI starts (or an own agent
    runs), with the environment that binds it to this turn."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    # The tools it offers, as the agent calls them.
    names: list[str] = Field(default_factory=list)


class TurnRequest(BaseModel):
    """One turn as the host sees it (a projection of the turn envelope)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The marker value: no whitespace, "=" or NUL, so it is exact inside an environ entry.
    turn_id: str = Field(pattern=r"^[^\s=\x00]+$")
    session_id: str = Field(min_length=1)
    generation: int = Field(ge=0)
    attempt: int = Field(ge=1)
    kind: TurnKind
    instructions: str
    workspace: Path
    # The agent's own session id (Codex thread id, Claude session id, ...). Set on a
    # continuation so the host resumes the conversation instead of starting afresh.
    host_session_handle: str | None = None
    todo_id: str | None = None
    todo_title: str | None = None
    timeout_seconds: float = Field(default=3600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    # The environment the host's processes inherit in place of this process's own
    # (None): a runner's host inherits the environment of the control plane that asked
    # for the turn, with the host config's ``env`` over it as without a runner.
    inherited_env: dict[str, str] | None = None
    # Per-turn host settings; they override the config the host was loaded with.
    host_config: JsonDict = Field(default_factory=dict)
    # What of the turn's output the driver journals; a host keeps no more than this.
    limits: TurnLimits = Field(default_factory=TurnLimits)
    # What the agent is told, as a model (``instructions`` is its rendered text).
    brief: TurnBrief | None = None
    # The turnkeeper tools of this turn (None: the agent gets none).
    tools: ToolServer | None = None

    def for_host(self) -> JsonDict:
        """The request as a host's process reads it (its stdin): without the inherited
        environment, which the process has already and which must not be copied into
        files or transcripts an agent writes."""
        return self.model_dump(mode="json", exclude={"inherited_env"})


class KilledProcess(BaseModel):
    model_config = ConfigDict(frozen=True)

    pid: int
    start_time: int
    # Why it was a target: "identity" (the host process), "descendant", "marker".
    reason: str
    cmdline: str = ""


class KillReport(BaseModel):
    """What :func:`~turnkeeper.hosts.process_tree.kill_turn_processes` ended."""

    model_config = ConfigDict(frozen=True)

    turn_id: str
    killed: list[KilledProcess] = Field(default_factory=list)
    # Targets still present when the wait gave up (should stay empty: SIGKILL).
    survivors: list[int] = Field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.survivors


class HostOutcome(BaseModel):
    """How a host step ended: the payload of the turn's receipt."""

    model_config = ConfigDict(frozen=True)

    status: HostStatus
    error_kind: HostErrorKind | None = None
    exit_code: int | None = None
    signal: int | None = None
    message: str = ""
    # The handle the host bound (or was resumed with); None if it never bound one.
    host_session_handle: str | None = None
    # What the agent reported in its ``result`` event (summary, todo_done, evidence...).
    result: JsonDict = Field(default_factory=dict)
    last_seq: int = Field(default=0, ge=0)
    stderr_tail: str = ""
    # Marked processes still running after the host exited, ended by the host.
    stragglers_killed: list[int] = Field(default_factory=list)
    duration_seconds: float = 0.0
    # How the turn's processes were contained (turnkeeper.hosts.containment): a cgroup
    # of its own, orphans adopted by the control plane as subreaper, or neither.
    containment: Literal["cgroup", "subreaper", "none"] = "none"

    @model_validator(mode="after")
    def _error_kind_iff_failed(self) -> HostOutcome:
        if (self.status is HostStatus.FAILED) != (self.error_kind is not None):
            raise ValueError("error_kind is required for, and only for, a failed outcome")
        return self

    @property
    def succeeded(self) -> bool:
        return self.status is HostStatus.SUCCEEDED


@runtime_checkable
class HostRun(Protocol):
    """A running (or finished) turn of a host."""

    @property
    def identity(self) -> ProcessIdentity: ...

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        """Events with ``seq > after_seq`` in order.

        With ``follow`` the iterator blocks for new events and ends when the run
        has finished and every event was yielded; without it, it stops at the
        events available now.
        """
        ...

    def wait(self, timeout: float | None = None) -> HostOutcome:
        """Block until the run ends; raises ``Unavailable`` if ``timeout`` passes first."""
        ...

    def kill_tree(self) -> KillReport:
        """End the host process, its descendants and every marked process. Idempotent."""
        ...

    def is_alive(self) -> bool: ...


class WaitsForEvents(Protocol):
    """A run whose events its reader can wait for with a bound on the reader's own
    thread (a :class:`HostRun` may also offer this; the driver then needs no thread
    to follow :meth:`HostRun.events`)."""

    def next_events(self, after_seq: int, timeout: float | None) -> list[HostEvent] | None:
        """The events with ``seq > after_seq``, in order, waiting at most ``timeout``
        seconds (None: however long) for one: ``[]`` when none came in time, None once
        the run has finished and every event was read."""
        ...


@runtime_checkable
class Host(Protocol):
    """An adapter that runs turns. Loaded by :func:`turnkeeper.hosts.load_host`."""

    @property
    def kind(self) -> str: ...

    def start(self, request: TurnRequest) -> HostRun:
        """Start the turn; raises :class:`HostSpawnFailed` if no process started."""
        ...


@runtime_checkable
class KeepsSessionArtifact(Protocol):
    """A host whose agent keeps its session in a file (a transcript, a rollout): each
    turn's snapshot copies that file and a revert puts it back, so a resumed agent
    remembers exactly what the snapshot's workspace holds. A host without one (a
    plain command) does not implement this."""

    def session_artifact(self, handle: str, workspace: Path) -> Path | None:
        """Where the session ``handle`` of a host working in ``workspace`` keeps its
        file (None when it cannot be found)."""
        ...


@runtime_checkable
class KeepsPrivateDirs(Protocol):
    """A host whose agent keeps its own sessions in directories (an agent CLI's home):
    inside a workspace they are kept out of git (runtime/workspaces/private_dirs.py)."""

    def private_dirs(self) -> list[Path]: ...


class HostSpawnFailed(FailedPrecondition):
    """No host process started (missing binary, missing workspace, ...).

    ``outcome`` is the failed/``spawn`` outcome the driver records as the receipt.
    """

    def __init__(self, message: str, *, details: JsonDict | None = None):
        super().__init__(message, reason="host_spawn_failed", details=details)
        self.outcome = HostOutcome(
            status=HostStatus.FAILED, error_kind=HostErrorKind.SPAWN, message=message
        )
