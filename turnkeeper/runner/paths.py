"""Where a project's runner keeps its state: ``<project>/.turnkeeper/runner/`` (0700).

``runner.sock`` (the Unix socket), ``token`` (0600: what a client must present),
``journal.db`` (SQLite), ``runner.pid`` (pid, start time and boot id of the live
runner), ``runner.lock`` (held by the live runner: whoever can take it knows no runner
runs) and ``runner.log`` (the output of a runner started by ``turnkeeper runner start``).
Its one ``/proc`` path, ``/proc/self/fd/<fd>``, names an open directory (for a socket
path too long to bind), not a process's state: nothing for psutil.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import PermissionDenied
from turnkeeper.host_reports import ProcessIdentity

RUNNER_DIR_NAME = "runner"
# sun_path holds 108 bytes; past this a path is reached through an open directory.
_SUN_PATH_MAX = 100


@dataclass(frozen=True)
class RunnerPaths:
    """The runner files of the project whose state directory (``.turnkeeper/``) is
    ``state_dir``."""

    state_dir: Path

    @property
    def dir(self) -> Path:
        return self.state_dir / RUNNER_DIR_NAME

    @property
    def socket(self) -> Path:
        return self.dir / "runner.sock"

    @property
    def token(self) -> Path:
        return self.dir / "token"

    @property
    def journal(self) -> Path:
        return self.dir / "journal.db"

    @property
    def pid(self) -> Path:
        return self.dir / "runner.pid"

    @property
    def lock(self) -> Path:
        return self.dir / "runner.lock"

    @property
    def log(self) -> Path:
        return self.dir / "runner.log"

    def ensure(self) -> None:
        """Create the directory (0700) and the token (0600) if missing."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)  # also when it existed: the socket must be ours alone
        with contextlib.suppress(FileExistsError):
            fd = os.open(self.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32) + "\n")

    def read_token(self) -> str:
        try:
            return self.token.read_text().strip()
        except PermissionError:
            raise PermissionDenied(
                f"cannot read the runner token {self.token}", reason="runner_token_unreadable"
            ) from None

    def write_pid(self, identity: ProcessIdentity) -> None:
        tmp = self.pid.with_suffix(".tmp")
        tmp.write_text(identity.model_dump_json() + "\n")
        tmp.replace(self.pid)

    def read_pid(self) -> ProcessIdentity | None:
        try:
            return ProcessIdentity.model_validate(json.loads(self.pid.read_text()))
        except (FileNotFoundError, ValueError):
            return None


@contextlib.contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """A name ``bind``/``connect`` accept for ``path``: itself, or, when it is too
    long for ``sun_path`` (a deep project directory), the same file reached through
    ``/proc/self/fd`` of its open directory."""
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def connect_unix(path: Path, timeout: float | None) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with socket_address(path) as address:
            sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock
