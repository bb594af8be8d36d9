"""Where a crash project keeps its state: the backends, and a PostgreSQL database each.

On ``sqlite`` the project's store is the file ``turnkeeper init`` makes. On
``postgresql`` it is a database of the project's own on the test server
(tests/pg.py), which ``turnkeeper init --database-url`` records for every control
plane the test starts. A database rather than a schema of the run's database:
``LISTEN``/``NOTIFY`` channels and advisory locks are database-wide, so projects
running side by side would otherwise see each other's wake-ups and lock keys.
"""

from __future__ import annotations

import uuid

from psycopg import sql

from tests import pg

SQLITE, POSTGRESQL = "sqlite", "postgresql"
BACKENDS = (SQLITE, POSTGRESQL)


def fresh_database() -> pg.PostgresDatabase:
    """A new, empty database on the test server; the caller drops it. Without a server
    this skips, or fails under ``TURNKEEPER_REQUIRE_POSTGRES=1`` (CI), as every
    PostgreSQL test does (the run's database is how tests/pg.py finds that out)."""
    server = pg.session_database().server
    name = f"tk_crash_{uuid.uuid4().hex[:12]}"
    with pg.admin_connect(server) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return pg.PostgresDatabase(server, name, pg.with_database(server, name))
