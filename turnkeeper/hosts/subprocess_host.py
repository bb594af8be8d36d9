"""Run any command as a host: an agent CLI, a script, the Python runner, the scripted agent.

docs/agents.md is the contract for someone writing an agent of their own; this is
how the host implements it.

How a turn reaches the command (pick per host in config):

* placeholders in ``command`` / ``resume_command`` args: ``{instructions}``,
  ``{workspace}``, ``{turn_id}``, ``{session_id}``, ``{attempt}``, ``{handle}``,
  ``{todo_id}``, ``{todo_title}`` (plain substring replacement, so JSON braces in args are safe);
* ``stdin="instructions"`` writes the instructions to stdin and closes it;
  ``stdin="request"`` writes ``{"request": <TurnRequest>, "config": {...}}`` as JSON
  (how the Python and scripted hosts get their turn); the default ``"null"`` gives
  ``/dev/null`` (Codex waits on an open stdin).

Instructions are deliberately *not* put in the environment: it is inherited by every
shell command the agent runs, and Linux caps one variable at 128 KiB.

How it reports: with ``event_format="jsonl"`` each stdout line is an event
``{"kind": ..., "data": {...}}`` and a ``result`` event's data is the turn's result
(runtime/turn/agent_result.py says what it may hold). A turn that printed no result —
every ``text`` mode command, a ``jsonl`` one without that line — completes its todo
by ``complete_todo`` (default ``on_success``: exit 0 marks it done; ``on_marker``:
only if ``done_marker`` was printed; ``never``), see :mod:`turnkeeper.hosts.completion`.

``resume_command`` is used instead of ``command`` when the request carries a
``host_session_handle`` (e.g. ``codex exec resume --json {handle} {instructions}``).

A host built on :func:`spawn` may pass a :class:`RunAdapter` that translates each
parsed ``jsonl`` line into turnkeeper events and refines the final outcome (the Codex
CLI and Claude Code hosts do: see :mod:`turnkeeper.hosts.agent_cli`).

The process gets ``TURNKEEPER_TURN_ID`` / ``_SESSION_ID`` / ``_ATTEMPT`` / ``_TODO_ID``
on top of the inherited environment and runs in a session of its own, so it can be ended as a
tree and found by marker after a control-plane crash. Where the machine allows it,
it also runs in a cgroup of its own (see :mod:`turnkeeper.hosts.containment`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from turnkeeper.errors import Unavailable
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts import containment, host_process, process_tree
from turnkeeper.hosts._events import (
    EventLog,
    Line,
    LineBuffer,
    ProtocolError,
    dig,
    parse_jsonl_line,
)
from turnkeeper.hosts._pipes import serve
from turnkeeper.hosts.base import HostOutcome, HostSpawnFailed, KillReport, TurnRequest
from turnkeeper.hosts.completion import (
    completes_todo,
)
from turnkeeper.hosts.host_process import HostProcess
from turnkeeper.hosts.launch import (
    process_env,
    substitute,
    unrunnable,
    with_parent_death,
)
from turnkeeper.hosts.output_cap import carries_meaning, oversized_result
from turnkeeper.hosts.subprocess_config import (
    SubprocessHostConfig,
    validate_config,
    validated_config,
)
from turnkeeper.hosts.worker_threads import TURN_THREADS
from turnkeeper.json_types import JsonDict
from turnkeeper.vocabulary import HostErrorKind, HostStatus

log = logging.getLogger(__name__)


class RunAdapter(Protocol):
    """Optional per-run hooks for a host built on :func:`spawn` (e.g. an agent CLI).

    ``translate`` maps one parsed ``jsonl`` line ``(kind, data)`` to the host events
    it stands for (none, one or several); ``finish`` may refine the outcome once the
    process has ended (add to the result, or turn a success into a typed failure).
    Both run on the run's own threads; an exception in either becomes a ``protocol``
    failure of the turn, never a dead reader thread.
    """

    def translate(self, kind: str, data: JsonDict) -> list[tuple[str, JsonDict]]: ...

    def finish(self, outcome: HostOutcome) -> HostOutcome: ...


class SubprocessHost:
    """Host kind ``subprocess``: config is a :class:`SubprocessHostConfig` dict."""

    kind = "subprocess"

    def __init__(self, config: Mapping[str, object] | None = None) -> None:
        self._config = dict(config or {})
        # Fail at load, not at turn; kept, so a turn whose request overrides nothing
        # (every turn the driver starts) does not validate the same layers again, and
        # by content, as the driver loads the host anew for every turn.
        self._validated = validated_config(SubprocessHostConfig, self._config)

    def start(self, request: TurnRequest) -> SubprocessRun:
        cfg = (
            validate_config(SubprocessHostConfig, self._config, request.host_config)
            if request.host_config
            else self._validated
        )
        # Only a command that reads the request on stdin is handed it: building the
        # payload (the config dumped back to JSON) for any other was wasted per turn.
        payload: JsonDict | None = None
        if cfg.stdin == "request":
            payload = {"request": request.for_host(), "config": cfg.model_dump(mode="json")}
        return spawn(request, cfg, stdin_request=payload)


def turn_env(request: TurnRequest, cfg: SubprocessHostConfig) -> dict[str, str]:
    """The environment the turn's command runs in (see hosts/launch.py)."""
    return process_env(request, cfg.env, cfg.inherit_env, cfg.pass_env)


def spawn(
    request: TurnRequest,
    cfg: SubprocessHostConfig,
    *,
    stdin_request: JsonDict | None = None,
    adapter: RunAdapter | None = None,
) -> SubprocessRun:
    """Start the command for ``request``; ``HostSpawnFailed`` if it cannot start."""
    template = cfg.resume_command if request.host_session_handle and cfg.resume_command else None
    args = substitute(template or cfg.command, request)
    workspace = os.fspath(request.workspace)
    _check_workspace(workspace)
    stdin_data: bytes | None = None
    if cfg.stdin == "instructions":
        stdin_data = request.instructions.encode()
    elif cfg.stdin == "request":
        payload = stdin_request or {"request": request.for_host()}
        stdin_data = json.dumps(payload).encode()
    # A cgroup for the turn (or the subreaper path): raises HostSpawnFailed when the
    # containment TURNKEEPER_CONTAINMENT asks for is not available here.
    env = turn_env(request, cfg)
    # Checked before the spawn: behind the cgroup's exec wrapper a missing program would
    # be the shell's exit 127, not the spawn failure it is.
    program_problem = unrunnable(args[0], env.get("PATH", os.defpath), workspace)
    if program_problem is not None:
        raise HostSpawnFailed(
            f"cannot start {args[0]!r}: {program_problem}", details={"args": [args[0]]}
        )
    contained = containment.prepare(request.turn_id)
    # The lock keeps the orphan reaper from reaping this child before it is registered.
    with process_tree.spawn_lock:
        try:
            proc = host_process.start(
                with_parent_death(contained.command(args, workspace, env)),
                env,
                cwd=workspace,
                stdin_pipe=stdin_data is not None,
                enters_cwd=contained.enters_workspace,
            )
        except OSError as exc:
            contained.abandon()
            raise HostSpawnFailed(
                f"cannot start {args[0]!r}: {exc}", details={"args": [args[0]]}
            ) from None
        process_tree.register_owned_child(proc.pid)
    identity = process_tree.identify(proc.pid, request.turn_id)
    contained.track(identity)
    return SubprocessRun(request, cfg, proc, identity, stdin_data, adapter, contained)


def _check_workspace(workspace: str) -> None:
    """``HostSpawnFailed`` unless ``workspace`` is a directory this process may enter.

    Asked here, not left to the spawn: behind the cgroup's wrapper a workspace that
    cannot be entered would be the shell's exit 125, not the spawn failure it is."""
    # One access() of ``<workspace>/.`` answers both questions when all is well (every
    # turn): the path resolves only through a directory (ENOTDIR otherwise) that may be
    # searched (EACCES otherwise), and X_OK asks the same of it again. Only a failure
    # asks them one by one, to say which it is.
    if os.access(workspace + "/.", os.X_OK):
        return
    if not os.path.isdir(workspace):
        raise HostSpawnFailed(f"workspace {workspace} is not a directory")
    if not os.access(workspace, os.X_OK):
        raise HostSpawnFailed(f"workspace {workspace} cannot be entered (no search permission)")


class SubprocessRun:
    """A running command, served by one thread (a reused one: hosts/worker_threads.py)."""

    def __init__(
        self,
        request: TurnRequest,
        cfg: SubprocessHostConfig,
        proc: HostProcess,
        identity: ProcessIdentity,
        stdin_data: bytes | None,
        adapter: RunAdapter | None = None,
        contained: containment.TurnContainment | None = None,
    ) -> None:
        self.request = request
        self._adapter = adapter
        self._contained = contained
        self._cfg = cfg
        self._proc = proc
        self._identity = identity
        self._log = EventLog(request.limits, meaningful=self._carries_meaning)
        self._started = time.monotonic()
        self._stderr = bytearray()
        self._lines = LineBuffer(cfg.max_line_bytes)
        self._stdin_data = stdin_data
        # Held until the outcome is set: a lock as a latch, not an Event, which builds a
        # Condition (and a lock of its own) for every run and notifies it when set.
        self._done = threading.Lock()
        self._done.acquire()
        self._outcome: HostOutcome | None = None
        self._killed_by_us = False
        self._timed_out = False
        # Counted, not listed: a host may print any number of malformed lines.
        self._malformed_count = 0
        self._first_malformed = ""
        self._fatal: tuple[HostErrorKind, str] | None = None
        self._handle = request.host_session_handle
        self._result: JsonDict | None = None  # None: no result event (yet)
        self._marker_seen = False
        TURN_THREADS.run(self._serve, f"turnkeeper-host-{request.turn_id}")

    # --- HostRun ------------------------------------------------------------------

    @property
    def identity(self) -> ProcessIdentity:
        return self._identity

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        return self._log.iter(after_seq, follow=follow)

    def next_events(self, after_seq: int, timeout: float | None) -> list[HostEvent] | None:
        """The events after ``after_seq`` (see ``WaitsForEvents``): the driver waits
        on the log itself, with no thread of its own to follow :meth:`events`."""
        return self._log.wait_after(after_seq, timeout)

    def wait(self, timeout: float | None = None) -> HostOutcome:
        if self._outcome is None:  # set before the latch is released
            if not self._done.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
                raise Unavailable(
                    f"turn {self.request.turn_id} is still running", reason="host_running"
                )
            self._done.release()  # for any other waiter
        assert self._outcome is not None
        return self._outcome

    def kill_tree(self) -> KillReport:
        self._killed_by_us = True
        return process_tree.kill_turn_processes(self.request.turn_id, self._identity)

    def is_alive(self) -> bool:
        return process_tree.is_alive(self._identity)

    # --- threads ------------------------------------------------------------------

    def _on_stderr(self, chunk: bytes) -> None:
        self._stderr += chunk
        excess = len(self._stderr) - self._cfg.stderr_tail_bytes
        if excess > 0:
            del self._stderr[:excess]

    def _on_stdout(self, chunk: bytes) -> None:
        self._feed(self._lines.feed(chunk))

    def _feed(self, lines: Iterable[Line]) -> None:
        for line in lines:
            if self._cfg.event_format == "text":
                self._line(line.data)  # plain output: an overlong line is just split
            elif line.continued:
                continue  # the rest of an overlong line, already reported
            elif line.split:
                message = f"line longer than {self._cfg.max_line_bytes} bytes"
                self._protocol_error(message, line.data)
            else:
                self._line(line.data)

    def _line(self, line: bytes) -> None:
        if self._cfg.event_format == "text":
            text = line.decode(errors="replace").rstrip("\r")
            self._marker_seen = self._marker_seen or self._cfg.done_marker in text
            self._event("output", {"text": text})
            return
        try:
            parsed = parse_jsonl_line(line)
        except ProtocolError as exc:
            self._protocol_error(str(exc), line)
            return
        if parsed is None:
            return
        if self._adapter is None:
            self._event(*parsed)
            return
        try:
            translated = self._adapter.translate(*parsed)
        except Exception as exc:  # an adapter bug must not kill the reader thread
            log.exception("turn %s: translating a host event failed", self.request.turn_id)
            self._protocol_error(f"cannot translate {parsed[0]!r} event: {exc!r}", line)
            return
        for kind, data in translated:
            self._event(kind, data)

    def _protocol_error(self, message: str, line: bytes) -> None:
        if not self._malformed_count:
            self._first_malformed = message
        self._malformed_count += 1
        excerpt = line[:500].decode(errors="replace")
        self._event("error", {"error_kind": "protocol", "message": message, "line": excerpt})

    def _event(self, kind: str, data: JsonDict) -> None:
        for rule in self._cfg.handle_from:
            if kind == rule.kind and isinstance(handle := dig(data, rule.field), str):
                self._handle = handle
        if kind == self._cfg.result_kind:
            self._result = data
        elif kind == "message" and self._cfg.done_marker in str(data.get("text", "")):
            self._marker_seen = True
        if kind == "error" and data.get("fatal") is True:
            reported = data.get("error_kind")  # absent, or not a kind's name: exit_code
            try:
                error_kind = HostErrorKind(reported if isinstance(reported, str) else "exit_code")
            except ValueError:
                error_kind = HostErrorKind.EXIT_CODE
            # Only the recovery table loses a turn, and only the driver's silence watch
            # finds one hung (its count suspends the session): not the host's words.
            if error_kind in (HostErrorKind.LOST, HostErrorKind.HUNG):
                error_kind = HostErrorKind.EXIT_CODE
            self._fatal = (error_kind, str(data.get("message", "host reported a fatal error")))
        # The handle, result and fatal error are remembered above whether or not the
        # log keeps the event: the outcome never depends on the output caps.
        self._log.append(kind, data)

    def _carries_meaning(self, kind: str, data: JsonDict) -> bool:
        """Kept beyond the output caps: this host's handle and result events too."""
        if kind == self._cfg.result_kind or any(kind == r.kind for r in self._cfg.handle_from):
            return True
        return carries_meaning(kind, data)

    def _serve(self) -> None:
        """The run's one thread: the process's pipes and exit (``_pipes.serve``), then
        the outcome."""
        turn_id = self.request.turn_id
        stragglers: list[int] = []

        def on_timeout() -> None:
            self._timed_out = True
            process_tree.kill_turn_processes(turn_id, self._identity)

        def on_exit() -> None:
            if self._cfg.kill_stragglers:
                # With a cgroup or as a subreaper, the turn's processes are known
                # without reading all of /proc; only an uncontained turn needs the
                # marker search.
                search_all = self._contained is None or self._contained.kind == "none"
                try:
                    report = process_tree.kill_turn_processes(turn_id, search_all=search_all)
                    stragglers.extend(k.pid for k in report.killed)
                except Exception:  # never leave wait() hanging; recovery re-checks by marker
                    log.exception("turn %s: ending stragglers failed", turn_id)
            if self._contained is not None:
                self._contained.release()  # the turn is no longer in flight

        served_error: BaseException | None = None
        try:
            returncode = serve(
                self._proc,
                stdin_data=self._stdin_data,
                on_stdout=self._on_stdout,
                on_stderr=self._on_stderr,
                timeout=self.request.timeout_seconds,
                drain_seconds=self._cfg.drain_seconds,
                on_timeout=on_timeout,
                on_exit=on_exit,
            ).returncode
        except Exception as exc:  # the turn must still end: kill, collect, fail it
            log.exception("turn %s: serving the host failed", turn_id)
            served_error = exc
            self._killed_by_us = True
            process_tree.kill_turn_processes(turn_id, self._identity)
            returncode = self._proc.wait()
        finally:
            last = self._lines.flush()  # a last line without its newline still counts
            if last is not None:
                self._feed([last])
            # Every event is in: the log's account of what it dropped goes last.
            self._log.seal()
        process_tree.unregister_owned_child(self._proc.pid)
        outcome = self._build_outcome(returncode, stragglers)
        if served_error is not None:
            outcome = outcome.model_copy(
                update={
                    "status": HostStatus.FAILED,
                    "error_kind": HostErrorKind.PROTOCOL,
                    "message": f"the host's pipes could not be served: {served_error!r}",
                }
            )
        if self._adapter is not None:
            try:
                outcome = self._adapter.finish(outcome)
            except Exception as exc:
                log.exception("turn %s: finishing the host outcome failed", turn_id)
                failed = outcome.model_dump() | {
                    "status": HostStatus.FAILED,
                    "error_kind": HostErrorKind.PROTOCOL,
                    "message": f"host adapter could not finish the turn: {exc!r}",
                }
                outcome = HostOutcome.model_validate(failed)
        if self._contained is not None and outcome.containment != self._contained.kind:
            # An adapter that built its own outcome: say how the turn was contained.
            outcome = outcome.model_copy(update={"containment": self._contained.kind})
        self._outcome = outcome
        # Done before the log closes: the driver, woken by the close as the last
        # reader of the events, finds the outcome ready instead of waiting again for
        # it. Every event is in the log already (sealed above).
        self._done.release()
        self._log.close()

    def _turn_result(self, succeeded: bool) -> JsonDict:
        """The result event's data as reported; without one, on a turn that succeeded
        on a todo, the completion rule's word on it (hosts/completion.py)."""
        if self._result is not None:
            return self._result
        if not succeeded or self.request.todo_id is None:
            return {}
        return {"todo_done": completes_todo(self._cfg.complete_todo, self._marker_seen)}

    def _failure(self, returncode: int) -> tuple[HostErrorKind, str] | None:
        if self._timed_out:
            return (HostErrorKind.TIMEOUT, f"exceeded {self.request.timeout_seconds}s")
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            who = "killed by the control plane" if self._killed_by_us else "died"
            return (HostErrorKind.SIGNAL, f"host {who} ({name})")
        if self._malformed_count and not self._cfg.tolerate_malformed:
            count, first = self._malformed_count, self._first_malformed
            return (HostErrorKind.PROTOCOL, f"{count} malformed output line(s); first: {first}")
        if self._fatal is not None:
            return self._fatal
        if returncode != 0:
            return (HostErrorKind.EXIT_CODE, f"host exited with code {returncode}")
        return None

    def _build_outcome(self, returncode: int, stragglers: list[int]) -> HostOutcome:
        failure = self._failure(returncode)
        result = self._turn_result(failure is None)
        if failure is None and (oversized := oversized_result(result, self.request.limits)):
            result = {}  # the receipt must not carry it
            failure = (HostErrorKind.PROTOCOL, oversized)
        error_kind, message = failure if failure is not None else (None, "")
        return HostOutcome(
            status=HostStatus.SUCCEEDED if failure is None else HostStatus.FAILED,
            error_kind=error_kind,
            message=message,
            exit_code=returncode if returncode >= 0 else None,
            signal=-returncode if returncode < 0 else None,
            host_session_handle=self._handle,
            result=result,
            last_seq=self._log.last_seq,
            stderr_tail=self._stderr.decode(errors="replace"),
            stragglers_killed=stragglers,
            duration_seconds=round(time.monotonic() - self._started, 3),
            containment="none" if self._contained is None else self._contained.kind,
        )
