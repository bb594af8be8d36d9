"""One thread serves a host process: its stdin, stdout and stderr, and its exit.

A host used to cost three threads (stdin writer, output reader, exit monitor) and two
polling loops (the reader woke every 0.1 s to look for a stop, ``Popen.wait(timeout)``
re-checked the exit with sleeps of up to 50 ms). With hundreds of hosts running at
once that is a thousand threads and thousands of wake-ups a second. Here one
``poll`` waits on everything at once — the pipes, a pidfd that becomes readable the
moment the process exits, and the turn's deadline — and sleeps until one of them
has something to say.

``poll(2)``, not an epoll selector: a turn watches three or four descriptors once, so
the epoll instance (made, each descriptor added and removed, closed: six system
calls a turn) and the selector's bookkeeping cost more than they save.
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass

from turnkeeper.hosts.host_process import HostProcess

READ_CHUNK = 65536
# Without a pidfd (a kernel before 5.3) the exit is looked for this often.
_POLL_WITHOUT_PIDFD = 0.05
# The longest one poll waits (poll takes an int of milliseconds): a longer timeout
# is waited for in several.
_MAX_WAIT = 86400.0
_READABLE = select.POLLIN
# Nothing more to read: the writers are gone (POLLHUP without POLLIN: a pipe with
# data left reports POLLIN too), or the descriptor is not a usable one.
_ENDED = select.POLLHUP | select.POLLERR | select.POLLNVAL


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
    proc: HostProcess,
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
        proc: HostProcess,
        stdin_data: bytes | None,
        on_stdout: Callable[[bytes], None],
        on_stderr: Callable[[bytes], None],
    ) -> None:
        self.proc = proc
        self.poller = select.poll()
        self.readers: dict[int, Callable[[bytes], None]] = {}
        for fd, reader in ((proc.stdout, on_stdout), (proc.stderr, on_stderr)):
            if fd is not None:
                self.poller.register(fd, _READABLE)
                self.readers[fd] = reader
        self.pending = memoryview(stdin_data or b"")
        self.stdin = proc.stdin
        if self.stdin is not None:
            if self.pending:
                os.set_blocking(self.stdin, False)
                self.poller.register(self.stdin, select.POLLOUT)
            else:
                proc.close_stdin()
                self.stdin = None
        self.pidfd = _pidfd(proc.pid)
        if self.pidfd is not None:
            self.poller.register(self.pidfd, _READABLE)

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
        # With a pidfd the exit is looked for once it says so (it stays readable from
        # the exit on); without one, at every pass.
        look_for_exit = self.pidfd is None
        while True:
            if drain_until is None and look_for_exit and self.proc.poll() is not None:
                on_exit()
                drain_until = time.monotonic() + drain_seconds
                if self.pidfd is not None:
                    self.poller.unregister(self.pidfd)
            now = time.monotonic()
            if drain_until is not None and (not self.readers or now >= drain_until):
                return timed_out
            if drain_until is None and not timed_out and now >= deadline:
                timed_out = True
                on_timeout()
                look_for_exit = True  # the kill may have ended it already
                continue
            # Draining: until the drain ends. Running: until the deadline, or, once ended
            # for it, until the exit (which the kill brings at once).
            limit = drain_until if drain_until is not None else None if timed_out else deadline
            wait = None if limit is None else min(max(limit - now, 0.0), _MAX_WAIT)
            if self.pidfd is None and drain_until is None:
                wait = _POLL_WITHOUT_PIDFD if wait is None else min(wait, _POLL_WITHOUT_PIDFD)
            ready = self.poller.poll(None if wait is None else wait * 1000)
            look_for_exit = self._handle(ready) or self.pidfd is None
        return timed_out

    def _handle(self, ready: list[tuple[int, int]]) -> bool:
        """Act on what ``poll`` reported; whether the pidfd said the process exited."""
        exited = False
        for fd, events in ready:
            if fd == self.pidfd:
                exited = True  # collected by the loop
            elif fd == self.stdin:
                self._write_some(events)
            elif events & _READABLE and (chunk := os.read(fd, READ_CHUNK)):
                self.readers[fd](chunk)
            elif events & (_READABLE | _ENDED):
                # The end of the pipe (an empty read, or a hang-up with nothing left
                # in it, which needs no read to tell).
                self.poller.unregister(fd)
                del self.readers[fd]
        return exited

    def _write_some(self, events: int) -> None:
        """Write what the pipe takes now; close it when all is written or the host left."""
        assert self.stdin is not None
        try:
            if events & select.POLLERR:  # the reader is gone: the write would fail
                raise BrokenPipeError(errno.EPIPE, "the host closed its stdin")
            written = os.write(self.stdin, self.pending)
        except BlockingIOError:
            return
        except OSError as exc:  # the host exited without reading its input: its outcome says why
            if exc.errno not in (errno.EPIPE, errno.EBADF):
                raise
            written = len(self.pending)
        self.pending = self.pending[written:]
        if not self.pending:
            self.poller.unregister(self.stdin)
            self.proc.close_stdin()
            self.stdin = None

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
        self.proc.close()
