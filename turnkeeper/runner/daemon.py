"""The runner daemon: a Unix socket server that owns a project's host processes.

One thread accepts; each connection gets a thread of its own. A connection is
refused unless the peer's uid (``SO_PEERCRED``) is the runner's own or root and its
first frame is ``auth`` with the token of ``runner/token``. The daemon holds
``runner/runner.lock`` while it lives (one runner per project) and, when it starts,
ends what a dead predecessor left (:meth:`Turns.recover`).

Its hosts are its children, forked by one long-lived thread with
``PR_SET_PDEATHSIG`` (SIGKILL), and it is a child subreaper: a SIGKILLed runner
takes its host processes with it; what escaped (a ``setsid`` grandchild of a host)
carries the turn marker, by which the next runner, or a control plane through
:func:`turnkeeper.runner.proof.prove_hosts_ended`, ends it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import logging
import os
import select
import signal
import socket
import struct
import threading
import time
from io import BufferedReader
from pathlib import Path
from types import FrameType

from pydantic import ValidationError

from turnkeeper.crashpoints import crash_point
from turnkeeper.errors import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    TurnkeeperError,
    Unavailable,
)
from turnkeeper.hosts import launch, process_tree
from turnkeeper.json_types import JsonDict
from turnkeeper.runner.journal import CommandRow, Journal
from turnkeeper.runner.paths import RunnerPaths, socket_address
from turnkeeper.runner.protocol import (
    COMMANDS,
    MAX_FRAME_BYTES,
    Ack,
    Auth,
    Close,
    EndFrame,
    Events,
    Hello,
    Kill,
    Outcome,
    RunnerIdentity,
    StartTurn,
    command_digest,
    encode,
    error_frame,
    ok_frame,
    parse_frame,
)
from turnkeeper.runner.turns import LiveTurn, RunnerSettings, Turns

log = logging.getLogger(__name__)

AUTH_TIMEOUT = 10.0
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_allowed(peer_uid: int, own_uid: int | None = None) -> bool:
    """Only the runner's own user, or root, may talk to it."""
    own = os.getuid() if own_uid is None else own_uid
    return peer_uid in (own, 0)


def peer_uid(conn: socket.socket) -> int:
    _, uid, _ = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return int(uid)


class _FrameTooLargeError(Exception):
    pass


def _read_frame(reader: BufferedReader) -> bytes | None:
    """One frame's bytes, None at the end of the stream."""
    line = reader.readline(MAX_FRAME_BYTES + 1)
    if len(line) > MAX_FRAME_BYTES:
        raise _FrameTooLargeError
    if not line.endswith(b"\n"):
        return None  # the peer left (a half-written last line is not a frame)
    return line


class Runner:
    def __init__(self, paths: RunnerPaths, settings: RunnerSettings | None = None) -> None:
        self.paths = paths
        self.settings = settings or RunnerSettings()
        self._stop = threading.Event()
        self._commands = threading.Lock()  # lookup + journaling of a command id, atomic
        self.started_at = time.time()

    # --- lifecycle ----------------------------------------------------------------

    def serve(self) -> None:
        """Run until SIGTERM / SIGINT (from the main thread)."""
        self.paths.ensure()
        lock_fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise FailedPrecondition(
                f"a runner already runs for {self.paths.state_dir}",
                reason="runner_already_running",
            ) from None
        try:
            self._serve_locked()
        finally:
            os.close(lock_fd)

    def _serve_locked(self) -> None:
        self._token = self.paths.read_token()
        self.journal = Journal(self.paths.journal)
        self.turns = Turns(self.journal, self.settings)
        lost = self.turns.recover()
        if lost:
            log.warning("ended %d turn(s) a previous runner left running", len(lost))
        process_tree.become_subreaper()
        if not launch.die_with_parent():
            log.warning("setpriv not found: hosts will not die with the runner by themselves")
        self.identity = process_tree.identify(os.getpid(), "runner")
        listener = self._listen()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        self.paths.write_pid(self.identity)
        log.info("runner %d serving %s", os.getpid(), self.paths.socket)
        try:
            while not self._stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=self._connection, args=(conn,), daemon=True).start()
        finally:
            listener.close()
            self.paths.socket.unlink(missing_ok=True)
            self.turns.stop_all()
            self.paths.pid.unlink(missing_ok=True)
            self.journal.close()
            log.info("runner %d stopped", os.getpid())

    def _listen(self) -> socket.socket:
        self.paths.socket.unlink(missing_ok=True)  # a dead runner's: we hold the lock
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            with socket_address(self.paths.socket) as address:
                listener.bind(address)
        finally:
            os.umask(old)
        listener.listen(128)
        listener.settimeout(0.5)  # to notice a stop request
        return listener

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        log.info("runner got %s: stopping", signal.Signals(signum).name)
        self._stop.set()

    def hello(self) -> RunnerIdentity:
        return RunnerIdentity(
            pid=self.identity.pid,
            start_time=self.identity.start_time,
            boot_id=self.identity.boot_id,
            started_at=self.started_at,
            journal_bytes=self.journal.size_bytes(),
            turns=[row.info() for row in self.journal.turns()],
        )

    # --- a connection -------------------------------------------------------------

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._session(conn)
            except _FrameTooLargeError:
                error = InvalidArgument(
                    f"frame larger than {MAX_FRAME_BYTES} bytes", reason="frame_too_large"
                )
                self._send_quietly(conn, error_frame(error))
            except OSError:
                pass  # the peer left mid-frame; nothing to answer
            except Exception:
                log.exception("runner connection failed")

    @staticmethod
    def _send_quietly(conn: socket.socket, frame: JsonDict) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(encode(frame))

    def _session(self, conn: socket.socket) -> None:
        uid = peer_uid(conn)
        if not peer_allowed(uid):
            refused = PermissionDenied(
                f"uid {uid} may not use this runner", reason="peer_uid_refused"
            )
            self._send_quietly(conn, error_frame(refused))
            return
        conn.settimeout(AUTH_TIMEOUT)
        reader = conn.makefile("rb")
        line = _read_frame(reader)
        if line is None:
            return
        if not self._authentic(line):
            denied = PermissionDenied("bad runner token", reason="bad_token")
            self._send_quietly(conn, error_frame(denied))
            return
        conn.settimeout(None)
        conn.sendall(encode(ok_frame({"pid": self.identity.pid})))
        while (line := _read_frame(reader)) is not None:
            try:
                cmd = COMMANDS.validate_python(parse_frame(line))
            except ValidationError as exc:
                bad = InvalidArgument(
                    f"not a runner command: {exc.errors(include_url=False)}",
                    reason="invalid_command",
                )
                conn.sendall(encode(error_frame(bad)))
                continue
            except TurnkeeperError as exc:
                conn.sendall(encode(error_frame(exc)))
                continue
            if isinstance(cmd, Events):
                if not self._stream(conn, cmd):
                    return
                continue
            conn.sendall(encode(self._dispatch(cmd)))

    def _authentic(self, line: bytes) -> bool:
        try:
            auth = Auth.model_validate(parse_frame(line))
        except (ValidationError, TurnkeeperError):
            return False
        return hmac.compare_digest(auth.token.encode(), self._token.encode())

    # --- commands -----------------------------------------------------------------

    def _dispatch(self, cmd: Hello | StartTurn | Ack | Kill | Close | Outcome) -> JsonDict:
        try:
            if isinstance(cmd, Hello):
                return ok_frame(self.hello().model_dump(mode="json"))
            if isinstance(cmd, Outcome):
                return ok_frame(
                    self.turns.wait_end(cmd.turn_id, cmd.timeout).model_dump(mode="json")
                )
            return self._journaled(cmd)
        except TurnkeeperError as exc:
            return error_frame(exc)
        except Exception as exc:
            log.exception("runner command %s failed", cmd.op)
            return error_frame(TurnkeeperError(f"runner failed: {exc!r}", reason="runner_internal"))

    def _journaled(self, cmd: StartTurn | Ack | Kill | Close) -> JsonDict:
        digest = command_digest(cmd)
        with self._commands:
            row = self.journal.command(cmd.command_id)
            if row is not None:
                return _replay(row, digest)
            if isinstance(cmd, Ack):
                return ok_frame(self.turns.ack(cmd))
            if isinstance(cmd, Close):
                return ok_frame(self.turns.close(cmd))
            turn_id = cmd.request.turn_id if isinstance(cmd, StartTurn) else cmd.turn_id
            if isinstance(cmd, StartTurn):
                self.turns.check_new_turn(cmd)
            self.journal.begin_command(cmd.command_id, cmd.op, turn_id, digest)
        crash_point("runner.command_pending")
        try:
            result = self.turns.start(cmd) if isinstance(cmd, StartTurn) else self.turns.kill(cmd)
        except Exception as exc:
            error = exc if isinstance(exc, TurnkeeperError) else None
            if error is None:
                log.exception("runner command %s failed", cmd.op)
                error = TurnkeeperError(f"runner failed: {exc!r}", reason="runner_internal")
            self.journal.finish_command(cmd.command_id, error=error.to_json())
            return error_frame(error)
        self.journal.finish_command(cmd.command_id, result=result)
        return ok_frame(result)

    # --- event streams --------------------------------------------------------------

    def _stream(self, conn: socket.socket, cmd: Events) -> bool:
        """Journaled events after ``after_seq``, then live ones, then the end. False if
        the peer left."""
        try:
            row = self.journal.turn(cmd.turn_id)
            if cmd.after_seq < row.acked_seq:
                raise _pruned(cmd.turn_id, cmd.after_seq, row.acked_seq)
        except TurnkeeperError as exc:
            conn.sendall(encode(error_frame(exc)))
            return True
        conn.sendall(encode(ok_frame({"turn_id": cmd.turn_id, "acked_seq": row.acked_seq})))
        cursor = cmd.after_seq
        while True:
            try:
                # The end first: the pump journals every event before the end, so an end
                # seen here means the query below sees all events.
                end = self.turns.end_of(cmd.turn_id)
            except NotFound as exc:  # closed meanwhile
                conn.sendall(encode(error_frame(exc)))
                return True
            batch = self.journal.events_after(cmd.turn_id, cursor)
            if batch:
                if batch[0].seq != cursor + 1:  # another client's ack pruned them
                    conn.sendall(
                        encode(error_frame(_pruned(cmd.turn_id, cursor, batch[0].seq - 1)))
                    )
                    return True
                conn.sendall(b"".join(encode({"event": e.model_dump(mode="json")}) for e in batch))
                cursor = batch[-1].seq
                continue
            if end is not None or not cmd.follow:
                conn.sendall(encode(EndFrame(turn_end=end)))
                return True
            live = self.turns.live(cmd.turn_id)
            if live is None:
                time.sleep(0.05)  # still being started
            else:
                _wait_for_more(live, cursor)
            if _peer_gone(conn):
                return False


def _wait_for_more(live: LiveTurn, cursor: int) -> None:
    """Until the turn journaled past ``cursor`` or ended (at most a second, so that a
    stream notices a peer that left)."""
    with live.cond:
        live.cond.wait_for(lambda: live.last_seq > cursor or live.end is not None, 1.0)


def _pruned(turn_id: str, after_seq: int, acked_seq: int) -> FailedPrecondition:
    return FailedPrecondition(
        f"turn {turn_id}: events up to {acked_seq} were acknowledged and pruned; "
        f"cannot replay after {after_seq}",
        reason="events_pruned",
        details={"after_seq": after_seq, "acked_seq": acked_seq},
    )


def _peer_gone(conn: socket.socket) -> bool:
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _replay(row: CommandRow, digest: str) -> JsonDict:
    """The answer to a command id seen before."""
    if row.digest != digest:
        return error_frame(
            AlreadyExists(
                f"command id {row.command_id} was used for another command",
                reason="command_id_reused",
                details={"command_id": row.command_id, "op": row.op},
            )
        )
    if row.status == "pending":
        return error_frame(
            Unavailable(f"command {row.command_id} is still running", reason="command_in_progress")
        )
    if row.status == "indeterminate":
        return error_frame(
            Aborted(
                f"the runner ended while executing command {row.command_id}; "
                "it is not executed again and may or may not have taken effect",
                reason="command_indeterminate",
                details={"command_id": row.command_id, "op": row.op, "turn_id": row.turn_id},
            )
        )
    if row.error is not None:
        return {"ok": False, "error": row.error}
    return ok_frame(row.result)


def serve(state_dir: Path, settings: RunnerSettings | None = None) -> None:
    """Run the runner of the project whose state directory is ``state_dir``."""
    Runner(RunnerPaths(state_dir), settings).serve()
