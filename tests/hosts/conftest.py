"""Fixtures for host tests: real processes, cleaned up by the marker of each turn.

Every turn id a test creates is unique and recorded; teardown ends the processes
carrying those markers (only processes this test started can carry them).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from turnkeeper.hosts import TurnKind, TurnRequest, process_tree

MakeRequest = Callable[..., TurnRequest]


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.02)


def gone(pid: int, start_time: int) -> bool:
    """True if that exact process no longer runs (gone, recycled, or a zombie)."""
    stat = process_tree.read_stat(pid)
    return stat is None or stat.start_time != start_time or stat.dead


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def make_request(workspace: Path) -> Iterator[MakeRequest]:
    used: list[str] = []

    def make(**overrides: Any) -> TurnRequest:
        fields: dict[str, Any] = {
            "turn_id": f"test-{uuid.uuid4()}",
            "session_id": "sess-1",
            "generation": 1,
            "attempt": 1,
            "kind": TurnKind.START,
            "instructions": "do the thing",
            "workspace": workspace,
            "timeout_seconds": 30.0,
        }
        fields.update(overrides)
        used.append(fields["turn_id"])
        return TurnRequest(**fields)

    yield make
    for turn_id in used:
        process_tree.kill_turn_processes(turn_id)
