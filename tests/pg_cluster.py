"""A throwaway PostgreSQL 15 cluster a test may stop, kill and restart.

The shared test server must never be restarted, so tests that take the database away
from running workers get a cluster of their own: ``initdb`` into a fresh directory
owned by the ``postgres`` user (the tests run as root, and PostgreSQL refuses to run
as root), listening on a free port of 127.0.0.1 only, its unix socket inside that
directory, trust authentication, ``fsync=on`` (a restart after ``immediate`` is a
crash recovery, and what it recovers must be what was acknowledged).

``cluster`` is a module-scoped fixture that always stops the server and removes the
directory, whatever the tests did to it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import psycopg
import pytest
from psycopg import sql

BIN = Path("/usr/lib/postgresql/15/bin")
USER = "postgres"
StopMode = Literal["smart", "fast", "immediate"]
_START_TIMEOUT_S = 60


def available() -> str | None:
    """Why no throwaway cluster can be made here (None: it can)."""
    if not (BIN / "initdb").exists():
        return f"no PostgreSQL 15 binaries in {BIN}"
    if shutil.which("runuser") is None:
        return "runuser is missing"
    try:
        import pwd

        pwd.getpwnam(USER)
    except KeyError:
        return f"no {USER!r} user"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PgCluster:
    """One cluster in ``root`` (a new temporary directory unless given)."""

    def __init__(self, root: Path | None = None, listen: tuple[str, ...] = ("127.0.0.1",)) -> None:
        """``listen``: the addresses the server listens on (and trusts clients of the
        same /16: a test's own veth networks)."""
        self.root = root or Path(tempfile.mkdtemp(prefix="tk-pgcluster-"))
        self.listen = listen
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.restarts = 0

    def _as_postgres(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", USER, "--", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _ctl(self, *args: str, timeout: float = 120) -> None:
        done = self._as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), *args, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(
                f"pg_ctl {' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}"
                f"\n--- server log\n{self.server_log()[-3000:]}"
            )

    def init(self) -> None:
        import pwd

        entry = pwd.getpwnam(USER)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        for path in (self.root, self.socket_dir):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        self.log.touch()
        os.chown(self.log, entry.pw_uid, entry.pw_gid)
        done = self._as_postgres(
            str(BIN / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stdout}{done.stderr}")
        settings = {
            "listen_addresses": f"'{','.join(self.listen)}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "fsync": "on",
            "max_connections": "200",
            "shared_buffers": "32MB",
            "logging_collector": "off",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            for key, value in settings.items():
                conf.write(f"{key} = {value}\n")
        with (self.data / "pg_hba.conf").open("a") as hba:
            for address in self.listen:
                if address != "127.0.0.1":
                    network = ".".join(address.split(".")[:2]) + ".0.0/16"
                    hba.write(f"host all all {network} trust\n")

    def server_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def start(self) -> None:
        self._ctl("-l", str(self.log), "-w", "-t", str(_START_TIMEOUT_S), "start")

    def stop(self, mode: StopMode = "fast") -> None:
        self._ctl("-m", mode, "-w", "-t", str(_START_TIMEOUT_S), "stop")

    def restart(self, mode: StopMode = "fast", down_seconds: float = 0.0) -> None:
        """Stop (``fast`` ends sessions cleanly, ``immediate`` is a crash), stay down
        ``down_seconds``, start again."""
        self.stop(mode)
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1

    def running(self) -> bool:
        done = self._as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "status")
        return done.returncode == 0

    def url(self, dbname: str = "postgres", host: str = "127.0.0.1") -> str:
        return f"postgresql://{USER}@{host}:{self.port}/{dbname}"

    def create_database(self, name: str, host: str = "127.0.0.1") -> str:
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name, host)

    def restart_command(self, mode: StopMode = "fast", down_seconds: float = 2.0) -> str:
        """A shell command that restarts this cluster (for ``--restart-database-command``)."""
        ctl = f"{BIN / 'pg_ctl'} -D {self.data}"
        as_pg = f"runuser -u {USER} --"
        return (
            f"{as_pg} {ctl} -m {mode} -w -t {_START_TIMEOUT_S} stop && sleep {down_seconds} && "
            f"{as_pg} {ctl} -l {self.log} -w -t {_START_TIMEOUT_S} start"
        )

    def destroy(self) -> None:
        if self.data.exists() and self.running():
            self._as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[PgCluster]:
    """A running throwaway cluster for the module, always stopped and removed after."""
    why = available()
    if why is not None:
        if os.environ.get("TURNKEEPER_REQUIRE_POSTGRES", "") == "1":
            pytest.fail(f"no throwaway PostgreSQL cluster: {why}", pytrace=False)
        pytest.skip(f"no throwaway PostgreSQL cluster: {why}")
    with running_cluster() as cluster:
        yield cluster


@contextmanager
def running_cluster(listen: tuple[str, ...] = ("127.0.0.1",)) -> Iterator[PgCluster]:
    """A cluster made and started for the block, always stopped and removed after."""
    cluster = PgCluster(listen=listen)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
