"""The runner journal's schema version: an unversioned journal is stamped on open, a
fresh one starts at the current version, and one from a newer release is refused
with a typed error, untouched. Every journal here is a real SQLite file."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runner.conftest import REPO, Project
from turnkeeper.errors import EXIT_CODES, ErrorCode, FailedPrecondition
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.runner.journal import JOURNAL_SCHEMA_VERSION, Journal
from turnkeeper.runner.paths import RunnerPaths

# The DDL the journal ran on every open before it had a version, as it was written.
OLD_DDL = """
CREATE TABLE IF NOT EXISTS commands (
    command_id TEXT PRIMARY KEY,
    op TEXT NOT NULL,
    turn_id TEXT,
    digest TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY,
    host_kind TEXT NOT NULL,
    identity TEXT,
    state TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    acked_seq INTEGER NOT NULL DEFAULT 0,
    turn_end TEXT,
    created_at REAL NOT NULL,
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS events (
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID;
"""
IDENTITY = ProcessIdentity(pid=4242, start_time=77, boot_id="boot-a", marker="turn-1")


def _user_version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        (version,) = db.execute("PRAGMA user_version").fetchone()
    return int(version)


def _tables(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    return [(str(name), str(sql)) for name, sql in rows]


def _old_journal(path: Path) -> None:
    """A journal as the unversioned code left it: its tables and a live turn."""
    with sqlite3.connect(path) as db:
        db.executescript(OLD_DDL)
        db.execute(
            "INSERT INTO turns (turn_id, host_kind, identity, state, last_seq, created_at)"
            " VALUES ('turn-1', 'subprocess', ?, 'live', 2, 1.0)",
            (IDENTITY.model_dump_json(),),
        )
        db.execute(
            "INSERT INTO events (turn_id, seq, body, bytes) VALUES"
            ' (\'turn-1\', 1, \'{"seq":1,"kind":"note","data":{}}\', 32),'
            ' (\'turn-1\', 2, \'{"seq":2,"kind":"note","data":{"i":2}}\', 38)'
        )
    assert _user_version(path) == 0


def test_the_current_version_is_the_number_of_steps() -> None:
    assert JOURNAL_SCHEMA_VERSION == 1


def test_a_fresh_journal_gets_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        assert journal.schema_version == JOURNAL_SCHEMA_VERSION
        journal.add_turn("t", "subprocess")  # its tables are there
        assert [row.turn_id for row in journal.turns()] == ["t"]
    finally:
        journal.close()
    assert _user_version(path) == JOURNAL_SCHEMA_VERSION


def test_an_unversioned_journal_is_stamped_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    _old_journal(path)
    before = _tables(path)
    journal = Journal(path)
    try:
        assert journal.schema_version == JOURNAL_SCHEMA_VERSION
        [turn] = journal.turns()
        assert (turn.turn_id, turn.state, turn.last_seq, turn.identity) == (
            "turn-1",
            "live",
            2,
            IDENTITY,
        )
        assert [e.seq for e in journal.events_after("turn-1", 0)] == [1, 2]
    finally:
        journal.close()
    # Stamped only: the schema is the one the old code created, unchanged.
    assert _user_version(path) == JOURNAL_SCHEMA_VERSION
    assert _tables(path) == before
    # A second open finds it current and changes nothing.
    Journal(path).close()
    assert (_user_version(path), _tables(path)) == (JOURNAL_SCHEMA_VERSION, before)


def test_a_journal_from_a_newer_release_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    _old_journal(path)
    newer = JOURNAL_SCHEMA_VERSION + 1
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {newer}")
    before = _tables(path)
    for readonly in (False, True):
        with pytest.raises(FailedPrecondition) as refused:
            Journal(path, readonly=readonly)
        assert refused.value.reason == "journal_too_new"
        assert refused.value.details == {
            "journal_version": newer,
            "code_version": JOURNAL_SCHEMA_VERSION,
        }
    assert (_user_version(path), _tables(path)) == (newer, before)


def test_a_read_only_open_of_an_unversioned_journal_reads_it_as_is(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    _old_journal(path)
    journal = Journal(path, readonly=True)
    try:
        assert [row.turn_id for row in journal.turns()] == ["turn-1"]
    finally:
        journal.close()
    assert _user_version(path) == 0  # a reader never writes the stamp


def test_the_runner_refuses_a_newer_journal_with_a_typed_error(project: Project) -> None:
    """``runner serve`` on a newer journal: the error's exit code and reason, no
    traceback, and the journal as it was."""
    paths = RunnerPaths(project.state_dir)
    paths.ensure()
    _old_journal(paths.journal)
    with sqlite3.connect(paths.journal) as db:
        db.execute(f"PRAGMA user_version = {JOURNAL_SCHEMA_VERSION + 5}")
    served = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "runner", "serve"],
        cwd=REPO,
        env={**os.environ, "TURNKEEPER_DIR": str(project.root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    said = served.stdout + served.stderr
    assert served.returncode == EXIT_CODES[ErrorCode.FAILED_PRECONDITION], said
    assert "Traceback" not in said
    assert "newer than this code" in said
    assert _user_version(paths.journal) == JOURNAL_SCHEMA_VERSION + 5
