"""The time ``turnkeeper logs`` shows for a host event is when the host printed it.

Host events reach the journal in batches (up to a second's worth in one record), so
the record's time is the batch's. A shell agent prints its messages a few hundred
milliseconds apart, well within one batch: ``logs``, ``turn show`` and the API's
event stream must each show the events at distinct, increasing times, the same in
all three.
"""

from __future__ import annotations

import json
from datetime import datetime
from itertools import pairwise
from typing import Any

from tests.usage.project import UserProject
from turnkeeper.api.events import Position, read_frames
from turnkeeper.store import open_store

AGENT = """#!/bin/sh
# Three messages 0.3 s apart, then the page and the result: one batch of events.
set -eu
for i in 1 2 3; do
  printf '{"kind": "message", "data": {"text": "step %s"}}\\n' $i
  sleep 0.3
done
echo "# page" > page.md
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s]}}\\n' \\
  '{"key": "page", "command": "test -s page.md"}'
"""


def _one_turn(project: UserProject) -> str:
    agent = project.agent("agent.sh", AGENT)
    config = project.host_config("agent", {"command": [str(agent)], "event_format": "jsonl"})
    goal = project.tk("goal", "add", "One page", "-c", "the page exists", "-q").stdout.strip()
    project.tk("todo", "add", goal, "Write the page", "--requires-evidence", "page")
    created = project.tk_json(
        "session", "create", goal, "--host", "subprocess", "--host-config", config
    )
    project.tk("run", "--max-turns", "1")
    return str(created["session_id"])


def _times(events: list[dict[str, Any]]) -> list[datetime]:
    return [datetime.fromisoformat(e["at"]) for e in events]


def test_events_of_one_batch_show_when_each_was_printed(user_project: UserProject) -> None:
    project = user_project
    sid = _one_turn(project)
    lines = project.tk("logs", sid, "--json").stdout.splitlines()
    logged = [_loads(line) for line in lines]
    assert [e["data"].get("text") for e in logged if e["kind"] == "message"] == [
        "step 1",
        "step 2",
        "step 3",
    ], logged
    records = [e["stream_seq"] for e in logged]
    # The case at hand: several events journaled in one record (one batch).
    assert len(set(records)) < len(records), logged
    times = _times(logged)
    assert all(a < b for a, b in pairwise(times)), times
    # ``turn show`` and the API read the same times.
    shown = project.tk_json("turn", "show", logged[0]["turn_id"], "--events", "100")
    assert _times(shown["events"]) == times

    store = open_store(f"sqlite:///{project.database}")
    try:
        frames, _, _ = read_frames(store, sid, Position(0))
    finally:
        store.close()
    host = [_loads(f.split("data: ", 1)[1]) for f in frames if f.startswith("event: host")]
    assert _times(host) == times


def _loads(text: str) -> dict[str, Any]:
    value = json.loads(text)
    assert isinstance(value, dict)
    return value
