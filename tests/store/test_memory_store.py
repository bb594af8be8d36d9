"""The in-memory store beyond the contract: how it is opened and shared, and how long
its databases live. (The contract itself runs on it with the other backends:
tests/store/test_contract*.py.)"""

from __future__ import annotations

import gc
import uuid
from pathlib import Path

import pytest

from tests.store.toy import add, values_of
from turnkeeper.errors import FailedPrecondition, InvalidArgument
from turnkeeper.store import MemoryEventStore, SqlEventStore, open_event_store
from turnkeeper.store.memory import MemoryDatabase, open_memory_store


def test_memory_url_opens_a_private_database_each_time() -> None:
    first, second = open_event_store("memory:"), open_event_store("memory:")
    assert isinstance(first, MemoryEventStore)
    add(first, "s1", [1, 2])
    assert first.head("s1") == 2
    assert second.head("s1") == 0


def test_a_named_memory_database_is_shared_while_a_store_holds_it() -> None:
    url = f"memory:{uuid.uuid4().hex}"
    writer = open_event_store(url)
    add(writer, "s1", [1, 2])
    reader = open_event_store(url)
    assert values_of(reader, "s1") == [1, 2]
    writer.close()
    assert values_of(reader, "s1") == [1, 2]  # closing one store keeps the database
    with pytest.raises(FailedPrecondition):
        writer.head("s1")
    del writer, reader
    gc.collect()
    assert open_event_store(url).head("s1") == 0  # nobody held it: a new database


def test_stores_given_one_database_share_it() -> None:
    database = MemoryDatabase()
    with MemoryEventStore(database) as one, MemoryEventStore(database) as two:
        add(one, "s1", [5])
        assert values_of(two, "s1") == [5]
    with pytest.raises(FailedPrecondition) as err:
        one.read_stream("s1")  # the context manager closed it
    assert err.value.reason == "store_closed"


def test_open_memory_store_refuses_another_url() -> None:
    with pytest.raises(InvalidArgument):
        open_memory_store("sqlite:///nowhere.db")


def test_open_event_store_opens_the_sql_backends_too(tmp_path: Path) -> None:
    with open_event_store(tmp_path / "store.db") as store:
        assert isinstance(store, SqlEventStore)
        assert add(store, "s1", [1]) == 1
