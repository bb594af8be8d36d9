"""What ``run`` reports of an agent's struggle: its error events and the refusals of its
results, one record each (runtime/turn/run_progress.py), on a hand-moved clock."""

from __future__ import annotations

from tests.kernel_session.helpers import envelope, new_session, spec
from turnkeeper.host_reports import HostEvent
from turnkeeper.kernel.session import ProposalDecision
from turnkeeper.runtime.turn.run_progress import (
    MAX_MESSAGE_RECORDS_PER_TURN,
    RunMonitor,
    RunRecord,
    refused_part,
)


def _monitor() -> tuple[RunMonitor, list[RunRecord], list[float]]:
    records: list[RunRecord] = []
    clock = [100.0]
    return RunMonitor(records.append, 60.0, clock=lambda: clock[0]), records, clock


def test_error_events_fatal_or_not_are_reported_as_they_come() -> None:
    monitor, records, clock = _monitor()
    h = new_session()
    env = envelope(h, "turn-a", spec(todo_id="t-a"))
    monitor.host_started(h.s.session_id, env)
    clock[0] += 3
    retry = {"message": "codex: Reconnecting... 1/5 (stream disconnected)", "fatal": False}
    monitor.host_event(h.s.session_id, "turn-a", HostEvent(seq=1, kind="error", data=retry))
    fatal = {"message": "codex turn failed: quota exceeded", "fatal": True}
    monitor.host_event(h.s.session_id, "turn-a", HostEvent(seq=2, kind="error", data=fatal))

    errors = [r for r in records if r.record == "agent_error"]
    assert [r.text for r in errors] == [
        "t-a: agent error: codex: Reconnecting... 1/5 (stream disconnected)",
        "t-a: agent fatal error: codex turn failed: quota exceeded",
    ]
    first = errors[0].as_json()
    assert first["record"] == "agent_error" and first["fatal"] is False
    assert first["turn"] == "turn-a" and first["todo"] == "t-a"
    assert first["message"] == retry["message"] and first["elapsed_seconds"] == 3.0
    # An error is output: the host is not silent.
    (running,) = monitor.running()
    assert running.events == 2 and running.last_output == 103.0


def test_a_host_that_errs_in_a_loop_floods_no_screen() -> None:
    monitor, records, _ = _monitor()
    h = new_session()
    monitor.host_started(h.s.session_id, envelope(h, "turn-a"))
    for n in range(MAX_MESSAGE_RECORDS_PER_TURN + 50):
        data = {"message": f"retry {n}"}
        monitor.host_event(h.s.session_id, "turn-a", HostEvent(seq=n + 1, kind="error", data=data))
    assert len([r for r in records if r.record == "agent_error"]) == MAX_MESSAGE_RECORDS_PER_TURN


def test_each_refused_proposal_is_a_record_with_its_reason() -> None:
    monitor, records, _ = _monitor()
    h = new_session()
    env = envelope(h, "turn-a", spec(todo_id="t-a"))
    refused = [
        ProposalDecision(
            proposal_id="turn-a:complete",
            reason="evidence_failed",
            message="evidence 'ev-turn-a-0' for 'tests' cannot be used: evidence_failed",
        ),
        ProposalDecision(proposal_id="turn-a:proposal:1", reason="unknown_criterion"),
    ]
    monitor.refused(h.s.session_id, env, refused)

    assert [r.text for r in records] == [
        "t-a: complete refused: evidence_failed "
        "(evidence 'ev-turn-a-0' for 'tests' cannot be used)",
        "t-a: proposal 1 refused: unknown_criterion",
    ]
    first = records[0].as_json()
    assert first["record"] == "refusal" and first["session"] == h.s.session_id
    assert (first["part"], first["reason"], first["proposal"]) == (
        "complete",
        "evidence_failed",
        "turn-a:complete",
    )
    assert refused_part("turn-a", "turn-a:evidence:0") == "evidence 0"
    assert refused_part("turn-a", "turn-a:result") == "result"
