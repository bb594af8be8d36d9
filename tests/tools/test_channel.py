"""The per-turn tool channel: its folder, its capability, its journal, its pruning."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.tools.support import brief, claimed_goal, open_channel, turn
from turnkeeper.errors import DataLoss, FailedPrecondition, PermissionDenied
from turnkeeper.hosts.base import TOOLS_DIR_ENV, TOOLS_TOKEN_ENV
from turnkeeper.kernel.model import GoalState
from turnkeeper.tools import channel as channel_module
from turnkeeper.tools.calls import TOOL_NAMES, TodoDoneCall
from turnkeeper.tools.channel import (
    ChannelFile,
    ToolChannels,
    attach,
    parse_journal,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _done(seq: int) -> TodoDoneCall:
    return TodoDoneCall(seq=seq, at=datetime.now(UTC), summary=f"call {seq}")


def test_open_writes_the_turn_its_goal_brief_and_token_hash(tmp_path: Path) -> None:
    root = tmp_path / "state" / "turns"
    goal = claimed_goal()
    opened = open_channel(root, tmp_path, goal=goal)
    folder = opened.folder
    # The folder and every parent it made are private; its files too.
    assert [_mode(p) for p in (tmp_path / "state", root, folder)] == [0o700] * 3
    assert {p.name for p in folder.iterdir()} == {"channel.json", "goal.json", "calls.jsonl"}
    assert all(_mode(p) == 0o600 for p in folder.iterdir())
    written = ChannelFile.model_validate_json((folder / "channel.json").read_bytes())
    assert (written.turn, written.brief) == (opened.turn, brief())
    assert GoalState.model_validate_json((folder / "goal.json").read_bytes()) == goal
    server = opened.server
    assert server.command == [sys.executable, "-m", "turnkeeper.cli.main", "mcp"]
    assert server.names == list(TOOL_NAMES)
    assert server.env[TOOLS_DIR_ENV] == str(folder)
    token = server.env[TOOLS_TOKEN_ENV]
    # Only the token's hash is on disk.
    assert written.token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert token not in "".join(p.read_text() for p in folder.iterdir())
    channel = attach(server.env)
    assert channel.turn == opened.turn
    assert channel.goal() == goal
    assert channel.brief() == brief()


def test_each_open_has_a_new_token(tmp_path: Path) -> None:
    first = open_channel(tmp_path / "root", tmp_path)
    admitted = attach(first.server.env)  # a call admitted before the channel reopens
    again = open_channel(tmp_path / "root", tmp_path)
    with pytest.raises(PermissionDenied) as late, admitted.journal():
        pytest.fail("a call admitted under the old token must not land")
    assert late.value.reason == "not_this_turn"
    assert first.server.env[TOOLS_TOKEN_ENV] != again.server.env[TOOLS_TOKEN_ENV]
    with pytest.raises(PermissionDenied) as refused:
        attach(first.server.env)  # opened again: the old capability is gone
    assert refused.value.reason == "not_this_turn"
    attach(again.server.env)


@pytest.mark.parametrize("turn_id", ["../evil", "a/b", ".", "..", "has space", ""])
def test_a_turn_id_must_name_one_folder(tmp_path: Path, turn_id: str) -> None:
    with pytest.raises(ValidationError):
        turn(tmp_path, turn_id)


def test_attach_refuses_without_this_turns_capability(tmp_path: Path) -> None:
    opened = open_channel(tmp_path / "root", tmp_path)
    other = open_channel(tmp_path / "root", tmp_path, turn_id="turn-0002")
    env = opened.server.env
    cases = {
        "no_channel": [{}, {TOOLS_DIR_ENV: str(tmp_path / "nowhere"), TOOLS_TOKEN_ENV: "x"}],
        "not_this_turn": [
            {TOOLS_DIR_ENV: env[TOOLS_DIR_ENV]},
            {**env, TOOLS_TOKEN_ENV: "0" * 64},
            {**env, TOOLS_TOKEN_ENV: other.server.env[TOOLS_TOKEN_ENV]},
        ],
    }
    for reason, envs in cases.items():
        for bad in envs:
            with pytest.raises(PermissionDenied) as refused:
                attach(bad)
            assert refused.value.reason == reason, bad


def test_close_ends_the_channel_and_is_idempotent(tmp_path: Path) -> None:
    opened = open_channel(tmp_path / "root", tmp_path)
    with attach(opened.server.env).journal() as journal:
        journal.append(_done(0))
    opened.channels.close(opened.turn.turn_id)
    opened.channels.close(opened.turn.turn_id)
    opened.channels.close("turn-never-opened")  # a missing folder is fine
    assert (opened.folder / "closed").exists()
    with pytest.raises(PermissionDenied) as refused:
        attach(opened.server.env)
    assert refused.value.reason == "turn_ended"
    assert "has ended" in refused.value.message
    # What it journaled is still read, and a closed channel is not opened again.
    assert [c.seq for c in opened.channels.calls(opened.turn.turn_id)] == [0]
    with pytest.raises(FailedPrecondition) as closed:
        opened.channels.open(opened.turn, brief(), claimed_goal())
    assert closed.value.reason == "channel_closed"


def test_a_call_holding_the_journal_when_the_turn_closes_is_refused(tmp_path: Path) -> None:
    opened = open_channel(tmp_path / "root", tmp_path)
    channel = attach(opened.server.env)  # admitted before the turn ended
    opened.channels.close(opened.turn.turn_id)
    with pytest.raises(PermissionDenied) as refused, channel.journal():
        pytest.fail("the journal must not be held after close")
    assert refused.value.reason == "turn_ended"
    assert opened.calls_file.read_bytes() == b""


def test_calls_come_back_in_order(tmp_path: Path) -> None:
    opened = open_channel(tmp_path / "root", tmp_path)
    channel = attach(opened.server.env)
    for seq in range(3):
        with channel.journal() as journal:
            assert len(journal.calls) == seq
            journal.append(_done(seq))
    assert [c.seq for c in opened.channels.calls(opened.turn.turn_id)] == [0, 1, 2]
    assert opened.channels.calls("turn-never-opened") == []


def test_a_torn_last_line_is_skipped_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    opened = open_channel(tmp_path / "root", tmp_path)
    channel = attach(opened.server.env)
    with channel.journal() as journal:
        journal.append(_done(0))
    whole = opened.calls_file.read_bytes()
    # A crash in the middle of the second append: half a line, no newline.
    torn = _done(1).model_dump_json().encode()[:25]
    with opened.calls_file.open("ab") as f:
        f.write(torn)
    read = opened.channels.read_calls(opened.turn.turn_id)
    assert ([c.seq for c in read.calls], read.torn) == ([0], 1)
    with caplog.at_level(logging.WARNING, logger="turnkeeper.tools.channel"):
        assert len(opened.channels.calls(opened.turn.turn_id)) == 1
    assert "1 torn line" in caplog.text
    # The next append ends the torn line first: it cannot swallow the new one.
    with channel.journal() as journal:
        assert len(journal.calls) == 1
        journal.append(_done(1))
    assert opened.calls_file.read_bytes().startswith(whole + torn + b"\n")
    read = opened.channels.read_calls(opened.turn.turn_id)
    assert ([c.seq for c in read.calls], read.torn) == ([0, 1], 1)


def test_a_line_that_is_json_but_no_call_is_data_loss() -> None:
    good = _done(0).model_dump_json().encode()
    with pytest.raises(DataLoss) as lost:
        parse_journal(good + b'\n{"version": 1, "tool": "launch_rockets"}\n')
    assert lost.value.reason == "unreadable_tool_call"
    assert lost.value.details["line"] == 2
    future = good.replace(b'"version":1', b'"version":2')
    with pytest.raises(DataLoss):
        parse_journal(future + b"\n")


def test_open_keeps_the_newest_channels_and_only_deletes_closed_ones(tmp_path: Path) -> None:
    root = tmp_path / "root"
    channels = ToolChannels(root, keep=3)
    goal = claimed_goal()
    for n in range(6):
        turn_id = f"turn-{n}"
        channels.open(turn(tmp_path, turn_id), brief(turn_id), goal)
        # Distinct opening times, oldest first, whatever the file system's resolution.
        os.utime(root / turn_id / "channel.json", (1_000_000 + n, 1_000_000 + n))
        if n != 1:
            channels.close(turn_id)
    (root / "not-a-channel").mkdir()
    (root / "stray.txt").write_text("kept")
    channels.open(turn(tmp_path, "turn-6"), brief("turn-6"), goal)
    left = sorted(p.name for p in root.iterdir())
    # Newest three kept (turn-6, turn-5, turn-4); turn-1 is older but still open, so
    # kept; what is not a channel is never touched.
    assert left == ["not-a-channel", "stray.txt", "turn-1", "turn-4", "turn-5", "turn-6"]


def test_a_channel_pruned_the_moment_it_closes_still_gives_its_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With more sessions than channels kept, another controller's open prunes closed
    # channels: one may delete this channel between its close and the read of its
    # calls. The calls must still come back whole (they were lost, or run crashed on
    # a FileNotFoundError, with 256 sessions).
    opened = open_channel(tmp_path / "root", tmp_path)
    for seq in (0, 1):
        with attach(opened.server.env).journal() as journal:
            journal.append(_done(seq))
    real_write = channel_module.write_atomic

    def write_then_pruned(path: Path, data: bytes) -> None:
        real_write(path, data)
        if path.name == "closed":  # what another controller's prune does right then
            shutil.rmtree(path.parent)

    monkeypatch.setattr(channel_module, "write_atomic", write_then_pruned)
    calls = opened.channels.close_and_list(opened.turn.turn_id)
    assert [c.seq for c in calls] == [0, 1]
    assert not opened.folder.exists()
    # Read again once gone: no calls, and no error.
    assert opened.channels.close_and_list(opened.turn.turn_id) == []
    assert opened.channels.calls(opened.turn.turn_id) == []


def test_running_turns_beyond_keep_are_not_walked_at_every_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More sessions than channels kept: the channels of running turns cannot be pruned,
    # so a walk over them finds nothing to remove. It comes once per slack of new
    # channels (keep 20: 5), not at every open; once the turns end, the next walk
    # prunes back to the newest channels.
    root = tmp_path / "root"
    channels = ToolChannels(root, keep=20)
    goal = claimed_goal()
    walks: list[Path] = []
    real_iterdir = Path.iterdir

    def counted(self: Path) -> Iterator[Path]:
        if self == root:
            walks.append(self)
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", counted)
    opened = [f"turn-{n:02}" for n in range(40)]
    for turn_id in opened:
        channels.open(turn(tmp_path, turn_id), brief(turn_id), goal)
    assert len(walks) == 4  # at the 21st, 27th, 33rd and 39th open; not 20 times
    assert len(list(real_iterdir(root))) == 40  # every running turn's channel is kept
    for turn_id in opened:
        channels.close(turn_id)
    for n in range(40, 45):
        channels.open(turn(tmp_path, f"turn-{n}"), brief(f"turn-{n}"), goal)
    assert len(walks) == 5
    assert len(list(real_iterdir(root))) <= 20
