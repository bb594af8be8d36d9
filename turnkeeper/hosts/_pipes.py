"""One thread serves a host process: its stdin, stdout and stderr, and its exit.

A host used to cost three threads (stdin writer, output reader, exit monitor) and two
polling loops (the reader woke every 0.1 s to look for a stop, ``Popen.wait(timeout)``
re-checked the exit with sleeps of up to 50 ms). With hundreds of hosts running at
once that is a thousand threads and thousands of wake-ups a second. Here one
selector waits on everything at once — the pipes, a pidfd that becomes readable the
moment the process exits, and the turn's deadline — and sleeps until one of them
has something to say.
"""

from __future__ import annotations

import errno
import os
import selectors
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

READ_CHUNK = 65536
# Without a pidfd (a kernel before 5.3) the exit is looked for this often.
_POLL_WITHOUT_PIDFD = 0.05


@dataclass(frozen=True)
class Served:
    returncode: int
    timed_out: bool


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def serve(
    proc: subprocess.Popen[bytes],
    *,
    stdin_data: bytes | None,
    on_stdout: Callable[[bytes], None],
    on_stderr: Callable[[bytes], None],
    timeout: float,
    drain_seconds: float,
    on_timeout: Callable[[], None],
    on_exit: Callable[[], None],
) -> Served:
    """Feed ``stdin_data``, pass output to the callbacks, until the process has exited
    and its pipes are closed (or ``drain_seconds`` after its exit: a detached child
    may hold them open forever). ``on_timeout`` runs once if the process outlives
    ``timeout`` (it should end it); ``on_exit`` once it exited, before the drain (it
    ends what the process left running, which closes their copies of the pipes)."""
    server = _Server(proc, stdin_data, on_stdout, on_stderr)
    try:
        timed_out = server.run(timeout, drain_seconds, on_timeout, on_exit)
    finally:
        server.close()
    return Served(returncode=proc.wait(), timed_out=timed_out)


class _Server:
    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        stdin_data: bytes | None,
        on_stdout: Callable[[bytes], None],
        on_stderr: Callable[[bytes], None],
    ) -> None:
        self.proc = proc
        self.sel = selectors.DefaultSelector()
        self.readers = {"out": on_stdout, "err": on_stderr}
        self.pipes = 0
        for pipe, kind in ((proc.stdout, "out"), (proc.stderr, "err")):
            if pipe is not None:
                self.sel.register(pipe.fileno(), selectors.EVENT_READ, kind)
                self.pipes += 1
        self.pending = memoryview(stdin_data or b"")
        if proc.stdin is not None:
            if self.pending:
                os.set_blocking(proc.stdin.fileno(), False)
                self.sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "in")
            else:
                proc.stdin.close()
        self.pidfd = _pidfd(proc.pid)
        if self.pidfd is not None:
            self.sel.register(self.pidfd, selectors.EVENT_READ, "exit")

    def run(
        self,
        timeout: float,
        drain_seconds: float,
        on_timeout: Callable[[], None],
        on_exit: Callable[[], None],
    ) -> bool:
        """Serve until exit and drain; whether the process outlived ``timeout``."""
        deadline = time.monotonic() + timeout
        drain_until: float | None = None
        timed_out = False
        while True:
            now = time.monotonic()
            if drain_until is None and self.proc.poll() is not None:
                on_exit()
                drain_until = time.monotonic() + drain_seconds
                if self.pidfd is not None:
                    self.sel.unregister(self.pidfd)
                continue
            if drain_until is not None and (self.pipes == 0 or now >= drain_until):
                return timed_out
            if drain_until is None and not timed_out and now >= deadline:
                timed_out = True
                on_timeout()
                continue
            # Draining: until the drain ends. Running: until the deadline, or, once ended
            # for it, until the exit (which the kill brings at once).
            limit = drain_until if drain_until is not None else None if timed_out else deadline
            wait = None if limit is None else max(limit - now, 0.0)
            if self.pidfd is None and drain_until is None:
                wait = _POLL_WITHOUT_PIDFD if wait is None else min(wait, _POLL_WITHOUT_PIDFD)
            self._handle(self.sel.select(wait))

    def _handle(self, ready: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, _ in ready:
            if key.data == "exit":
                continue  # proc.poll() in the loop collects it
            if key.data == "in":
                self.pending = _write_some(self.proc, self.sel, self.pending)
                continue
            chunk = os.read(key.fd, READ_CHUNK)
            if chunk:
                self.readers[key.data](chunk)
            else:
                self.sel.unregister(key.fd)
                self.pipes -= 1

    def close(self) -> None:
        self.sel.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def _write_some(
    proc: subprocess.Popen[bytes], sel: selectors.BaseSelector, pending: memoryview
) -> memoryview:
    """Write what the pipe takes now; close it when all is written or the host left."""
    assert proc.stdin is not None
    fd = proc.stdin.fileno()
    try:
        written = os.write(fd, pending)
    except BlockingIOError:
        return pending
    except OSError as exc:  # the host exited without reading its input: its outcome says why
        if exc.errno not in (errno.EPIPE, errno.EBADF):
            raise
        written = len(pending)
    rest = pending[written:]
    if not rest:
        sel.unregister(fd)
        proc.stdin.close()
    return rest
