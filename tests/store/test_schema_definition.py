"""The schema is defined once (turnkeeper/store/_schema.py) and the migrations build it.

The migrations run on a fresh database of each backend (SQLite: a new file;
PostgreSQL: a new schema in the run's throwaway database, tests/pg.py), the way the
store runs them when it opens a database; the database is then inspected and
compared with the metadata by Alembic's autogenerate comparison: tables, columns,
types, nullability, indexes and foreign keys. Primary keys, which that comparison
leaves out, are compared by inspection.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, inspect
from sqlalchemy.engine import Connection

from tests.store._schema_tools import dialect_engine
from tests.store.conftest import Backend
from turnkeeper.store import _migrate, _schema, open_store

# The store's own bookkeeping, not part of the schema it describes.
_BOOKKEEPING = {"alembic_version"}


def _own_objects(name: str | None, type_: str, _parent: object) -> bool:
    return not (type_ == "table" and name in _BOOKKEEPING)


@contextmanager
def _migrated(backend: Backend) -> Iterator[Connection]:
    """A connection to ``backend``'s database after the store migrated it to the head."""
    open_store(backend.url).close()
    with dialect_engine(backend.url) as (_dialect, engine), engine.connect() as conn:
        yield conn


def _differences(conn: Connection, metadata: MetaData) -> list[object]:
    context = MigrationContext.configure(
        conn, opts={"compare_type": True, "include_name": _own_objects}
    )
    return list(compare_metadata(context, metadata))


def test_the_migrations_build_exactly_the_defined_schema(backend: Backend) -> None:
    with _migrated(backend) as conn:
        assert _differences(conn, _schema.metadata) == []
        inspector = inspect(conn)
        tables = set(inspector.get_table_names())
        assert tables - _BOOKKEEPING == set(_schema.metadata.tables) == set(_migrate.OWN_TABLES)
        for name, table in _schema.metadata.tables.items():
            keys = inspector.get_pk_constraint(name)["constrained_columns"]
            assert keys == [c.name for c in table.primary_key.columns], name


def test_the_comparison_sees_a_schema_that_differs(backend: Backend) -> None:
    """Not a comparison that finds nothing whatever it is given: one column more, one
    nullability changed and one index fewer in the metadata are each reported."""
    changed = MetaData()
    for table in _schema.metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["events"].append_column(Column("extra", Integer, nullable=True))
    changed.tables["entity_index"].c.entity_kind.nullable = True
    projections = changed.tables["projections"]
    projections.indexes.clear()
    with _migrated(backend) as conn:
        found = {(d[0], _subject(d)) for d in _flat(_differences(conn, changed))}
    assert found == {
        ("add_column", "extra"),
        ("modify_nullable", "entity_kind"),
        ("remove_index", "ix_projections_kind_created"),
    }


def _flat(diffs: list[object]) -> list[tuple[object, ...]]:
    """Alembic reports a column change as a list of changes, the rest as tuples."""
    out: list[tuple[object, ...]] = []
    for diff in diffs:
        if isinstance(diff, list):
            out.extend(d for d in diff if isinstance(d, tuple))
        elif isinstance(diff, tuple):
            out.append(diff)
    return out


def _subject(diff: tuple[object, ...]) -> str:
    """The name a difference is about: its column's or its index's."""
    if diff[0] == "modify_nullable":
        return str(diff[3])
    named = diff[3] if diff[0] == "add_column" else diff[1]
    name = getattr(named, "name", None)
    if not isinstance(name, str):
        pytest.fail(f"unexpected difference {diff!r}")
    return name
