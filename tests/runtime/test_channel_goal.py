"""A large goal reaches each turn's tool channel as a shared snapshot and the events
after it: every channel's tools read the goal exactly as it stood when the turn
started, a snapshot is written again only once enough events have come, a snapshot
another controller replaced is written again, and a small goal (or a filesystem
without hard links) gets the goal whole, as before."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.inprocess_host import InProcessHost
from tests.tools.support import brief
from turnkeeper.errors import DataLoss
from turnkeeper.hosts import TurnRequest
from turnkeeper.hosts.base import TOOLS_DIR_ENV
from turnkeeper.kernel import GoalState, fold_goal
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import ProgressPolicy
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.services.goals import GOAL_CODEC, GoalService, goal_stream
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store import SqlEventStore
from turnkeeper.tools.channel import (
    GOAL_EVENTS_FILE,
    GOAL_FILE,
    SNAPSHOT_BYTES_PER_EVENT,
    SNAPSHOTS_DIR,
    WHOLE_BELOW_BYTES,
    ChannelTurn,
    GoalHistory,
    ToolChannels,
    attach,
)

GOAL = "g"
# A title long enough that a few hundred todos make a goal past WHOLE_BELOW_BYTES.
TITLE = "Write and test one more part of the parser, " * 6


def _goal(goals: GoalService, todos: int) -> None:
    goals.create(CreateGoal(goal_id=GOAL, title="Ship the parser"))
    _add(goals, todos, "t")


@pytest.fixture
def goals(store: SqlEventStore) -> GoalService:
    """A goal of 300 todos: past WHOLE_BELOW_BYTES."""
    service = GoalService(store)
    _goal(service, 300)
    return service


def _add(goals: GoalService, n: int, prefix: str) -> None:
    for i in range(n):  # bounded: n todos
        goals.submit(GOAL, AddTodo(todo=TodoSpec(todo_id=f"{prefix}{i}", title=TITLE)))


class Opened:
    """An opened channel: its folder, and the environment its tool server gets."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.folder = Path(env[TOOLS_DIR_ENV])

    def goal(self) -> GoalState:
        """The goal as the channel's tools read it."""
        return attach(self.env).goal()


def _open(channels: ToolChannels, goals: GoalService, turn_id: str, workspace: Path) -> Opened:
    """Open a channel as the turn's agent side does (runtime/turn/agent_side.py)."""
    state, head = goals.load_at_head(GOAL)
    history = GoalHistory(head, lambda after: goals.event_texts(GOAL, after, head))
    turn = ChannelTurn(
        turn_id=turn_id,
        session_id="s",
        goal_id=GOAL,
        claim_owner="session:s",
        workspace=workspace,
    )
    return Opened(channels.open(turn, brief(turn_id), state, history).env)


def _same(a: GoalState, b: GoalState) -> bool:
    return a.model_dump_json() == b.model_dump_json()


def _snapshots(root: Path) -> list[Path]:
    return sorted((root / SNAPSHOTS_DIR).glob("*/*.json"))


def test_each_channel_links_the_shared_snapshot_and_folds_the_events_after_it(
    goals: GoalService, tmp_path: Path
) -> None:
    root = tmp_path / "turns"
    channels = ToolChannels(root)

    first = _open(channels, goals, "turn-1", tmp_path)
    at_first = goals.load(GOAL)
    (snapshot,) = _snapshots(root)
    assert snapshot.stat().st_size >= WHOLE_BELOW_BYTES
    assert os.path.samefile(first.folder / GOAL_FILE, snapshot)
    assert not (first.folder / GOAL_EVENTS_FILE).exists()
    assert _same(first.goal(), at_first)

    _add(goals, 3, "late")
    second = _open(channels, goals, "turn-2", tmp_path)
    at_second = goals.load(GOAL)
    # The same snapshot, and the three todos added since as events to fold.
    assert os.path.samefile(second.folder / GOAL_FILE, snapshot)
    assert (second.folder / GOAL_EVENTS_FILE).read_bytes().count(b'"todo_added"') == 3
    assert _same(second.goal(), at_second)
    assert {f"late{i}" for i in range(3)} <= set(second.goal().todos)
    assert not {f"late{i}" for i in range(3)} & set(first.goal().todos)

    # Enough events for the snapshot's length: the next channel gets a new one.
    due = snapshot.stat().st_size // SNAPSHOT_BYTES_PER_EVENT
    _add(goals, due, "more")
    third = _open(channels, goals, "turn-3", tmp_path)
    (newer,) = _snapshots(root)  # the older one removed from the shared folder ...
    assert newer != snapshot
    assert os.path.samefile(third.folder / GOAL_FILE, newer)
    assert not (third.folder / GOAL_EVENTS_FILE).exists()
    assert _same(third.goal(), goals.load(GOAL))
    # ... while the channels linked to it still read the goal as their turns began.
    assert _same(first.goal(), at_first)
    assert _same(second.goal(), at_second)


def test_a_snapshot_another_controller_replaced_is_written_again(
    goals: GoalService, tmp_path: Path
) -> None:
    root = tmp_path / "turns"
    channels = ToolChannels(root)
    _open(channels, goals, "turn-1", tmp_path)
    (snapshot,) = _snapshots(root)
    snapshot.unlink()  # as another controller's newer snapshot removes it
    _add(goals, 1, "late")
    second = _open(channels, goals, "turn-2", tmp_path)
    (again,) = _snapshots(root)
    assert os.path.samefile(second.folder / GOAL_FILE, again)
    assert not (second.folder / GOAL_EVENTS_FILE).exists()
    assert _same(second.goal(), goals.load(GOAL))


def test_sessions_threads_opening_channels_at_once_each_read_their_turns_goal(
    goals: GoalService, store: SqlEventStore, tmp_path: Path
) -> None:
    """The controller's session threads share one ToolChannels: opens racing over one
    goal's snapshot (one thread replacing the snapshot another is about to link) each
    still give their tools the goal at their own head."""
    channels = ToolChannels(tmp_path / "turns")
    opened: list[tuple[int, Opened]] = []

    def work(thread: int) -> None:
        for n in range(6):  # bounded: six turns a thread
            _add(goals, 1, f"th{thread}-{n}-")
            head = goals.load_at_head(GOAL)[1]
            opened.append((head, _open(channels, goals, f"turn-{thread}-{n}", tmp_path)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(opened) == 24
    records = store.read_stream(goal_stream(GOAL))
    for head, channel in opened:
        read = channel.goal()
        # Every event of this goal adds one todo (the goal's creation aside): the goal
        # the tools read is the one at seq len(todos) + 1, at the turn's head or later
        # (another thread may have written between the head and the open).
        seq = len(read.todos) + 1
        assert seq >= head
        folded = fold_goal(GOAL_CODEC.decode_event(r) for r in records[:seq])
        assert _same(read, folded)


def test_a_small_goal_is_written_whole(store: SqlEventStore, tmp_path: Path) -> None:
    goals = GoalService(store)
    _goal(goals, 3)
    root = tmp_path / "turns"
    opened = _open(ToolChannels(root), goals, "turn-1", tmp_path)
    assert not (root / SNAPSHOTS_DIR).exists()
    assert (opened.folder / GOAL_FILE).stat().st_nlink == 1
    assert not (opened.folder / GOAL_EVENTS_FILE).exists()
    assert _same(opened.goal(), goals.load(GOAL))


def test_without_hard_links_the_goal_is_written_whole(
    goals: GoalService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    def refused(*_: object, **__: object) -> None:
        raise PermissionError("no hard links on this filesystem")

    monkeypatch.setattr(os, "link", refused)
    opened = _open(ToolChannels(tmp_path / "turns"), goals, "turn-1", tmp_path)
    assert (opened.folder / GOAL_FILE).stat().st_nlink == 1
    assert _same(opened.goal(), goals.load(GOAL))


def test_events_that_do_not_decode_are_data_loss(goals: GoalService, tmp_path: Path) -> None:
    channels = ToolChannels(tmp_path / "turns")
    _open(channels, goals, "turn-1", tmp_path)
    _add(goals, 1, "late")
    opened = _open(channels, goals, "turn-2", tmp_path)
    (opened.folder / GOAL_EVENTS_FILE).write_text('[{"type": "todo_added"}]')
    with pytest.raises(DataLoss) as caught:
        opened.goal()
    assert caught.value.reason == "unreadable_channel_goal"


def test_a_turn_id_never_names_the_snapshots_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="leading"):
        ChannelTurn(
            turn_id=SNAPSHOTS_DIR,
            session_id="s",
            goal_id=GOAL,
            claim_owner="session:s",
            workspace=tmp_path,
        )


def test_a_running_turns_tools_read_the_large_goal_as_the_turn_began(
    store: SqlEventStore, goals: GoalService, tmp_path: Path
) -> None:
    """Through the controller: each turn's agent reads, through its channel, the goal
    the store held when its turn started, todo for todo."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    seen: list[tuple[int, set[str]]] = []

    def work(request: TurnRequest) -> dict[str, Any]:
        assert request.tools is not None
        read = attach(request.tools.env).goal()
        seen.append((len(read.todos), set(read.todos)))
        # Every turn adds a todo behind the channel's back, as another writer would.
        _add(goals, 1, f"w{len(seen)}-")
        return {"summary": "read the goal"}

    host = InProcessHost(result_for=work)
    session = SessionService(store).create(GOAL, workspace, "inprocess")
    config = ControllerConfig(
        max_turns=6,
        host_loader=host.loader,
        tools_dir=tmp_path / "turns",
        progress=ProgressPolicy(max_turns_without_progress=1_000),
    )
    summary = Controller(store, config).run([session.session_id])
    assert summary.failed_turns == 0
    assert [n for n, _ in seen] == list(range(300, 306))
    for k, (_, ids) in enumerate(seen[1:], start=1):
        assert f"w{k}-0" in ids  # the todo the turn before added, folded in
    assert len(_snapshots(tmp_path / "turns")) == 1
