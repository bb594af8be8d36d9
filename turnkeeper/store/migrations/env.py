"""Alembic environment: always online, on the connection the store hands over.

The store runs migrations programmatically (see ``turnkeeper.store._migrate``)
and passes its open connection in ``config.attributes["connection"]``; there is
no alembic.ini and no engine built here.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("turnkeeper migrations run through turnkeeper.store, not the alembic CLI")

context.configure(connection=connection, target_metadata=None, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
