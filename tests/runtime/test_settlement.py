"""Settling a session (runtime/control/settlement.py) against real processes: what names the
session is ended and reported, what names another session is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from turnkeeper.hosts.procfs import read_stat
from turnkeeper.runtime.control.settlement import settle_session


def _started(session: str, turn: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TURNKEEPER_SESSION_ID": session, "TURNKEEPER_TURN_ID": turn}
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], env=env, start_new_session=True
    )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()  # ours, by its Popen
        proc.wait()


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    stat = read_stat(proc.pid)
    return stat is not None and not stat.dead


def test_every_process_of_the_session_is_ended_and_named(
    procs: list[subprocess.Popen[bytes]],
) -> None:
    mine = [_started("sess-a", "turn-a1"), _started("sess-a", "turn-a2")]
    other = _started("sess-b", "turn-b1")
    procs.extend([*mine, other])
    settlement = settle_session("sess-a", pause_s=0.1)
    assert settlement.settled, settlement
    assert sorted(settlement.ended) == sorted(
        [f"pid {mine[0].pid} of turn turn-a1", f"pid {mine[1].pid} of turn turn-a2"]
    )
    assert not any(_alive(p) for p in mine)
    assert _alive(other)  # another session's process is never touched


def test_a_session_with_nothing_left_settles_at_once(
    procs: list[subprocess.Popen[bytes]],
) -> None:
    procs.append(_started("sess-b", "turn-b1"))
    pauses: list[float] = []
    settlement = settle_session("sess-a", sleep=pauses.append)
    assert settlement.settled and settlement.ended == [] and pauses == []
