"""Schema migrations: Alembic from the first release, cheap when nothing to do, and a
schema that does not match its stamp is ``DATA_LOSS`` (on every backend)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from tests.store._schema_tools import migrate, restamp, revisions, stamp_of
from tests.store.conftest import Backend
from tests.store.toy import KIND, CounterFolder, add, state_of
from turnkeeper.errors import DataLoss, FailedPrecondition, InvalidArgument
from turnkeeper.store import EventStore, IndexEntry, _migrate, open_store
from turnkeeper.store._checksum import event_checksum, projection_checksum


def test_known_revisions_match_the_migration_scripts() -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(_migrate.MIGRATIONS_DIR))
    script = ScriptDirectory.from_config(cfg)
    assert script.get_heads() == [_migrate.HEAD_REVISION]
    revisions = [r.revision for r in script.walk_revisions()]
    assert sorted(revisions) == sorted(_migrate.KNOWN_REVISIONS)


def test_empty_file_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with open_store(path) as store:
        assert add(store, "s1", [1]) == 1
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (_migrate.HEAD_REVISION,)
        ]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


def test_reopen_is_idempotent_and_skips_alembic(
    open_new: Callable[[], EventStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = open_new()
    add(first, "s1", [1, 2])
    first.close()

    def no_alembic(*_: object) -> None:
        raise AssertionError("Alembic ran although the schema is current")

    monkeypatch.setattr(_migrate, "_upgrade", no_alembic)
    again = open_new()
    assert again.head("s1") == 2
    assert open_new().head("s1") == 2


def test_schema_too_new(backend: Backend) -> None:
    open_store(backend.url).close()
    restamp(backend.url, "9999_from_the_future")
    with pytest.raises(FailedPrecondition) as err:
        open_store(backend.url)
    assert err.value.reason == "schema_too_new"
    assert err.value.details["database_revisions"] == ["9999_from_the_future"]


def test_a_revision_row_that_does_not_match_its_stamp_is_data_loss(backend: Backend) -> None:
    # '0002' with one bit flipped reads '0003': a revision this code does not know,
    # which only its stamp tells apart from a newer database.
    open_store(backend.url).close()
    backend.execute("UPDATE alembic_version SET version_num = '0003'")
    with pytest.raises(DataLoss) as err:
        open_store(backend.url)
    assert err.value.reason == "schema_damaged"


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE entity_index RENAME COLUMN entity_kind TO entity_kinx",
        "ALTER TABLE events RENAME TO evento",
        "DROP INDEX ix_projections_kind_created",
        "DELETE FROM alembic_version",
    ],
)
def test_a_schema_that_does_not_match_its_stamp_is_data_loss(backend: Backend, change: str) -> None:
    with open_store(backend.url) as store:
        add(store, "s1", [1])
    backend.execute(change)
    with pytest.raises(DataLoss) as err:
        open_store(backend.url)
    assert err.value.reason == "schema_damaged"


def _database_at_0001(backend: Backend) -> None:
    """A database as the code of revision 0001 left it: a goal-like stream with one
    indexed entity, rows and checksums written the 0001 way."""
    migrate(backend.url, "upgrade", "0001")
    at, state = 1_700_000_000_000_000, state_of([7])
    backend.execute(
        "INSERT INTO projections VALUES (?, ?, 1, 1, ?, ?, ?)",
        ("s1", KIND, state, projection_checksum("s1", KIND, 1, 1, state), at),
    )
    payload = '{"n": 7}'
    backend.execute(
        "INSERT INTO events VALUES ('s1', 1, 'counter.added', 1, ?, ?, ?)",
        (payload, at, event_checksum("s1", 1, "counter.added", 1, at, payload)),
    )
    backend.execute("INSERT INTO entity_index VALUES ('e1', 's1', 'thing')")


def test_a_0001_database_is_migrated_and_its_rows_check_out(backend: Backend) -> None:
    _database_at_0001(backend)
    assert stamp_of(backend.url) == 0
    with open_store(backend.url) as store:
        assert store.lookup("e1") == ("s1", "thing")
        assert store.lookup("e2") is None
        assert [p.stream_id for p in store.list_projections(KIND)] == ["s1"]
        assert store.verify(CounterFolder()).ok
        assert add(store, "s1", [1], index=[IndexEntry(entity_id="e2", entity_kind="thing")]) == 2
        assert store.lookup("e2") == ("s1", "thing")
    assert revisions(backend.url) == ["0002"]
    assert stamp_of(backend.url) != 0
    with open_store(backend.url) as again:  # stamped: opens without Alembic, checks out
        assert again.head("s1") == 2


def test_unsupported_backend_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument):
        open_store("mysql://nowhere/db")
    with pytest.raises(InvalidArgument):
        open_store("sqlite://")


def test_a_sqlite_url_with_options_is_refused_not_opened_another_way(tmp_path: Path) -> None:
    """A SQLite store is reached one way, a plain file through the store's own
    connections: a URL whose options only SQLAlchemy would read is refused, and no
    file is made."""
    url = f"sqlite:///{tmp_path / 'opts.db'}?timeout=5"
    with pytest.raises(InvalidArgument) as refused:
        open_store(url)
    assert refused.value.reason == "bad_database_url"
    assert not (tmp_path / "opts.db").exists()
