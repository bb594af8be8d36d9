"""Migrations on every backend: all the way down and up again, concurrent first opens,
and a database newer than this code.

The schema is compared as the store's dialect describes it (``schema_description``,
what the schema stamp is computed over), so "the same schema" means the same tables,
columns, indexes and constraints as the database itself reports them.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

from tests.store import _workers
from tests.store._schema_tools import describe, migrate, own_tables, restamp, revisions, stamp_of
from tests.store.conftest import Backend, make_backend
from tests.store.toy import KIND, CounterFolder, add, state_of
from turnkeeper.errors import FailedPrecondition
from turnkeeper.store import IndexEntry, _migrate, open_store


def _unquoted(schema: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """SQLite writes a table's name quoted once batch mode has rebuilt it (copy, drop,
    ``ALTER TABLE ... RENAME``): ``CREATE TABLE "events"``. Same table, other text."""
    out = []
    for row in schema:
        if row[0] == "table":
            quoted, plain = f'CREATE TABLE "{row[1]}"', f"CREATE TABLE {row[1]}"
            out.append((*row[:3], row[3].replace(quoted, plain)))
        else:
            out.append(row)
    return out


def _seed(url: str) -> None:
    with open_store(url) as store:
        add(store, "s1", [1, 2], index=[IndexEntry(entity_id="e1", entity_kind="thing")])
        add(store, "s2", [3])


def test_down_to_base_and_up_again_gives_the_same_schema(backend: Backend, tmp_path: Path) -> None:
    _seed(backend.url)
    at_head = describe(backend.url)
    stamp = stamp_of(backend.url)
    assert revisions(backend.url) == [_migrate.HEAD_REVISION]

    # One step down keeps the rows; the step up computes their new checksums.
    migrate(backend.url, "downgrade", "0001")
    assert revisions(backend.url) == ["0001"]
    fresh = make_backend(backend.name, tmp_path / "fresh")
    migrate(fresh.url, "upgrade", "0001")
    assert _unquoted(describe(backend.url)) == describe(fresh.url)  # what 0001 creates
    assert backend.execute("SELECT stream_id, head_seq FROM projections ORDER BY 1") == [
        ("s1", 2),
        ("s2", 1),
    ]
    with open_store(backend.url) as store:  # migrates up again
        assert [e.seq for e in store.read_stream("s1")] == [1, 2]
        assert store.lookup("e1") == ("s1", "thing")
        assert store.verify(CounterFolder()).ok
    assert _unquoted(describe(backend.url)) == at_head
    if backend.name != "sqlite":  # the stamp is over the text, quotes and all
        assert stamp_of(backend.url) == stamp

    # All the way down: none of the store's tables is left.
    migrate(backend.url, "downgrade", "base")
    assert own_tables(backend.url) == set()
    assert revisions(backend.url) == []
    with open_store(backend.url) as store:  # a fresh store again
        assert store.head("s1") == 0
        assert add(store, "s1", [7]) == 1
        projection = store.read_projection("s1")
        assert projection is not None and projection.state == state_of([7])
    assert describe(backend.url) == at_head
    assert stamp_of(backend.url) == stamp
    assert revisions(backend.url) == [_migrate.HEAD_REVISION]


def test_four_processes_open_a_fresh_database_at_once(backend: Backend, tmp_path: Path) -> None:
    writers = 4
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(writers)
    procs = [
        ctx.Process(target=_workers.open_at_once, args=(backend.url, f"w{i}", barrier))
        for i in range(writers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * writers
    assert revisions(backend.url) == [_migrate.HEAD_REVISION]
    alone = make_backend(backend.name, tmp_path / "alone")
    open_store(alone.url).close()
    assert describe(backend.url) == describe(alone.url)  # one schema, created once
    assert stamp_of(backend.url) == stamp_of(alone.url)
    with open_store(backend.url) as store:
        assert [store.head(f"w{i}") for i in range(writers)] == [1] * writers
        listed = {p.stream_id for p in store.list_projections(KIND)}
        assert listed == {f"w{i}" for i in range(writers)}


def test_a_database_newer_than_the_code_is_refused(backend: Backend) -> None:
    _seed(backend.url)
    restamp(backend.url, "9999_from_the_future")
    with pytest.raises(FailedPrecondition) as err:
        open_store(backend.url)
    assert err.value.reason == "schema_too_new"
    assert err.value.details["database_revisions"] == ["9999_from_the_future"]
    assert err.value.details["code_head"] == _migrate.HEAD_REVISION
    # Refused, not touched: the rows and the revision are as they were.
    assert revisions(backend.url) == ["9999_from_the_future"]
    assert backend.execute("SELECT count(*) FROM events") == [(3,)]
