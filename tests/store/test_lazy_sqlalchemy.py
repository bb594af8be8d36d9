"""On SQLite the everyday store paths never import SQLAlchemy or Alembic.

Opening a store at head, its reads, listings, lookups and appends run fixed SQL on
plain ``sqlite3`` connections (store/_connections.py): importing SQLAlchemy cost
~130 ms of every command. A migration, verify and repair still use it, imported
then. Checked in a fresh interpreter, whose ``sys.modules`` names every import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from turnkeeper.store import open_store

TIMEOUT = 120.0

_EVERYDAY = """
import json, sys
from tests.store.toy import KIND, CounterFolder, add, events_of, state_of
from turnkeeper.store import IndexEntry, StreamAppend, open_store

store = open_store(sys.argv[1])
try:
    add(store, "s1", [1, 2], index=[IndexEntry(entity_id="e-1", entity_kind="thing")])
    store.append_many([
        StreamAppend(stream_id="s2", kind=KIND, expected_seq=0, events=events_of([3]),
                     projection_state=state_of([3]), projection_schema_version=1),
    ])
    assert store.head("s1") == 2
    assert [e.seq for e in store.read_stream("s1")] == [1, 2]
    assert store.read_projection("s2") is not None
    assert store.read_projection("unknown") is None  # a miss, confirmed by a scan
    assert len(store.list_projections(KIND)) == 2
    assert list(store.list_projections_of([KIND, "other"])) == [KIND, "other"]
    assert store.lookup("e-1") == ("s1", "thing")
    assert store.lookup("e-2") is None
    assert store.lookup_prefix("e-", "thing") == ["e-1"]
    store.now()
    before = sorted(m for m in sys.modules if m.split(".")[0] in ("sqlalchemy", "alembic"))
    store.verify(CounterFolder())  # verify is allowed to: it imports it now
    after = "sqlalchemy" in sys.modules
finally:
    store.close()
print(json.dumps({"before": before, "after": after}))
"""


def test_everyday_paths_import_no_sqlalchemy(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    open_store(path).close()  # created and migrated here: the child opens it at head
    proc = subprocess.run(
        [sys.executable, "-c", _EVERYDAY, str(path)],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["before"] == []
    assert found["after"] is True  # the check itself can see an import


def test_a_new_database_is_migrated_with_alembic(tmp_path: Path) -> None:
    script = (
        "import sys\nfrom turnkeeper.store import open_store\n"
        "open_store(sys.argv[1]).close()\nprint('alembic' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "new.db")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == "True"
