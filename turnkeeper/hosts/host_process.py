"""A host's process as the control plane holds it: its pid, our ends of its pipes, its
exit status; and how one is started.

Its pipes are made here (``pipe2``, close-on-exec) and our ends are plain descriptors
for the thread that serves it (:mod:`turnkeeper.hosts._pipes`): not the file objects
``Popen`` builds for pipes it makes, whose set-up (an ``fstat``, an ``ioctl`` and an
``lseek`` each) and buffering that thread never used. The child gets what
``Popen(close_fds=True, start_new_session=True)`` gives it: the pipes (stdin: a pipe,
or ``/dev/null``) as 0-2 and no other descriptor of ours, a process session of its
own, SIGPIPE and SIGXFSZ at their defaults (Python ignores both).

Waiting: only the thread that serves the process collects its exit status. The orphan
reaper leaves it alone while the host is registered as an owned child
(:func:`turnkeeper.hosts.subreaper.register_owned_child`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping


class HostProcess:
    """A started host: its pid, our ends of its pipes (None once closed), and its exit
    status once collected (``returncode`` as ``Popen`` has it: ``-N`` for signal N)."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: int | None,
        stdout: int | None,
        stderr: int | None,
    ) -> None:
        self.pid = popen.pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._popen = popen

    def poll(self) -> int | None:
        """The exit status, if the process has exited (collected then, not waited for)."""
        if self.returncode is None:
            self.returncode = self._popen.poll()
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = self._popen.wait()
        return self.returncode

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


def start(argv: list[str], env: Mapping[str, str], *, cwd: str, stdin_pipe: bool) -> HostProcess:
    """Start ``argv`` with ``env`` in a process session of its own, in ``cwd``; its
    stdout and stderr piped to us, its stdin piped (``stdin_pipe``) or ``/dev/null``.
    ``OSError`` if it cannot be started."""
    pipes: list[int] = []
    try:
        stdin_read, stdin_write = os.pipe2(os.O_CLOEXEC) if stdin_pipe else (None, None)
        pipes += [fd for fd in (stdin_read, stdin_write) if fd is not None]
        stdout_read, stdout_write = os.pipe2(os.O_CLOEXEC)
        pipes += [stdout_read, stdout_write]
        stderr_read, stderr_write = os.pipe2(os.O_CLOEXEC)
        pipes += [stderr_read, stderr_write]
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL if stdin_read is None else stdin_read,
            stdout=stdout_write,
            stderr=stderr_write,
            start_new_session=True,
            close_fds=True,
        )
    except BaseException:
        for fd in pipes:
            os.close(fd)
        raise
    for child_end in (stdin_read, stdout_write, stderr_write):
        if child_end is not None:
            os.close(child_end)
    return HostProcess(popen, stdin_write, stdout_read, stderr_read)
