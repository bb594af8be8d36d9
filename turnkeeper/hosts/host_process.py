"""A host's process as the control plane holds it: its pid, our ends of its pipes, its
exit status; and how one is started.

Its pipes are made here (``pipe2``, close-on-exec) and our ends are plain descriptors
for the thread that serves it (:mod:`turnkeeper.hosts._pipes`): not the file objects
``Popen`` builds for pipes it makes, whose set-up (an ``fstat``, an ``ioctl`` and an
``lseek`` each) and buffering that thread never used. However it is started, the
child gets what ``Popen(close_fds=True, start_new_session=True)`` gives it: the pipes
(stdin: a pipe, or ``/dev/null``) as 0-2 and no other descriptor of ours, a process
session of its own, SIGPIPE and SIGXFSZ at their defaults (Python ignores both).

* A command that enters its working directory itself — behind the cgroup's exec
  wrapper (:data:`turnkeeper.hosts.containment.JOIN_ENTER_AND_EXEC`) — is started
  with ``os.posix_spawn``: libc's vfork and exec, for about a third of the control
  plane's CPU that ``subprocess.Popen`` spends on the same spawn (its Python-level
  set-up, the environment encoded in Python, a pipe of its own to report a failed
  ``exec``; ``posix_spawn`` reports one as an ``OSError`` too).
* Any other goes through ``Popen``: ``posix_spawn`` has no working directory (not in
  Python 3.11), and ``Popen``'s child enters the workspace before the ``exec``, so a
  workspace it cannot enter is an ``OSError`` here, not the exit status of a shell.

Waiting: only the thread that serves the process collects its exit status. The orphan
reaper leaves it alone while the host is registered as an owned child
(:func:`turnkeeper.hosts.subreaper.register_owned_child`).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping

log = logging.getLogger(__name__)

#: The exit status a spawned host is given when someone else collected its status
#: (what the owned-child registry exists to prevent): a failure, never a success.
STATUS_LOST = 255

# What Popen's restore_signals puts back to SIG_DFL in the child: Python ignores these
# two, and an ignored signal stays ignored across exec.
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)
_FD_DIR = "/proc/self/fd"
# Whether the descriptors this process was started with are close-on-exec now (one
# entry, once tried): see _inherited_made_close_on_exec.
_swept: list[bool] = []
_sweep_lock = threading.Lock()


class HostProcess:
    """A started host: its pid, our ends of its pipes (None once closed), and its exit
    status once collected (``returncode`` as ``Popen`` has it: ``-N`` for signal N)."""

    def __init__(
        self,
        pid: int,
        stdin: int | None,
        stdout: int | None,
        stderr: int | None,
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        # Started by Popen: collected through it, or Popen, which keeps the children
        # it has not seen end, would collect it later and find no status.
        self._popen = popen

    def poll(self) -> int | None:
        """The exit status, if the process has exited (collected then, not waited for)."""
        if self.returncode is None:
            self._collect(block=False)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self._collect(block=True)
        return self.returncode

    def _collect(self, *, block: bool) -> None:
        if self._popen is not None:
            self.returncode = self._popen.wait() if block else self._popen.poll()
            return
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            log.error("host %d was collected by someone else: its exit status is lost", self.pid)
            self.returncode = STATUS_LOST
            return
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)

    def close_stdin(self) -> None:
        if self.stdin is not None:
            fd, self.stdin = self.stdin, None
            os.close(fd)

    def close(self) -> None:
        """Close our ends of its pipes (what is still open)."""
        self.close_stdin()
        for fd in (self.stdout, self.stderr):
            if fd is not None:
                os.close(fd)
        self.stdout = self.stderr = None


def start(
    argv: list[str],
    env: Mapping[str, str],
    *,
    cwd: str,
    stdin_pipe: bool,
    enters_cwd: bool = False,
) -> HostProcess:
    """Start ``argv`` with ``env`` in a process session of its own, in ``cwd``; its
    stdout and stderr piped to us, its stdin piped (``stdin_pipe``) or ``/dev/null``.

    ``enters_cwd``: ``argv`` enters ``cwd`` itself and names its program by path, so
    it is spawned without ``Popen``. ``OSError`` if it cannot be started."""
    spawnable = enters_cwd and _inherited_made_close_on_exec()
    pipes: list[int] = []
    try:
        stdin_read, stdin_write = os.pipe2(os.O_CLOEXEC) if stdin_pipe else (None, None)
        pipes += [fd for fd in (stdin_read, stdin_write) if fd is not None]
        stdout_read, stdout_write = os.pipe2(os.O_CLOEXEC)
        pipes += [stdout_read, stdout_write]
        stderr_read, stderr_write = os.pipe2(os.O_CLOEXEC)
        pipes += [stderr_read, stderr_write]
        child_ends = (stdin_read, stdout_write, stderr_write)
        pid = None
        # Pipe ends above 2 (not so only if this process runs with 0-2 closed): no
        # dup2 onto 0-2 can then overwrite one still to be handed over.
        if spawnable and min(pipes) > 2:
            try:
                pid = _posix_spawn(argv, env, child_ends)
            except NotImplementedError:  # a libc without POSIX_SPAWN_SETSID
                pid = None
        popen = None
        if pid is None:
            popen = _popen(argv, env, cwd, child_ends)
            pid = popen.pid
    except BaseException:
        for fd in pipes:
            os.close(fd)
        raise
    for child_end in child_ends:
        if child_end is not None:
            os.close(child_end)
    return HostProcess(pid, stdin_write, stdout_read, stderr_read, popen)


def _inherited_made_close_on_exec() -> bool:
    """Make the descriptors above 2 that an ``exec`` would hand on close-on-exec, once
    per process; whether that could be done (False: they cannot be listed here).

    ``Popen(close_fds=True)`` keeps a host from getting any descriptor of ours;
    ``posix_spawn`` as Python 3.11 offers it cannot close a range, and listing the
    descriptors at every spawn costs a system call for each one open: a millisecond a
    spawn with 256 hosts running. Python opens every descriptor close-on-exec (PEP 446),
    and so do SQLite and libpq: those an ``exec`` would hand on are the ones this
    process was started with (a parent's pipe, a job server), and they are made
    close-on-exec once, here. The one way left to hand a host a descriptor is to make
    one inheritable on purpose afterwards (``os.set_inheritable``, or ``os.dup2`` onto a
    number above 2), which nothing in this process does."""
    with _sweep_lock:
        if not _swept:
            _swept.append(_sweep_inherited())
        return _swept[0]


def _sweep_inherited() -> bool:
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return False
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)
            except OSError:
                continue  # closed since (the listing's own descriptor, for one)
    return True


def _posix_spawn(
    argv: list[str],
    env: Mapping[str, str],
    child_ends: tuple[int | None, int, int],
) -> int:
    stdin_read, stdout_write, stderr_write = child_ends
    stdin_action = (
        (os.POSIX_SPAWN_DUP2, stdin_read, 0)
        if stdin_read is not None
        else (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0)  # as Popen's DEVNULL
    )
    actions = [
        stdin_action,
        (os.POSIX_SPAWN_DUP2, stdout_write, 1),
        (os.POSIX_SPAWN_DUP2, stderr_write, 2),
    ]
    return os.posix_spawn(
        argv[0], argv, env, file_actions=actions, setsid=True, setsigdef=_DEFAULT_SIGNALS
    )


def _popen(
    argv: list[str], env: Mapping[str, str], cwd: str, child_ends: tuple[int | None, int, int]
) -> subprocess.Popen[bytes]:
    stdin_read, stdout_write, stderr_write = child_ends
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL if stdin_read is None else stdin_read,
        stdout=stdout_write,
        stderr=stderr_write,
        start_new_session=True,
        close_fds=True,
    )
