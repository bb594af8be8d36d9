"""The EventStore contract as test functions any backend's tests can run.

Each module here holds ``test_*`` functions that reach the store only through the
:class:`turnkeeper.store.EventStore` interface and ``open_event_store``/``open_store``,
and the stored rows only the way another program would (tests/store/_damage.py: SQL
on a connection of its own, or the in-memory database's tables). They ask for these
fixtures (tests/store/conftest.py provides them, parametrized over its
``CONTRACT_BACKENDS``: SQLite, PostgreSQL and the in-memory store):

* ``backend``: ``.name``, ``.url`` (what ``open_event_store`` opens), ``.execute(sql,
  params)`` (SQL backends only);
* ``open_new``: opens another store on that database (closed at teardown);
* ``store``: one store opened with ``open_new``;
* ``folder``: a fresh ``tests.store.toy.CounterFolder``.

A test that cannot apply to the in-memory store says why with
``tests.store.conftest.not_for_memory``; it is reported as skipped there.

A test module runs them by importing them (pytest collects the ``test_*`` names a
module holds): ``from tests.store.conformance.appends import *``. Tests of one
implementation's internals, or of a database file's bytes, do not belong here.
"""
