"""Throwaway PostgreSQL databases, for the demo (``demo --database-url``).

The demo must not write into a database that holds someone's work, so it creates a
database of its own on the server the URL names, and drops it at the end.
"""

from __future__ import annotations

import uuid

from sqlalchemy.engine.url import make_url

from turnkeeper.errors import InvalidArgument, TurnkeeperError, Unavailable
from turnkeeper.extras import needs_extra
from turnkeeper.store import _statements as q


def _conninfo(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def create_scratch_database(url: str, prefix: str = "turnkeeper_demo_") -> str:
    """Create a new, empty database on the server of ``url``; its URL."""
    if not url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        raise InvalidArgument(
            "--database-url must be a postgresql:// URL", reason="unsupported_backend"
        )
    with needs_extra("postgres", "turnkeeper demo --database-url"):
        import psycopg

    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(_conninfo(url), autocommit=True, connect_timeout=5) as conn:
            conn.execute(q.POSTGRES_CREATE_DATABASE.format(name=name))
    except psycopg.OperationalError as exc:
        raise Unavailable(
            f"cannot reach the database server: {str(exc).strip()}",
            reason="database_unavailable",
        ) from exc
    except psycopg.Error as exc:
        raise TurnkeeperError(
            f"cannot create a database there: {str(exc).strip()}",
            reason="database_refused",
        ) from exc
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    """Drop the database ``url`` names, ending its leftover connections first."""
    with needs_extra("postgres", "turnkeeper demo --database-url"):
        import psycopg

    name = make_url(url).database
    if not name:
        return
    with psycopg.connect(_conninfo(url, "postgres"), autocommit=True, connect_timeout=5) as conn:
        conn.execute(q.POSTGRES_END_CONNECTIONS, (name,))
        conn.execute(q.POSTGRES_DROP_DATABASE.format(name=name))
