"""Schema migrations: Alembic from the first release, cheap when nothing to do."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from tests.store.toy import add
from turnkeeper.errors import FailedPrecondition
from turnkeeper.store import SqlEventStore, _migrate, open_store


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
    open_new: Callable[[], SqlEventStore], monkeypatch: pytest.MonkeyPatch
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


def test_schema_too_new(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    open_store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    conn.commit()
    conn.close()
    with pytest.raises(FailedPrecondition) as err:
        open_store(path)
    assert err.value.reason == "schema_too_new"
    assert err.value.details["database_revisions"] == ["9999_from_the_future"]


def test_unsupported_backend_is_invalid_argument() -> None:
    from turnkeeper.errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        open_store("mysql://nowhere/db")
    with pytest.raises(InvalidArgument):
        open_store("sqlite://")
