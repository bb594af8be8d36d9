"""The Python API, ``turnkeeper.Project``, on a real SQLite file in a real git repository.

One test per group of methods (goals, todos, gates, evidence, sessions, run and
recover, status), each on a project a user made with ``turnkeeper init``; what the
API writes, the ``turnkeeper`` command reads back (and the other way round), since
both go through the same services and the same store.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.usage.project import UserProject
from turnkeeper import Project
from turnkeeper.errors import FailedPrecondition, InvalidArgument, NotFound
from turnkeeper.hosts import TurnRequest
from turnkeeper.hosts.base import Emit
from turnkeeper.hosts.inprocess import InProcessHost
from turnkeeper.kernel.model import GateStatus, GoalStatus, NoFollowUpReason, TodoStatus


def _note_writer(request: TurnRequest, emit: Emit) -> dict[str, Any]:
    """A turn that writes its todo's note and proves it with a check turnkeeper re-runs."""
    note = request.workspace / f"{request.todo_id}.md"
    note.write_text(f"{request.todo_title}\n")
    emit("message", {"text": f"wrote {note.name}"})
    return {
        "summary": f"wrote {note.name}",
        "evidence": [{"key": "note", "command": f"test -s {note.name}"}],
        "todo_done": True,
    }


def _failing_turn(request: TurnRequest, emit: Emit) -> dict[str, Any]:
    raise RuntimeError(f"the agent broke on {request.todo_id}")


def test_import_turnkeeper_stays_cheap() -> None:
    """``import turnkeeper`` (which the command does first) loads neither the store nor
    the kernel: ``Project`` is loaded on first use."""
    code = (
        "import sys, turnkeeper; "
        "heavy = [m for m in sys.modules if m.startswith(('sqlalchemy', 'pydantic', "
        "'turnkeeper.'))]; "
        "assert heavy == [], heavy; "
        "from turnkeeper import Project; "
        "assert Project.__module__ == 'turnkeeper.project_api.project'"
    )
    import sys

    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_goals_add_show_list_criterion_no_follow_up_close(user_project: UserProject) -> None:
    with Project.open(user_project.root) as project:
        state = project.goals.add("Ship it", criteria=["it ships"], objective="users get it")
        gid = state.goal.id
        assert [c.id for c in state.goal.criteria] == ["c1"]
        assert project.goals.show(gid).goal.objective == "users get it"
        assert [s.goal.id for s in project.goals.list()] == [gid]

        # Closing before the audit passes is refused, naming what blocks it.
        with pytest.raises(FailedPrecondition):
            project.goals.close(gid, "too early")
        assert not project.audit(gid).terminal

        # Its one todo done while the criterion is unmet: a replan obligation is raised.
        project.todos.add(gid, "Package it", todo_id="pkg")
        claim = project.todos.claim("pkg", owner="me")
        done = project.todos.done("pkg", epoch=claim.epoch, owner="me")
        assert done.status is TodoStatus.DONE
        obligations = [o.id for o in project.goals.show(gid).open_obligations()]
        assert len(obligations) == 1
        with pytest.raises(InvalidArgument):
            project.goals.no_follow_up(gid, "nothing named", [])
        noted = project.goals.no_follow_up(gid, "the package is all there is", obligations)
        assert noted.no_follow_ups[-1].reason is NoFollowUpReason.NO_ACTION_NEEDED
        assert noted.open_obligations() == []

        check = project.evidence.record(gid, ["true"], key="ships")
        met = project.goals.criterion_met(gid, "c1", [check.id])
        assert met.goal.criteria[0].met
        assert project.audit(gid).terminal
        closed = project.goals.close(gid, "shipped")
        assert closed.goal.status is GoalStatus.CLOSED
        assert [r.type for r in project.goals.history(gid)][-1] == "goal_closed"

        with pytest.raises(NotFound):
            project.goals.show("no-such-goal")
    # What the API wrote, the command reads.
    shown = user_project.tk_json("goal", "show", gid)
    assert shown["state"]["goal"]["status"] == "closed"


def test_todos_add_claim_done_list_across_the_command_line(user_project: UserProject) -> None:
    user_project.tk("goal", "add", "Write notes", "--id", "notes")
    with Project.open(user_project.root) as project:
        todo = project.todos.add("notes", "First", todo_id="t1", requires_evidence=["tests"])
        project.todos.add("notes", "Second", todo_id="t2", depends_on=["t1"])
        assert [t.id for t in project.todos.list("notes")] == ["t1", "t2"]
        assert todo.status is TodoStatus.OPEN

        claim = project.todos.claim("t1", owner="me", lease_seconds=60)
        assert claim.owner == "me"
        assert claim.epoch >= 1
        # Its required evidence is missing: refused, nothing written.
        with pytest.raises(FailedPrecondition):
            project.todos.done("t1", epoch=claim.epoch, owner="me")
        with pytest.raises(InvalidArgument):
            project.todos.claim("t2", lease_seconds=0)
        evidence = project.evidence.record("notes", ["true"], key="tests")
    # The claim taken in Python is finished from the shell, under its epoch.
    user_project.tk(
        "todo",
        "done",
        "t1",
        "--epoch",
        str(claim.epoch),
        "--owner",
        "me",
        "--evidence",
        evidence.id,
    )
    with Project.open(user_project.root) as project:
        assert project.todos.show("t1").status is TodoStatus.DONE


def test_gates_open_resolve_list(user_project: UserProject) -> None:
    with Project.open(user_project.root) as project:
        gid = project.goals.add("Release").goal.id
        gate = project.gates.open(gid, "Ship on Friday?")
        assert gate.status is GateStatus.OPEN
        assert project.audit(gid).unresolved_blocking_gates == 1
        resolved = project.gates.resolve(gate.id, "approved", by="lead", payload={"day": "fri"})
        assert resolved.resolution is not None
        assert resolved.resolution.decision == "approved"
        assert [g.id for g in project.gates.list(gid)] == [gate.id]
        assert project.audit(gid).unresolved_blocking_gates == 0
        with pytest.raises(NotFound):
            project.gates.resolve("gate-unknown", "approved", by="lead")


def test_evidence_record_list_binds_revision(user_project: UserProject) -> None:
    head = user_project.git("rev-parse", "HEAD").strip()
    with Project.open(user_project.root) as project:
        gid = project.goals.add("Check").goal.id
        passed = project.evidence.record(gid, ["sh", "-c", "test -f README.md"], key="readme")
        failed = project.evidence.record(gid, ["false"])
        assert passed.passed
        assert passed.revision == head
        assert not failed.passed
        assert failed.key == "false"  # the command's text when no key is given
        assert [e.id for e in project.evidence.list(gid)] == [passed.id, failed.id]
        with pytest.raises(InvalidArgument):
            project.evidence.record(gid, "true")  # a string is not an argv
        with pytest.raises(InvalidArgument):
            project.evidence.record(gid, ["/no/such/command"])
        assert len(project.evidence.list(gid)) == 2  # the refusals wrote nothing


def test_sessions_run_stop_resume_crash_revert_status(user_project: UserProject) -> None:
    host = InProcessHost(_note_writer)
    with Project.open(user_project.root) as project:
        gid = project.goals.add("Notes").goal.id
        project.todos.add(gid, "First note", todo_id="n1", requires_evidence=["note"])
        project.todos.add(gid, "Second note", todo_id="n2", requires_evidence=["note"])
        with pytest.raises(NotFound):
            project.sessions.create(gid, host="no-such-host")
        with pytest.raises(FailedPrecondition):
            project.sessions.create(gid, host=host, workspace=user_project.root.parent)
        session = project.sessions.create(gid, host=host)
        sid = session.session_id
        assert [s.session_id for s in project.sessions.list()] == [sid]
        assert project.sessions.show(sid[:8]).session_id == sid

        first = project.run(max_turns=1)
        assert first.turns == 1
        assert first.stops[sid] == "budget"
        assert (user_project.root / "n1.md").exists()

        stopped = project.sessions.stop(sid, reason="lunch")
        assert stopped.state.status == "suspended"
        assert project.run().stops == {}  # a stopped session is left alone
        resumed = project.sessions.resume(sid)
        assert resumed.state.status == "ready"

        crashed = project.sessions.crash(sid)
        assert crashed.state.status == "crashed"
        # The agent's later edit is undone by the revert to the last snapshot.
        (user_project.root / "n1.md").write_text("changed after the snapshot\n")
        reverted = project.sessions.revert(sid, request_id="revert-1")
        assert reverted.result == "reverted"
        assert (user_project.root / "n1.md").read_text() == "First note\n"
        project.sessions.resume(sid)

        status = project.status()
        assert [g.state.goal.id for g in status.goals] == [gid]
        assert [s.session_id for s in status.sessions] == [sid]
    # A later process hands the in-process host over again and the goal finishes.
    with Project.open(user_project.root) as project:
        summary = project.run(hosts=[InProcessHost(_note_writer)], max_turns=10)
        assert summary.stops[sid] == "goal_terminal"
        assert project.goals.show(gid).goal.status is GoalStatus.CLOSED
    listed = user_project.tk_json("session", "list")
    assert [s["status"] for s in listed] == ["closed"]


def test_recover_resolves_a_failed_turn_once(user_project: UserProject) -> None:
    with Project.open(user_project.root) as project:
        gid = project.goals.add("Breaks").goal.id
        project.todos.add(gid, "Break", todo_id="b1")
        sid = project.sessions.create(gid, host=InProcessHost(_failing_turn)).session_id
        summary = project.run(max_turns=1)
        assert summary.failed_turns == 1
        failed = project.sessions.show(sid)
        assert failed.recovery is not None
        turn_id = failed.recovery.turn_id
        resumed = project.recover(turn_id)
        assert resumed.recovery is not None
        assert resumed.recovery.status != "awaiting_resolution"
        with pytest.raises(FailedPrecondition):
            project.recover(turn_id)  # resolved already: refused, nothing written
        with pytest.raises(NotFound):
            project.recover("turn-unknown")


def test_bad_bounds_and_a_missing_project_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition):
        Project.open(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with Project.init(tmp_path) as project:
        assert (tmp_path / ".gitignore").read_text().splitlines() == [".turnkeeper/"]
        with pytest.raises(InvalidArgument):
            project.run(max_turns=0)
        with pytest.raises(InvalidArgument):
            project.run(idle_turns=0)
        with pytest.raises(InvalidArgument):
            project.run(lease_seconds=float("nan"))
    with pytest.raises(FailedPrecondition):
        project.goals.list()  # closed: refused, not reopened behind the caller's back
