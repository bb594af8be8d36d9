"""The runner as a user has it: ``turnkeeper runner start`` in a project made by
``turnkeeper init``, a shell agent, ``turnkeeper run`` SIGKILLed under it.

What must hold: a killed control plane loses no turn — the next ``run`` reattaches,
the turn completes, its host ran once and each of its events is journaled once and in
order; a control plane killed twice in a row (once before it even recorded the host's
start) still completes the session; and a runner killed mid-turn takes its hosts with
it, the turn is lost on restore, and the session goes on to its goal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.usage.project import UserProject, wait_for

STEPS = 6
AGENT = """#!/bin/sh
# One turn: STEPS messages a second apart, then the todo's page and the result.
set -eu
echo "$TURNKEEPER_TURN_ID start $$" >> "$LEDGER"
i=1
while [ $i -le STEPS ]; do
  printf '{"kind": "message", "data": {"text": "step %s"}}\\n' $i
  echo "$TURNKEEPER_TURN_ID step $i" >> "$LEDGER"
  sleep 1
  i=$((i + 1))
done
echo "# $TURNKEEPER_TODO_ID" > "$TURNKEEPER_TODO_ID.md"
echo "$TURNKEEPER_TURN_ID end" >> "$LEDGER"
met="\\"criterion_id\\": \\"c1\\", \\"evidence_ids\\": [\\"ev-$TURNKEEPER_TURN_ID-0\\"]"
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s], "proposals": [%s]}}\\n' \\
  "{\\"key\\": \\"page\\", \\"command\\": \\"test -s $TURNKEEPER_TODO_ID.md\\"}" \\
  "{\\"kind\\": \\"satisfy_criterion\\", $met}"
""".replace("STEPS", str(STEPS))


class RunnerProject:
    def __init__(self, project: UserProject) -> None:
        self.project = project
        self.ledger = project.root.parent / "ledger.txt"
        agent = project.agent("agent.sh", AGENT)
        config = project.host_config(
            "agent", {"command": [str(agent)], "event_format": "jsonl", "pass_env": ["LEDGER"]}
        )
        self.goal = project.tk("goal", "add", "One page", "-c", "the page exists", "-q").stdout
        self.goal = self.goal.strip()
        project.tk("todo", "add", self.goal, "Write the page", "--requires-evidence", "page")
        created = project.tk_json(
            "session", "create", self.goal, "--host", "subprocess", "--host-config", config
        )
        self.session = str(created["session_id"])
        started = project.tk_json("runner", "start")
        self.runner_pid = int(started["pid"])

    @property
    def env(self) -> dict[str, str]:
        return {"LEDGER": str(self.ledger)}

    def lines(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []

    def steps_seen(self, n: int) -> bool:
        return sum(1 for line in self.lines() if " step " in line) >= n

    def run(self, *args: str, crash_at: str | None = None) -> Any:
        env = dict(self.env)
        if crash_at is not None:
            env["TURNKEEPER_CRASH_AT"] = crash_at
        return self.project.start("run", "--json", *args, env=env)

    def turns(self) -> list[dict[str, Any]]:
        rows = self.project.tk_json("turn", "list", self.session)
        return list(rows["turns"] if isinstance(rows, dict) else rows)

    def turn(self, turn_id: str) -> dict[str, Any]:
        shown = self.project.tk_json("turn", "show", turn_id)
        assert isinstance(shown, dict)
        return shown

    def starts(self) -> list[str]:
        return [line.split()[0] for line in self.lines() if line.split()[1] == "start"]

    def goal_status(self) -> str:
        return str(self.project.tk_json("goal", "show", self.goal)["state"]["goal"]["status"])

    def recovery_actions(self) -> list[dict[str, Any]]:
        state = self.project.tk_json("session", "show", self.session)
        report = state.get("latest_recovery_report") or {}
        return list(report.get("actions", []))


@pytest.fixture
def runner_project(user_project: UserProject) -> Iterator[RunnerProject]:
    made = RunnerProject(user_project)
    try:
        yield made
    finally:
        user_project.tk("runner", "stop", "--force", expect=None)
        with contextlib.suppress(ProcessLookupError):
            os.kill(made.runner_pid, signal.SIGKILL)  # our own daemon, by its pid


def _events_once_in_order(shown: dict[str, Any]) -> None:
    events = shown["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), events
    texts = [e["data"].get("text") for e in events if e["kind"] == "message"]
    assert texts == [f"step {i}" for i in range(1, STEPS + 1)], texts


def test_a_killed_control_plane_reattaches_and_the_same_turn_completes(
    runner_project: RunnerProject,
) -> None:
    first = runner_project.run()
    wait_for(lambda: runner_project.steps_seen(2), 60, "the agent two steps in")
    first.proc.send_signal(signal.SIGKILL)  # our own child, by its pid
    first.wait()
    second = runner_project.run()
    assert second.wait(timeout=180) == 0, second.output()
    assert runner_project.goal_status() == "closed"
    records = second.json_lines()
    reattached = [r for r in records if r.get("event") == "reattached"]
    assert len(reattached) == 1, second.output()
    # The agent sleeps a second per step: the turn ran STEPS seconds at least, most of
    # them before the reattach. Its duration counts from its durable start.
    completed = [r for r in records if r.get("record") == "turn" and r.get("phase") == "completed"]
    assert len(completed) == 1, second.output()
    assert completed[0]["elapsed_seconds"] >= STEPS, completed[0]
    turns = runner_project.turns()
    assert [t["outcome"] for t in turns] == ["completed"], turns  # not lost, no continuation
    turn_id = turns[0]["turn_id"]
    assert runner_project.starts() == [turn_id]  # the host ran once
    _events_once_in_order(runner_project.turn(turn_id))
    done = [a for a in runner_project.recovery_actions() if a["kind"] == "reattached"]
    assert done and done[0]["detail"].startswith("reattached at seq "), done


def test_the_wave_a_turn_the_journal_never_bound_then_a_second_kill(
    runner_project: RunnerProject,
) -> None:
    # Killed right after the runner started the host, before the session recorded it.
    first = runner_project.run(crash_at="host.spawned")
    assert first.wait(timeout=120) == -signal.SIGKILL, first.output()
    second = runner_project.run()
    wait_for(lambda: runner_project.steps_seen(3), 60, "the reattached turn running on")
    second.proc.send_signal(signal.SIGKILL)
    second.wait()
    third = runner_project.run()
    assert third.wait(timeout=180) == 0, third.output()
    assert runner_project.goal_status() == "closed"
    everything = first.output() + second.output() + third.output()
    assert "turn_binding_mismatch" not in everything
    turns = runner_project.turns()
    assert [t["outcome"] for t in turns] == ["completed"], turns
    assert runner_project.starts() == [turns[0]["turn_id"]]
    _events_once_in_order(runner_project.turn(turns[0]["turn_id"]))


def test_a_runner_killed_mid_turn_takes_its_hosts_and_the_session_goes_on(
    runner_project: RunnerProject,
) -> None:
    run = runner_project.run()
    wait_for(lambda: runner_project.steps_seen(2), 60, "the agent two steps in")
    host_pid = int(runner_project.lines()[0].split()[2])
    os.kill(runner_project.runner_pid, signal.SIGKILL)  # the daemon we started, by pid
    wait_for(lambda: not _alive(host_pid), 10, "the runner's host to die with it")
    assert run.wait(timeout=180) == 0, run.output()
    assert runner_project.goal_status() == "closed"
    turns = runner_project.turns()
    assert [t["outcome"] for t in turns][:1] == ["lost"], turns
    # A shell agent binds no host session to resume: the turn after the loss is its
    # retry (an agent CLI's would be a continuation resuming its session).
    assert [(t["kind"], t["attempt"], t["outcome"]) for t in turns[1:]] == [
        ("retry", 2, "completed")
    ], turns
    lost = [r for r in run.json_lines() if r.get("event") == "runner_lost"]
    assert lost, run.output()
    marked = [a for a in runner_project.recovery_actions() if a["kind"] == "turn_marked_lost"]
    assert marked and marked[0]["detail"] == "lost_on_restore", runner_project.recovery_actions()


def test_a_runner_dying_as_it_starts_the_host_spends_no_attempt(
    runner_project: RunnerProject,
) -> None:
    # The runner dies right after it started the host, before it answered: the turn
    # is lost (not failed: no attempt spent), and with no runner left `--runner auto`
    # runs the retry here.
    project = runner_project.project
    project.tk("runner", "stop")
    crash = {"TURNKEEPER_CRASH_AT": "runner.host_started"}
    started = project.tk("runner", "start", "--json", env=crash)
    runner_project.runner_pid = int(started.json()["pid"])
    run = runner_project.run()
    assert run.wait(timeout=180) == 0, run.output()
    _lost_then_retried_with_no_failure(runner_project)
    assert [r for r in run.json_lines() if r.get("event") == "runner_lost"], run.output()


def test_require_waits_out_a_runner_outage_without_starting_or_failing_turns(
    runner_project: RunnerProject,
) -> None:
    run = runner_project.run("--runner", "require", "--runner-wait", "120")
    wait_for(lambda: runner_project.steps_seen(2), 60, "the agent two steps in")
    os.kill(runner_project.runner_pid, signal.SIGKILL)  # the daemon we started, by pid
    wait_for(lambda: '"runner_wait"' in run.stdout(), 30, "run to say it waits for the runner")
    time.sleep(3)  # a few looks at the missing runner: none may start a turn
    turns = runner_project.turns()
    assert [t["outcome"] for t in turns] == ["lost"], turns
    assert len(runner_project.starts()) == 1  # no host ran here meanwhile
    started = runner_project.project.tk_json("runner", "start")
    runner_project.runner_pid = int(started["pid"])
    assert run.wait(timeout=180) == 0, run.output()
    _lost_then_retried_with_no_failure(runner_project)


def test_require_stops_a_session_after_the_runner_wait(runner_project: RunnerProject) -> None:
    run = runner_project.run("--runner", "require", "--runner-wait", "2")
    wait_for(lambda: runner_project.steps_seen(1), 60, "the agent started")
    os.kill(runner_project.runner_pid, signal.SIGKILL)  # the daemon we started, by pid
    # No runner answering blocks the session: run exits 13 (README, "Errors and exit codes").
    assert run.wait(timeout=120) == 13, run.output()
    summary = run.summary()
    assert summary["stops"] == {runner_project.session: "runner_unavailable"}, summary
    assert summary["outcomes"] == {runner_project.session: "blocked"}, summary
    assert "no runner answered for" in summary["reasons"][runner_project.session]
    shown = runner_project.project.tk_json("session", "show", runner_project.session)
    assert shown["status"] == "ready" and shown["in_flight"] is None, shown
    assert shown["counters"]["turns_failed"] == 0, shown["counters"]
    assert runner_project.goal_status() == "open"


def _lost_then_retried_with_no_failure(runner_project: RunnerProject) -> None:
    """The goal closed; the turn the outage took was lost (spending no attempt) and
    its retry completed."""
    assert runner_project.goal_status() == "closed"
    turns = runner_project.turns()
    assert [(t["kind"], t["outcome"]) for t in turns] == [
        ("start", "lost"),
        ("retry", "completed"),
    ], turns
    shown = runner_project.project.tk_json("session", "show", runner_project.session)
    assert shown["counters"]["turns_failed"] == 0, shown["counters"]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
