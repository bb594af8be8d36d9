"""Who may talk to the runner, and how much at once: the token, the peer's uid, the
1 MiB frame limit. Raw sockets, so the test sees exactly what the runner answers."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runner.conftest import Project
from turnkeeper.runner.daemon import peer_allowed
from turnkeeper.runner.paths import RunnerPaths, connect_unix
from turnkeeper.runner.protocol import MAX_FRAME_BYTES


def _talk(sock: socket.socket, frame: bytes) -> dict[str, object]:
    # A refused frame's tail may find the runner gone: its answer is still there.
    with contextlib.suppress(BrokenPipeError):
        sock.sendall(frame)
    reader = sock.makefile("rb")
    reply = json.loads(reader.readline())
    assert isinstance(reply, dict)
    return reply


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _connect(project: Project) -> socket.socket:
    return connect_unix(RunnerPaths(project.state_dir).socket, 10)


def test_a_wrong_token_is_refused_and_the_connection_closed(project: Project) -> None:
    project.runner()
    with _connect(project) as sock:
        reply = _talk(sock, b'{"op": "auth", "token": "not-the-token"}\n')
        assert reply["ok"] is False
        assert reply["error"] == {
            "code": "PERMISSION_DENIED",
            "reason": "bad_token",
            "message": "bad runner token",
            "details": {},
        }
        assert _closed(sock)
    with _connect(project) as sock:  # a command before auth is no auth either
        reply = _talk(sock, b'{"op": "hello"}\n')
        assert reply["error"]["reason"] == "bad_token"  # type: ignore[index]
        assert _closed(sock)


def test_state_files_are_private(project: Project) -> None:
    project.runner()
    paths = RunnerPaths(project.state_dir)
    assert stat.S_IMODE(paths.dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(paths.token.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.socket.stat().st_mode) & 0o077 == 0


def test_a_frame_over_one_mebibyte_is_refused(project: Project) -> None:
    project.runner()
    token = RunnerPaths(project.state_dir).read_token()
    auth = json.dumps({"op": "auth", "token": token}).encode() + b"\n"
    with _connect(project) as sock:
        assert _talk(sock, auth)["ok"] is True
        # Exactly at the limit: read, and refused only for what it says.
        head = b'{"op": "hello", "pad": "'
        at_limit = head + b"x" * (MAX_FRAME_BYTES - len(head) - 3) + b'"}\n'
        assert len(at_limit) == MAX_FRAME_BYTES
        reply = _talk(sock, at_limit)
        assert reply["error"]["reason"] == "invalid_command"  # type: ignore[index]
    with _connect(project) as sock:
        assert _talk(sock, auth)["ok"] is True
        too_big = head + b"x" * MAX_FRAME_BYTES + b'"}\n'
        reply = _talk(sock, too_big)
        assert reply["error"]["reason"] == "frame_too_large"  # type: ignore[index]
        assert _closed(sock)


def test_only_the_runners_own_uid_or_root_is_allowed() -> None:
    assert peer_allowed(1000, own_uid=1000)
    assert peer_allowed(0, own_uid=1000)
    assert not peer_allowed(1001, own_uid=1000)
    assert not peer_allowed(65534, own_uid=0)


NOBODY_CLIENT = textwrap.dedent(
    """
    import json, socket, sys
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(sys.argv[1])
    # The right token: only the uid is wrong. The runner refuses on connection, so
    # it may have hung up before this is written.
    try:
        sock.sendall(json.dumps({"op": "auth", "token": sys.stdin.read()}).encode() + b"\\n")
    except OSError:
        pass
    print(sock.makefile("rb").readline().decode(), end="")
    """
)


@pytest.fixture
def open_project() -> Iterator[Project]:
    """A project another user can reach (pytest's own temp root is 0700)."""
    root = Path(tempfile.mkdtemp(prefix="tk-runner-", dir="/tmp"))
    os.chmod(root, 0o711)
    (root / ".turnkeeper").mkdir(mode=0o711)
    (root / "ws").mkdir()
    made = Project(root)
    yield made
    for proc in made.runners:
        proc.terminate()
        proc.wait(timeout=20)
    shutil.rmtree(root)


@pytest.mark.skipif(
    os.getuid() != 0
    or shutil.which("runuser") is None
    or not os.access("/usr/bin/python3", os.X_OK),
    reason="needs root, runuser and /usr/bin/python3",
)
def test_another_uid_is_refused_even_with_the_token(open_project: Project) -> None:
    open_project.runner()
    paths = RunnerPaths(open_project.state_dir)
    # Opened up so that `nobody` can reach the socket at all: the uid check is what
    # must refuse it.
    os.chmod(paths.dir, 0o711)
    os.chmod(paths.socket, 0o666)
    # The system interpreter: the test's own may live where `nobody` cannot read.
    python = "/usr/bin/python3"
    proc = subprocess.run(
        ["runuser", "-u", "nobody", "--", python, "-c", NOBODY_CLIENT, str(paths.socket)],
        input=paths.read_token(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    reply = json.loads(proc.stdout)
    assert reply["ok"] is False
    assert reply["error"]["code"] == "PERMISSION_DENIED"
    assert reply["error"]["reason"] == "peer_uid_refused"
