"""The control plane's side of the runner protocol.

:class:`RunnerClient` keeps one connection for short commands (serialised by a lock,
so threads may share the client) and opens one per event stream or outcome wait,
which can block for the length of a turn. A command whose connection breaks before
its answer is sent again once, on a new connection, with the same ``command_id``:
the runner's journal makes that safe (a ``start_turn`` never starts a second host).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic_core import to_jsonable_python

from turnkeeper.errors import NotFound, Unavailable
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts.base import KillReport, TurnRequest
from turnkeeper.json_types import JsonDict, JsonValue
from turnkeeper.runner.paths import RunnerPaths, connect_unix
from turnkeeper.runner.protocol import (
    MAX_REPLY_BYTES,
    Ack,
    AckResult,
    Close,
    Events,
    Hello,
    Kill,
    Outcome,
    RunnerIdentity,
    StartTurn,
    TurnEnd,
    TurnInfo,
    encode,
    parse_frame,
    raise_error,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from turnkeeper.runner.host import RunnerRun

# How often an event stream reconnects without receiving anything before giving up.
_STREAM_RETRIES = 3


class _Connection:
    """One authenticated connection."""

    def __init__(self, paths: RunnerPaths, timeout: float | None) -> None:
        try:
            self.sock = connect_unix(paths.socket, timeout)
        except OSError as exc:
            raise Unavailable(
                f"no runner answers at {paths.socket}: {exc}", reason="runner_unavailable"
            ) from None
        self.reader = self.sock.makefile("rb")
        try:
            self.send({"op": "auth", "token": paths.read_token()})
            self.reply()
        except OSError as exc:  # accepted, then gone: a runner dying as we came
            self.close()
            raise Unavailable(
                f"the runner at {paths.socket} hung up: {exc}", reason="runner_unavailable"
            ) from None
        except BaseException:
            self.close()
            raise

    def send(self, frame: BaseModel | JsonDict) -> None:
        self.sock.sendall(encode(frame))

    def frame(self) -> JsonDict:
        line = self.reader.readline(MAX_REPLY_BYTES + 1)
        if not line.endswith(b"\n"):
            raise ConnectionError("the runner closed the connection")
        return parse_frame(line)

    def reply(self) -> JsonValue:
        frame = self.frame()
        if not frame.get("ok"):
            raise_error(frame.get("error"))
        return frame.get("result")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class RunnerClient:
    """A client of the runner of the project whose state directory (``.turnkeeper/``)
    is ``state_dir``."""

    def __init__(self, state_dir: Path, *, timeout: float = 60.0) -> None:
        self.paths = RunnerPaths(Path(state_dir))
        self.timeout = timeout
        self._conn: _Connection | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> RunnerClient:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> RunnerClient:
        """Open (and authenticate) the command connection now; ``Unavailable`` if no
        runner answers."""
        with self._lock:
            if self._conn is None:
                self._conn = _Connection(self.paths, self.timeout)
        return self

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _call(self, command: BaseModel) -> JsonValue:
        with self._lock:
            for attempt in range(2):
                if self._conn is None:
                    self._conn = _Connection(self.paths, self.timeout)
                try:
                    self._conn.send(command)
                    return self._conn.reply()
                except OSError as exc:
                    self._conn.close()
                    self._conn = None
                    if attempt:
                        raise Unavailable(
                            f"the runner did not answer: {exc}", reason="runner_unavailable"
                        ) from None
        raise AssertionError("unreachable")

    # --- commands -----------------------------------------------------------------

    def hello(self) -> RunnerIdentity:
        return RunnerIdentity.model_validate(self._call(Hello()))

    def turn(self, turn_id: str) -> TurnInfo:
        for info in self.hello().turns:
            if info.turn_id == turn_id:
                return info
        raise NotFound(f"the runner has no turn {turn_id}", reason="turn_not_found")

    def start_turn(
        self,
        host_kind: str,
        host_config: Mapping[str, object] | None,
        request: TurnRequest,
        *,
        command_id: str | None = None,
    ) -> ProcessIdentity:
        """Start ``request`` on a host the runner loads with ``load_host(host_kind,
        host_config)``. The default command id is derived from the turn id, so a
        retried start of the same turn gets the first start's answer."""
        command = StartTurn(
            command_id=command_id or f"start_turn:{request.turn_id}",
            host_kind=host_kind,
            # Made JSON here (a tuple as a list, a path as text), as the command's JSON
            # dump made it for the wire and the digest before the field checked for JSON.
            host_config=to_jsonable_python(dict(host_config or {})),
            request=request,
        )
        return ProcessIdentity.model_validate(self._call(command))

    def ack(self, turn_id: str, seq: int, *, command_id: str | None = None) -> int:
        """Acknowledge every event up to ``seq`` (durably kept by the caller); the
        runner may then forget them. Returns the turn's acknowledged seq."""
        command = Ack(command_id=command_id or f"ack:{turn_id}:{seq}", turn_id=turn_id, seq=seq)
        return AckResult.model_validate(self._call(command)).acked_seq

    def kill(self, turn_id: str, *, command_id: str | None = None) -> KillReport:
        command = Kill(command_id=command_id or f"kill:{turn_id}:{uuid.uuid4()}", turn_id=turn_id)
        return KillReport.model_validate(self._call(command))

    def close_turn(self, turn_id: str, *, command_id: str | None = None) -> None:
        """Forget a finished turn whose every event was acknowledged."""
        self._call(Close(command_id=command_id or f"close:{turn_id}", turn_id=turn_id))

    def outcome(self, turn_id: str, timeout: float | None = None) -> TurnEnd:
        """The turn's end, waiting up to ``timeout`` (None: until it ends);
        ``Unavailable`` (``host_running``) if it has not ended by then."""
        socket_timeout = None if timeout is None else timeout + self.timeout
        for attempt in range(2):
            conn = _Connection(self.paths, socket_timeout)
            try:
                conn.send(Outcome(turn_id=turn_id, timeout=timeout))
                return TurnEnd.model_validate(conn.reply())
            except OSError as exc:
                if attempt:
                    raise Unavailable(
                        f"the runner did not answer: {exc}", reason="runner_unavailable"
                    ) from None
            finally:
                conn.close()
        raise AssertionError("unreachable")

    def events(
        self, turn_id: str, after_seq: int = 0, *, follow: bool = True
    ) -> Generator[HostEvent, None, None]:
        """Events of the turn with ``seq > after_seq``, in order, each once. With
        ``follow`` it waits for new ones and ends after the turn's last event."""
        cursor = after_seq
        failures = 0
        while True:
            conn = _Connection(self.paths, None if follow else self.timeout)
            try:
                conn.send(Events(turn_id=turn_id, after_seq=cursor, follow=follow))
                conn.reply()
                while True:
                    frame = conn.frame()
                    if "event" in frame:
                        event = HostEvent.model_validate(frame["event"])
                        if event.seq <= cursor:
                            continue  # never twice, whatever a reconnect replays
                        cursor, failures = event.seq, 0
                        yield event
                    elif frame.get("end"):
                        return
                    else:
                        raise_error(frame.get("error"))
            except OSError as exc:
                failures += 1
                if failures >= _STREAM_RETRIES:
                    raise Unavailable(
                        f"the runner's event stream broke: {exc}", reason="runner_unavailable"
                    ) from None
            finally:
                conn.close()

    def attach(self, turn_id: str) -> RunnerRun:
        """The run of a turn this process did not start (a restarted control plane)."""
        from turnkeeper.runner.host import RunnerRun

        info = self.turn(turn_id)
        if info.identity is None:
            raise Unavailable(f"turn {turn_id} is still being started", reason="host_starting")
        return RunnerRun(self, turn_id, info.identity)


def runner_available(state_dir: Path, timeout: float = 2.0) -> bool:
    """True if the project's runner answers ``hello``."""
    try:
        with RunnerClient(state_dir, timeout=timeout) as client:
            client.hello()
    except Exception:
        return False
    return True
