"""The work state from the CLI: criteria, no-follow-ups, lists, id prefixes, -q and
one --json shape for every write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Invoke, durable_digest, run_json, with_json
from turnkeeper.cli.work_lists import GateStatusChoice, TodoStatusChoice
from turnkeeper.errors import EXIT_CODES, ErrorCode
from turnkeeper.kernel.model import GateStatus, TodoStatus


def _error(tk: Invoke, *args: str, code: ErrorCode) -> dict[str, object]:
    result = tk(*with_json(args))
    assert result.exit_code == EXIT_CODES[code], result.output
    error = json.loads(result.stdout)["error"]
    assert error["code"] == code.value
    return dict(error)


def _quiet(tk: Invoke, *args: str, expect: int = 0) -> str:
    result = tk(*args)
    assert result.exit_code == expect, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return lines[0]


def _worked_goal(tk: Invoke) -> tuple[str, str, str]:
    """A goal whose only todo is done on passing evidence: (goal, todo, evidence)."""
    goal = _quiet(tk, "goal", "add", "Ship", "-c", "tests pass", "-q")
    todo = _quiet(tk, "todo", "add", goal, "Write it", "--requires-evidence", "tests", "-q")
    epoch = _quiet(tk, "todo", "claim", todo, "-q")
    assert epoch == "1"
    ev = _quiet(tk, "evidence", "record", goal, "--key", "tests", "-q", "--", "true")
    run_json(tk, "todo", "done", todo, "--epoch", epoch, "--evidence", ev)
    return goal, todo, ev


def test_quiet_prints_the_new_ids_that_the_next_commands_take(tk: Invoke) -> None:
    goal, todo, ev = _worked_goal(tk)
    assert goal.startswith("goal-") and todo.startswith("todo-") and ev.startswith("ev-")
    gate = _quiet(tk, "gate", "open", goal, "Approve", "-q")
    assert gate.startswith("gate-")
    mon = _quiet(tk, "monitor", "add", goal, "ci", "--cadence", "60", "-q")
    assert mon.startswith("mon-")
    shown = run_json(tk, "goal", "show", goal)
    assert gate in shown["state"]["gates"] and mon in shown["state"]["monitors"]


def test_every_write_answers_with_its_object_and_id(tk: Invoke) -> None:
    goal = run_json(tk, "goal", "add", "Ship", "-c", "tests pass")
    gid = goal["id"]
    assert goal["goal"]["id"] == gid and goal["goal_id"] == gid and goal["head_seq"] == 1
    todo = run_json(tk, "todo", "add", gid, "Write", "--requires-evidence", "tests")
    tid = todo["id"]
    assert todo["todo"]["title"] == "Write" and todo["todo_id"] == tid
    claim = run_json(tk, "todo", "claim", tid)
    assert claim["id"] == tid and claim["epoch"] == 1 and claim["todo"]["claim"]["epoch"] == 1
    renew = run_json(tk, "todo", "renew", tid, "--epoch", "1")
    assert renew["id"] == tid and renew["todo"]["status"] == "claimed"
    ev = run_json(tk, "evidence", "record", gid, "--key", "tests", "--", "true")
    assert ev["id"] == ev["evidence"]["id"] == ev["evidence_id"] and ev["passed"] is True
    done = run_json(tk, "todo", "done", tid, "--epoch", "1", "--evidence", ev["id"])
    assert done["id"] == tid and done["todo"]["status"] == "done"
    met = run_json(tk, "goal", "criterion-met", gid, "c1", "--evidence", ev["id"])
    assert met["id"] == "c1" and met["criterion"]["met"] is True
    gate = run_json(tk, "gate", "open", gid, "Approve", "--non-blocking")
    assert gate["id"] == gate["gate_id"] and gate["gate"]["blocking"] is False
    resolved = run_json(tk, "gate", "resolve", gate["id"], "--decision", "ok", "--by", "me")
    assert resolved["gate"]["status"] == "resolved"
    mon = run_json(tk, "monitor", "add", gid, "ci", "--cadence", "60")
    assert mon["id"] == mon["monitor_id"] and mon["monitor"]["target"] == "ci"
    read = run_json(tk, "monitor", "readback", mon["id"], "--value", '"green"')
    assert read["id"] == mon["id"] and read["monitor"]["last_readback"]["value"] == "green"
    for answer in (todo, claim, renew, ev, done, met, gate, resolved, mon, read):
        assert answer["goal_id"] == gid and answer["events"]


def test_criterion_met_and_no_follow_up_let_the_goal_close(tk: Invoke) -> None:
    goal, _, ev = _worked_goal(tk)
    audit = run_json(tk, "audit", goal)["counters"]
    # The todo finished with the criterion unmet: the frontier is exhausted.
    assert audit["acceptance_gaps"] == 1 and audit["replan_obligations"] == 1
    refused = _error(
        tk, "goal", "close", goal, "--summary", "x", code=ErrorCode.FAILED_PRECONDITION
    )
    assert refused["reason"] == "goal_not_terminal"
    met = run_json(tk, "goal", "criterion-met", goal, "c", "--evidence", ev[:6])
    assert met["criterion"]["evidence_ids"] == [ev]
    settled = run_json(tk, "goal", "no-follow-up", goal, "--summary", "nothing more")
    assert settled["discharged"] == ["obl-1"]
    assert settled["no_follow_up"]["reason"] == "acceptance_met"
    closed = run_json(tk, "goal", "close", goal[:8], "--summary", "shipped")
    assert closed["goal"]["status"] == "closed"
    assert run_json(tk, "audit", goal)["audit"]["terminal"] is True


def test_no_follow_up_discharges_only_what_it_names(tk: Invoke) -> None:
    run_json(tk, "goal", "add", "G", "--id", "g1", "-c", "a", "-c", "b")
    # Two todos with successors required, done: two successor_needed obligations.
    for tid in ("t1", "t2"):
        run_json(tk, "todo", "add", "g1", tid, "--id", tid, "--successor-required")
        run_json(tk, "todo", "claim", tid)
        run_json(tk, "todo", "done", tid, "--epoch", "1")
    state = run_json(tk, "goal", "show", "g1")["state"]
    open_ids = sorted(k for k, o in state["obligations"].items() if o["status"] == "open")
    assert len(open_ids) >= 2
    first = open_ids[0]
    answer = run_json(
        tk,
        "goal",
        "no-follow-up",
        "g1",
        "--summary",
        "s",
        "--reason",
        "out_of_scope",
        "--discharges",
        first,
    )
    assert answer["discharged"] == [first]
    again = _error(
        tk,
        "goal",
        "no-follow-up",
        "g1",
        "--summary",
        "s",
        "--discharges",
        first,
        code=ErrorCode.FAILED_PRECONDITION,
    )
    assert again["reason"] == "obligation_not_open"
    # Discharging the frontier_exhausted obligation of an earlier occurrence (fewer
    # todos) lets the current one be raised: the default discharges what is open now.
    now_open = [
        k
        for k, o in run_json(tk, "goal", "show", "g1")["state"]["obligations"].items()
        if o["status"] == "open"
    ]
    rest = run_json(tk, "goal", "no-follow-up", "g1", "--summary", "s")
    assert sorted(rest["discharged"]) == sorted(now_open) and set(open_ids[1:]) <= set(now_open)
    state = run_json(tk, "goal", "show", "g1")["state"]
    assert [k for k, o in state["obligations"].items() if o["status"] == "open"] == []


def test_no_follow_up_with_nothing_open_is_refused_and_writes_nothing(
    project: Path, tk: Invoke
) -> None:
    run_json(tk, "goal", "add", "G", "--id", "g1", "-c", "a")
    before = durable_digest(project)
    error = _error(
        tk, "goal", "no-follow-up", "g1", "--summary", "s", code=ErrorCode.FAILED_PRECONDITION
    )
    assert error["reason"] == "no_open_obligation"
    unknown = _error(
        tk, "goal", "criterion-met", "g1", "c9", "--evidence", "ev", code=ErrorCode.NOT_FOUND
    )
    assert unknown["reason"] == "criterion_not_found"
    bad_reason = tk("goal", "no-follow-up", "g1", "--summary", "s", "--reason", "bored")
    assert bad_reason.exit_code == 2  # a usage error: the choices are listed
    assert durable_digest(project) == before


def test_todo_list_and_show(tk: Invoke) -> None:
    run_json(tk, "goal", "add", "G", "--id", "g1", "-c", "a")
    run_json(tk, "todo", "add", "g1", "First", "--id", "t1", "--requires-evidence", "unit")
    run_json(tk, "todo", "add", "g1", "Second", "--id", "t2", "--depends-on", "t1")
    run_json(tk, "gate", "open", "g1", "Hold", "--scope", "t2")
    run_json(tk, "todo", "claim", "t1")
    listed = run_json(tk, "todo", "list", "g1")
    assert [t["id"] for t in listed["todos"]] == ["t1", "t2"]
    only_open = run_json(tk, "todo", "list", "g1", "--status", "open")
    assert [t["id"] for t in only_open["todos"]] == ["t2"]
    shown = run_json(tk, "todo", "show", "t2")
    assert shown["dependencies"] == [
        {"id": "t1", "title": "First", "status": "claimed", "met": False}
    ]
    assert [g["title"] for g in shown["blocking_gates"]] == ["Hold"]
    run_json(tk, "evidence", "record", "g1", "--key", "unit", "--", "true")
    first = run_json(tk, "todo", "show", "t1")
    assert first["claim"]["epoch"] == 1 and first["claim"]["live"] is True
    assert first["claim"]["owner"] == "tester" and first["claim"]["lease_expires_at"]
    assert first["required_evidence"][0] | {"latest": None} == {
        "key": "unit",
        "latest": None,
        "passed": True,
        "fresh": True,
    }
    human = tk("todo", "show", "t1")
    assert human.exit_code == 0 and "epoch 1" in human.stdout and "live" in human.stdout
    table = tk("todo", "list", "g1")
    assert table.exit_code == 0 and "First" in table.stdout and "Second" in table.stdout


def test_gate_and_evidence_lists(tk: Invoke) -> None:
    run_json(tk, "goal", "add", "G", "--id", "g1")
    gate = run_json(tk, "gate", "open", "g1", "Approve")["id"]
    run_json(tk, "gate", "open", "g1", "Later")
    run_json(tk, "gate", "resolve", gate, "--decision", "approved", "--by", "me")
    gates = run_json(tk, "gate", "list", "g1")["gates"]
    assert [g["status"] for g in gates] == ["resolved", "open"]
    assert [
        g["title"] for g in run_json(tk, "gate", "list", "g1", "--status", "open")["gates"]
    ] == ["Later"]
    failing = tk("evidence", "record", "g1", "--key", "unit", "--", "sh", "-c", "exit 3")
    assert failing.exit_code == 1
    assert "the command exited 3" in failing.stderr
    run_json(tk, "evidence", "record", "g1", "--key", "unit", "--", "true")
    run_json(tk, "evidence", "record", "g1", "--key", "lint", "--freshness", "1", "--", "true")
    rows = run_json(tk, "evidence", "list", "g1")["evidence"]
    assert [(r["evidence"]["key"], r["evidence"]["exit_code"], r["latest"]) for r in rows] == [
        ("unit", 3, False),
        ("unit", 0, True),
        ("lint", 0, True),
    ]
    assert all(r["evidence"]["command"] and r["evidence"]["revision"] is None for r in rows)
    assert run_json(tk, "evidence", "list", "g1", "--key", "lint")["evidence"][0]["fresh"] in (
        True,
        False,
    )
    human = tk("evidence", "list", "g1")
    assert human.exit_code == 0 and "unit" in human.stdout and "fresh" in human.stdout


def test_a_failed_command_is_recorded_and_exits_1_with_json_printed(tk: Invoke) -> None:
    run_json(tk, "goal", "add", "G", "--id", "g1")
    result = tk("evidence", "record", "g1", "--json", "--", "sh", "-c", "exit 5")
    assert result.exit_code == 1
    answer = json.loads(result.stdout)
    assert answer["evidence"]["exit_code"] == 5 and answer["passed"] is False
    assert f"recorded {answer['id']}; the command exited 5" in result.stderr
    quiet = tk("evidence", "record", "g1", "-q", "--", "false")
    assert quiet.exit_code == 1 and quiet.stdout.strip().startswith("ev-")
    assert len(run_json(tk, "evidence", "list", "g1")["evidence"]) == 2


def test_every_id_takes_a_unique_prefix(tk: Invoke) -> None:
    run_json(tk, "goal", "add", "G", "--id", "goal-one", "-c", "a")
    run_json(tk, "todo", "add", "goal-o", "Work", "--id", "todo-alpha")
    run_json(tk, "todo", "add", "goal-o", "More", "--id", "todo-beta", "--depends-on", "todo-a")
    assert run_json(tk, "todo", "show", "todo-b")["dependencies"][0]["id"] == "todo-alpha"
    gate = run_json(tk, "gate", "open", "goal-o", "Hold", "--scope", "todo-b")
    assert gate["gate"]["scope"] == ["todo-beta"]
    run_json(tk, "gate", "resolve", gate["id"][:7], "--decision", "ok", "--by", "me")
    mon = run_json(tk, "monitor", "add", "goal-o", "ci", "--cadence", "60")["id"]
    run_json(tk, "monitor", "readback", mon[:6], "--value", "1")
    assert run_json(tk, "todo", "claim", "todo-al")["id"] == "todo-alpha"
    ev = run_json(tk, "evidence", "record", "goal-o", "--", "true")["id"]
    run_json(tk, "todo", "done", "todo-al", "--epoch", "1", "--evidence", ev[:5])
    assert run_json(tk, "goal", "show", "goal-o")["id"] == "goal-one"
    assert run_json(tk, "todo", "list", "goal-o")["goal_id"] == "goal-one"
    assert run_json(tk, "gate", "list", "goal-o")["goal_id"] == "goal-one"
    assert run_json(tk, "evidence", "list", "goal-o")["goal_id"] == "goal-one"
    assert run_json(tk, "audit", "goal-o")["goal_id"] == "goal-one"
    note = json.dumps({"kind": "note", "author": "me", "text": "hi"})
    assert run_json(tk, "propose", "goal-o", "--proposal", note)["events"]


def test_an_ambiguous_prefix_names_its_candidates_and_writes_nothing(
    project: Path, tk: Invoke
) -> None:
    run_json(tk, "goal", "add", "G", "--id", "g1")
    for n in range(12):
        run_json(tk, "todo", "add", "g1", f"t{n}", "--id", f"todo-{n:02d}")
    before = durable_digest(project)
    error = _error(tk, "todo", "claim", "todo-", code=ErrorCode.INVALID_ARGUMENT)
    assert error["reason"] == "ambiguous_id"
    details = error["details"]
    assert isinstance(details, dict)
    assert details["candidates"] == [f"todo-{n:02d}" for n in range(10)]
    assert details["matches"] == 12
    _error(tk, "todo", "show", "todo-1", code=ErrorCode.INVALID_ARGUMENT)
    missing = _error(tk, "todo", "show", "todo-9", code=ErrorCode.NOT_FOUND)
    assert missing["reason"] == "todo_not_found"
    assert durable_digest(project) == before


def test_json_and_quiet_together_are_refused(project: Path, tk: Invoke) -> None:
    before = durable_digest(project)
    error = _error(tk, "goal", "add", "G", "-q", code=ErrorCode.INVALID_ARGUMENT)
    assert error["reason"] == "conflicting_options"
    assert durable_digest(project) == before


def test_supersede_quiet_prints_the_successor(tk: Invoke) -> None:
    run_json(tk, "goal", "add", "G", "--id", "g1")
    run_json(tk, "todo", "add", "g1", "Old", "--id", "t1")
    successor = _quiet(
        tk, "todo", "supersede", "t1", "--reason", "split", "--successor", "New", "-q"
    )
    shown = run_json(tk, "todo", "show", "t1")
    assert [s["id"] for s in shown["successors"]] == [successor]
    assert run_json(tk, "todo", "show", successor)["successor_of"]["id"] == "t1"


def test_a_blocked_todo_is_held_back_and_unblocked_in_its_place(tk: Invoke) -> None:
    run_json(tk, "goal", "add", "G", "--id", "g1")
    for n in (1, 2):
        run_json(tk, "todo", "add", "g1", f"Todo {n}", "--id", f"t{n}")
    blocked = run_json(tk, "todo", "block", "t1", "--reason", "waits on the keys")["todo"]
    assert blocked["status"] == "blocked" and blocked["blocked_reason"] == "waits on the keys"
    again = _error(tk, "todo", "block", "t1", "--reason", "x", code=ErrorCode.FAILED_PRECONDITION)
    assert again["reason"] == "todo_blocked"
    claimed = _error(tk, "todo", "claim", "t1", code=ErrorCode.FAILED_PRECONDITION)
    assert claimed["reason"] == "todo_blocked"
    assert run_json(tk, "todo", "unblock", "t1")["todo"]["status"] == "open"
    run_json(tk, "todo", "claim", "t1")
    assert run_json(tk, "todo", "show", "t1")["todo"]["status"] == "claimed"
    # A claimed todo is blocked by its holder only, under the claim's epoch.
    held = _error(tk, "todo", "block", "t1", "--reason", "x", code=ErrorCode.FAILED_PRECONDITION)
    assert held["reason"] == "fence_required"
    mine = run_json(tk, "todo", "block", "t1", "--reason", "waits again", "--epoch", "1")
    assert mine["todo"]["status"] == "blocked" and mine["todo"]["claim"] is None


@pytest.mark.parametrize(
    "command",
    [
        ("goal", "add"),
        ("goal", "show"),
        ("goal", "list"),
        ("goal", "close"),
        ("goal", "criterion-met"),
        ("goal", "no-follow-up"),
        ("todo", "add"),
        ("todo", "claim"),
        ("todo", "renew"),
        ("todo", "release"),
        ("todo", "done"),
        ("todo", "supersede"),
        ("todo", "block"),
        ("todo", "unblock"),
        ("todo", "list"),
        ("todo", "show"),
        ("gate", "open"),
        ("gate", "resolve"),
        ("gate", "list"),
        ("monitor", "add"),
        ("monitor", "readback"),
        ("evidence", "record"),
        ("evidence", "list"),
    ],
)
def test_every_command_has_a_purpose_and_an_example(tk: Invoke, command: tuple[str, str]) -> None:
    result = tk(*command, "--help")
    assert result.exit_code == 0, result.output
    assert "Example:" in result.stdout
    example = result.stdout.split("Example:", 1)[1]
    assert f"turnkeeper {command[0]} {command[1]}" in " ".join(example.split())


def test_the_cli_spells_the_kernels_statuses() -> None:
    assert [s.value for s in TodoStatusChoice] == [s.value for s in TodoStatus]
    assert [s.value for s in GateStatusChoice] == [s.value for s in GateStatus]
