"""A project exactly as a user makes one, driven through the real ``turnkeeper`` command.

A git repository with its own ``.gitignore`` (``.env``, ``*.log``) and a private
``.env`` and ``debug.log`` a user would have, one commit, then ``turnkeeper init`` —
every later step goes through the installed ``turnkeeper`` executable in a child
process, with an environment free of ``TURNKEEPER_*`` settings (a user's shell has
none), so what these tests see is what a user sees.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

COMMAND_TIMEOUT = 120.0
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "A User",
    "GIT_AUTHOR_EMAIL": "user@example.com",
    "GIT_COMMITTER_NAME": "A User",
    "GIT_COMMITTER_EMAIL": "user@example.com",
}


def turnkeeper_executable() -> list[str]:
    """The console script installed next to this interpreter (what a user runs)."""
    script = Path(sys.executable).with_name("turnkeeper")
    return [str(script)] if script.exists() else [sys.executable, "-m", "turnkeeper.cli.main"]


@dataclass
class Background:
    """A ``turnkeeper`` command running in the background, its output going to files."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path
    _files: list[IO[bytes]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float = COMMAND_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"still running after {timeout}s\n{self.output()}") from None
        finally:
            self._close()

    def signal(self, sig: signal.Signals) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL this command (our own child, by its pid) if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        for f in self._files:
            f.close()
        self._files.clear()

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def output(self) -> str:
        out, err = self.stdout()[-8000:], self.err.read_text(errors="replace")[-8000:]
        return f"--- stdout\n{out}\n--- stderr\n{err}"

    def json_lines(self) -> list[dict[str, Any]]:
        """Every line of ``--json`` output, parsed (a line that is not JSON fails)."""
        return [json.loads(line) for line in self.stdout().splitlines() if line.strip()]

    def summary(self) -> dict[str, Any]:
        """The last JSON line: ``run --json`` ends with its summary."""
        lines = self.json_lines()
        assert lines, self.output()
        return lines[-1]


@dataclass
class Completed:
    args: tuple[str | bytes, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


class UserProject:
    """``root`` is the git work tree and the turnkeeper project (``turnkeeper init`` ran there)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._background: list[Background] = []
        self._runs = 0
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        (root / ".gitignore").write_text(".env\n*.log\n")
        (root / "README.md").write_text("a project of a user's\n")
        (root / ".env").write_text("API_TOKEN=secret-of-the-user\n")
        (root / "debug.log").write_text("the user's own log\n")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "initial")
        self.tk("init")

    # --- running things -----------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env.update(GIT_IDENTITY)
        env.update(extra)
        return env

    def git(self, *args: str) -> str:
        proc = subprocess.run(
            ["git", *args],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=COMMAND_TIMEOUT,
        )
        return proc.stdout

    def tk(
        self,
        *args: str | bytes,
        expect: int | None = 0,
        timeout: float = COMMAND_TIMEOUT,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        executable: Sequence[str] | None = None,
    ) -> Completed:
        """Run ``turnkeeper ARGS`` to its end; ``expect`` is the exit code (None: any).
        An argument given as ``bytes`` reaches the command as those bytes (not UTF-8,
        say), as a shell passes a file name. ``executable``: another release's command
        instead of the installed one."""
        proc = subprocess.run(
            [*(executable or turnkeeper_executable()), *args],
            cwd=self.root,
            env=self.env(**(env or {})),
            capture_output=True,
            input=input,
            timeout=timeout,
            check=False,
        )
        done = Completed(
            args=args,
            returncode=proc.returncode,
            stdout=proc.stdout.decode(errors="replace"),
            stderr=proc.stderr.decode(errors="replace"),
        )
        if expect is not None:
            shown = " ".join(os.fsdecode(a) if isinstance(a, bytes) else a for a in args)
            assert done.returncode == expect, (
                f"turnkeeper {shown!r} exited {done.returncode}, expected {expect}\n"
                f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-6000:]}"
            )
        return done

    def tk_json(self, *args: str | bytes, expect: int = 0) -> Any:
        return self.tk(*args, "--json", expect=expect).json()

    def start(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        prefix: tuple[str, ...] = (),
        executable: Sequence[str] | None = None,
    ) -> Background:
        """Start ``turnkeeper ARGS`` in the background (e.g. ``run --json``), under
        ``prefix`` when given (e.g. ``unshare --pid --fork --mount-proc``)."""
        self._runs += 1
        out = self.root.parent / f"{self.root.name}-bg{self._runs}.out"
        err = self.root.parent / f"{self.root.name}-bg{self._runs}.err"
        fo, fe = out.open("wb"), err.open("wb")
        proc = subprocess.Popen(
            [*prefix, *(executable or turnkeeper_executable()), *args],
            cwd=self.root,
            env=self.env(**(env or {})),
            stdin=subprocess.DEVNULL,
            stdout=fo,
            stderr=fe,
        )
        bg = Background(proc, out, err, [fo, fe])
        self._background.append(bg)
        return bg

    def close(self) -> None:
        """SIGKILL whatever we started in the background and did not wait for."""
        for bg in self._background:
            bg.kill()

    # --- a user's files -----------------------------------------------------------------

    def agent(self, name: str, script: str) -> Path:
        """An executable agent script outside the work tree (as a user keeps their tools)."""
        path = self.root.parent / f"{self.root.name}-{name}"
        path.write_text(script)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path

    def host_config(self, name: str, config: dict[str, Any]) -> str:
        """Write a host config file the way a user would; returns ``@FILE`` for the CLI."""
        path = self.root.parent / f"{self.root.name}-{name}.json"
        path.write_text(json.dumps(config, indent=2))
        return f"@{path}"

    # --- what is durable ----------------------------------------------------------------

    @property
    def database(self) -> Path:
        return self.root / ".turnkeeper" / "turnkeeper.db"

    def durable_digest(self) -> str:
        """A digest of every row of every table: equal before and after means nothing
        durable was written."""
        conn = sqlite3.connect(self.database)
        try:
            digest = hashlib.sha256()
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                )
            ]
            for table in tables:
                digest.update(table.encode())
                for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
                    digest.update(repr(row).encode())
            return digest.hexdigest()
        finally:
            conn.close()

    def database_bytes(self) -> int:
        """The store's size on disk, its WAL included."""
        total = 0
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{self.database}{suffix}")
            if path.exists():
                total += path.stat().st_size
        return total


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``predicate`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def processes_with(token: str) -> list[int]:
    """Live processes whose command line holds ``token`` (a test's unique argument)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def kill_processes_with(token: str) -> list[int]:
    """SIGKILL what a test's own agent started (found by its unique argument)."""
    pids = processes_with(token)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids
