"""A host killed before it saved any of its session leaves nothing to resume.

Claude Code flushes its transcript from a queue: SIGKILLed early, it has written no
session file. Resuming that session fails every attempt (``protocol``: the file is
missing) until the session is crashed, and with no completed turn there is no
snapshot to revert to. So when the failed turn's recovery is resolved and the bound
session's artifact is missing without any completed turn having recorded it, the
continuation is a retry in a fresh host session. The scripted host stands in for the
CLI: a real subprocess whose transcript is ``<state_dir>/sessions/<handle>.jsonl``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import RecoveryPolicy
from turnkeeper.runtime.control.controller import Controller, ControllerConfig, RunSummary
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store import open_store

PAUSE = "before-kill"


def _script() -> dict[str, Any]:
    first = [
        {"op": "write", "path": "a.txt", "content": "half\n"},
        {"op": "checkpoint", "name": PAUSE, "pause": True},
        {"op": "kill_self"},
    ]
    return {
        "turns": [{"match": {"attempt": 1, "kind": "start"}, "steps": first}],
        "default": {
            "steps": [{"op": "write", "path": "a.txt", "content": "done\n"}],
            "result": {"summary": "wrote a.txt", "todo_done": True},
        },
    }


def _run(tmp_path: Path, lose_transcript: bool) -> tuple[list[dict[str, Any]], Any, Path]:
    workspace, state_dir = tmp_path / "ws", tmp_path / "host-state"
    workspace.mkdir()
    store = open_store(tmp_path / "tk.db")
    try:
        goals = GoalService(store)
        goals.create(CreateGoal(goal_id="g", title="write a"))
        goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t-a", title="write A")))
        config = {"state_dir": str(state_dir), "script": _script()}
        session = SessionService(store).create("g", workspace, "scripted", host_config=config)
        policy = RecoveryPolicy(max_attempts=3, backoff_base_seconds=0, backoff_max_seconds=0)
        controller = Controller(store, ControllerConfig(policy=policy, max_turns=6))
        summary: list[RunSummary] = []
        runner = threading.Thread(
            target=lambda: summary.append(controller.run([session.session_id]))
        )
        runner.start()
        pause = workspace / ".turnkeeper-pause" / PAUSE
        deadline = time.monotonic() + 60
        while not pause.exists():
            assert time.monotonic() < deadline, "the host never reached its checkpoint"
            time.sleep(0.05)
        transcripts = list((state_dir / "sessions").glob("*.jsonl"))
        assert len(transcripts) == 1  # the host did save its session so far
        if lose_transcript:
            transcripts[0].unlink()  # as if it had been killed before its first flush
        pause.unlink()
        runner.join(120)
        assert not runner.is_alive() and summary
        records = list(store.read_stream(f"session:{session.session_id}"))
        return [r.model_dump() for r in records], summary[0], workspace
    finally:
        store.close()


def _turns(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    accepted = [json.loads(r["payload"]) for r in records if r["type"] == "turn.accepted"]
    return [a["envelope"] for a in accepted]


def test_a_lost_transcript_is_retried_in_a_fresh_host_session(tmp_path: Path) -> None:
    records, summary, workspace = _run(tmp_path, lose_transcript=True)
    assert summary.failed_turns == 1
    assert list(summary.stops.values()) == ["goal_terminal"]
    first, second = _turns(records)[:2]
    assert (first["kind"], first["attempt"]) == ("start", 1)
    assert second["kind"] == "retry" and second["resume_host_session"] is False
    assert second["attempt"] == 2 and second["recovers_turn_id"] == first["turn_id"]
    assert "saved nothing before it ended" in second["reconcile_note"]
    journaled = [json.loads(r["payload"]) for r in records if r["type"] == "turn.host_events"]
    handles = {h for batch in journaled if (h := batch.get("host_session_handle"))}
    assert len(handles) == 2  # the lost session's handle, then a new one
    assert (workspace / "a.txt").read_text() == "done\n"


def test_a_saved_transcript_is_still_resumed(tmp_path: Path) -> None:
    """The control: with the transcript in place the continuation resumes it."""
    records, summary, _ = _run(tmp_path, lose_transcript=False)
    assert list(summary.stops.values()) == ["goal_terminal"]
    second = _turns(records)[1]
    assert second["kind"] == "continuation" and second["resume_host_session"] is True
    assert "saved nothing" not in second["reconcile_note"]
