"""A large goal's projection lags its stream: appends past the snapshot threshold write
no projection, and every reader — load, list, status (the library's, the API's, the
CLI's), goal show, notifications, verify — still sees the whole goal."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnkeeper.api.routes_status import status as api_status
from turnkeeper.cli.main import app
from turnkeeper.kernel import GoalState, fold_goal
from turnkeeper.notify.deliverer import Deliverer
from turnkeeper.notify.endpoints import add_endpoint
from turnkeeper.notify.outbox import load as load_outbox
from turnkeeper.notify.post import Outcome
from turnkeeper.project_api import Project
from turnkeeper.runtime.log.streams import SNAPSHOT_ALWAYS_BELOW_CHARS, load_stream
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goal_reads import GOAL_KIND, GOAL_LAG_BYTES_PER_EVENT
from turnkeeper.runtime.services.goals import GOAL_CODEC, goal_stream
from turnkeeper.store import EventStore

GOAL = "g"
STREAM = goal_stream(GOAL)
# A title long enough that a few hundred todos pass the snapshot threshold.
TITLE = "Write and test one more part of the parser, " * 6


def _full_fold(store: EventStore) -> GoalState:
    return fold_goal(GOAL_CODEC.decode_event(r) for r in store.read_stream(STREAM))


def _lag(store: EventStore) -> tuple[int, int]:
    """(the projection row's head, the stream's)."""
    projection = store.read_projection(STREAM)
    assert projection is not None
    return projection.head_seq, store.head(STREAM)


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """A project whose goal's state is past the size under which every append
    snapshots, with a projection that lags its stream by a few appends."""
    root = tmp_path / "p"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    with Project.init(root) as project:
        project.goals.add("Ship the parser", goal_id=GOAL)
        # Grown until a snapshot has just been written of a state large enough that
        # the next eight appends (the three below, and the tests' own) leave the row
        # behind: a snapshot comes every len(state) // GOAL_LAG_BYTES_PER_EVENT appends.
        enough = max(SNAPSHOT_ALWAYS_BELOW_CHARS, 8 * GOAL_LAG_BYTES_PER_EVENT)
        for n in range(10 * enough // len(TITLE)):  # bounded: each todo adds its title
            projection = project.store.read_projection(STREAM)
            assert projection is not None
            row, head = _lag(project.store)
            if row == head and len(projection.state) >= enough:
                break
            project.todos.add(GOAL, TITLE, todo_id=f"t{n}")
        else:
            raise AssertionError("the goal never reached a fresh snapshot of its size")
        for m in range(3):
            project.todos.add(GOAL, TITLE, todo_id=f"lag{m}")
        row, head = _lag(project.store)
        assert row < head  # the appends past the threshold wrote no projection
    return root


def test_appends_past_the_threshold_leave_the_projection_behind(big: Path) -> None:
    with Project.open(big) as project:
        row, head = _lag(project.store)
        assert head - row == 3
        before = project.store.read_projection(STREAM)
        assert before is not None
        # Snapshotted once the appends since number the state's size / k (k bytes each).
        every = len(before.state) // GOAL_LAG_BYTES_PER_EVENT
        for m in range(every):
            project.todos.add(GOAL, TITLE, todo_id=f"more{m}")
        row, head = _lag(project.store)
        assert row > before.head_seq  # caught up once, by a snapshot
        assert head - row < every
        assert project.store.verify(kernel_folder()).ok


def test_every_reader_sees_the_whole_goal(big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Project.open(big) as project:  # a new process's view: nothing cached
        store = project.store
        whole = _full_fold(store)
        todos = len(whole.todos)
        assert {f"lag{m}" for m in range(3)} <= set(whole.todos)

        state, head = load_stream(store, GOAL_CODEC, STREAM)
        assert (state, head) == (whole, store.head(STREAM))
        assert project.goals.show(GOAL) == whole
        assert project.goals.list() == [whole]
        [listed] = store.list_projections_of((GOAL_KIND,))[GOAL_KIND]
        assert listed.stream_head == head and len(listed.tail) == 3
        assert [g.state for g in project.status().goals] == [whole]
        assert [g.todos for g in api_status(store).goals] == [todos]

        # Notifications start from the stream's head, not the projection row's, and
        # reach an event the projection row does not hold yet.
        add_endpoint(store, "https://example.invalid/hook", ["gate_opened"])
        outbox, _ = load_outbox(store)
        [endpoint] = outbox.endpoints.values()
        assert endpoint.cursor(STREAM) == head
        gate = project.gates.open(GOAL, "Ship it?")
        row, head = _lag(store)
        assert row < head - 1  # the gate's event is in the tail
        posted: list[dict[str, object]] = []

        def poster(url: str, body: bytes, headers: dict[str, str]) -> Outcome:
            posted.append(json.loads(body))
            return Outcome(ok=True, status_code=200, error="")

        assert Deliverer(store, poster=poster).tick().sent == 1
        assert gate.id in json.dumps(posted)
        whole = _full_fold(store)

        report = store.verify(kernel_folder())
        assert report.ok, report.mismatches

    monkeypatch.chdir(big)
    monkeypatch.setenv("TURNKEEPER_DIR", str(big))
    monkeypatch.delenv("TURNKEEPER_DATABASE_URL", raising=False)
    runner = CliRunner()
    status = runner.invoke(app, ["status", "--json"])
    assert status.exit_code == 0, status.output
    assert [g["todos"] for g in json.loads(status.stdout)["goals"]] == [todos]
    shown = runner.invoke(app, ["goal", "show", GOAL, "--json"])
    assert shown.exit_code == 0, shown.output
    assert "lag2" in shown.stdout
