"""The store across a PostgreSQL restart: a down server is UNAVAILABLE, nothing
acknowledged is lost, and the first append and read after it comes back succeed on
new connections (the old ones died with the server)."""

from __future__ import annotations

import json

import pytest

from tests.pg_cluster import PgCluster, pg_cluster
from tests.store.toy import KIND, add
from turnkeeper.errors import Unavailable
from turnkeeper.store import NewEvent, open_store

pytestmark = pytest.mark.timeout(300)
__all__ = ["pg_cluster"]  # the fixture, imported for this module


def test_a_restart_loses_nothing_acknowledged_and_the_store_carries_on(
    pg_cluster: PgCluster,
) -> None:
    url = pg_cluster.create_database("restart_store")
    store = open_store(url)
    try:
        for n in range(1, 21):
            assert add(store, "s1", [n], expected=n - 1) == n
        pg_cluster.stop("immediate")  # a crash: no checkpoint, WAL replay on start
        with pytest.raises(Unavailable):
            add(store, "s1", [21], expected=20)
        with pytest.raises(Unavailable):
            store.read_projection("s1")
        pg_cluster.start()
        # Both connections the store held are dead; neither call may fail for it.
        assert store.head("s1") == 20
        assert add(store, "s1", [21], expected=20) == 21
        read = store.read_stream("s1")
        assert [e.seq for e in read] == list(range(1, 22))
        assert [json.loads(e.payload)["n"] for e in read] == list(range(1, 22))
        projection = store.read_projection("s1")
        assert projection is not None and (projection.kind, projection.head_seq) == (KIND, 21)
        store.append(
            "s2", KIND, 0, [NewEvent(type="counter.added", schema_version=1, payload='{"n": 1}')],
            "{}", 1, durable=False,
        )  # fmt: skip
    finally:
        store.close()
