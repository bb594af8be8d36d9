"""The EventStore contract as test functions any backend's tests can run.

Each module here holds ``test_*`` functions that reach the store only through the
:class:`turnkeeper.store.EventStore` interface and ``open_store``, and a database only
through SQL on a connection of their own (``backend.execute``). They ask for these
fixtures (tests/store/conftest.py provides them, parametrized over its ``BACKENDS``):

* ``backend``: ``.name``, ``.url`` (what ``open_store`` opens), ``.execute(sql, params)``;
* ``open_new``: opens another store on that database (closed at teardown);
* ``store``: one store opened with ``open_new``;
* ``folder``: a fresh ``tests.store.toy.CounterFolder``.

A test module runs them by importing them (pytest collects the ``test_*`` names a
module holds): ``from tests.store.conformance.appends import *``. Tests of one
implementation's internals, or of a database file's bytes, do not belong here.
"""
