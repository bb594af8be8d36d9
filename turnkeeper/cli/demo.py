"""``turnkeeper demo``: the work-state kernel end to end in a throwaway git repository.

Everything is real: a SQLite file in WAL mode, real commands run as evidence
bound to a real git revision, the terminal audit refusing to close a goal whose
todos are all ticked while acceptance is still open.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import typer
from rich.panel import Panel

from turnkeeper.cli.output import console
from turnkeeper.cli.render import render_audit, render_goal, render_verify
from turnkeeper.errors import TurnkeeperError
from turnkeeper.kernel.model import NoFollowUpReason
from turnkeeper.kernel.proposals import (
    AddTodo,
    ClaimTodo,
    CloseGoal,
    CompleteTodo,
    CreateGoal,
    CriterionSpec,
    Fence,
    GoalProposal,
    Note,
    RecordEvidence,
    RecordNoFollowUp,
    SatisfyCriterion,
    TodoSpec,
)
from turnkeeper.runtime.folder import kernel_folder
from turnkeeper.runtime.goals import GoalService, utc_now
from turnkeeper.runtime.project import init_project
from turnkeeper.runtime.workspace import git_revision
from turnkeeper.store import open_store

OWNER = "demo-agent"


def _step(text: str) -> None:
    console.rule(f"[bold cyan]{text}")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "demo@turnkeeper.invalid")
    _git(repo, "config", "user.name", "turnkeeper demo")
    (repo / "greet.py").write_text("def greet(name):\n    return 'hello ' + name\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "initial")
    return repo


def _run_check(repo: Path, goals: GoalService, goal_id: str, eid: str, code: str) -> None:
    argv = [sys.executable, "-c", code]
    proc = subprocess.run(argv, cwd=repo, capture_output=True, check=False)
    goals.submit(
        goal_id,
        RecordEvidence(
            evidence_id=eid,
            command="python -c <check>",
            key="greet-check",
            revision=git_revision(repo),
            exit_code=proc.returncode,
            output_digest=hashlib.sha256(proc.stdout + proc.stderr).hexdigest(),
            freshness_seconds=3600,
        ),
    )
    style = "green" if proc.returncode == 0 else "red"
    console.print(f"evidence {eid}: check exited [{style}]{proc.returncode}[/]")


def _refused(goals: GoalService, goal_id: str, proposal: GoalProposal, why: str) -> None:
    try:
        goals.submit(goal_id, proposal)
    except TurnkeeperError as error:
        console.print(f"[yellow]refused as expected[/] ({why}): {error.code.value} {error.reason}")
        return
    raise RuntimeError(f"the kernel accepted what it should refuse: {why}")


def demo(keep: bool = typer.Option(False, help="Keep the throwaway directory.")) -> None:
    """Run the demonstration in a throwaway git repository (embedded SQLite)."""
    root = Path(tempfile.mkdtemp(prefix="turnkeeper-demo-"))
    repo = _make_repo(root)
    project, _ = init_project(repo)
    console.print(Panel(f"throwaway repository: {repo}\nstore: {project.database_url}"))
    store = open_store(project.database_url)
    goals = GoalService(store)
    gid = "goal-greeting"
    check = "from greet import greet; assert greet('you') == 'Hello, you!'"
    try:
        _step("a goal with acceptance criteria and two todos")
        goals.create(
            CreateGoal(
                goal_id=gid,
                title="Friendlier greeting",
                criteria=[CriterionSpec(id="c1", text="greet() says 'Hello, NAME!'")],
            )
        )
        goals.submit(
            gid,
            AddTodo(
                todo=TodoSpec(
                    todo_id="t-edit", title="Change greet()", required_evidence=["greet-check"]
                )
            ),
        )
        goals.submit(
            gid,
            AddTodo(
                todo=TodoSpec(todo_id="t-docs", title="Document greet()", depends_on=["t-edit"])
            ),
        )
        lease = utc_now() + timedelta(minutes=15)
        _refused(
            goals,
            gid,
            ClaimTodo(todo_id="t-docs", owner=OWNER, lease_expires_at=lease),
            "t-docs depends on t-edit",
        )
        epoch = goals.submit(gid, ClaimTodo(todo_id="t-edit", owner=OWNER, lease_expires_at=lease))
        claim = epoch.state.todos["t-edit"].claim
        fence = Fence(owner=OWNER, epoch=claim.epoch if claim else 0)
        _refused(
            goals,
            gid,
            ClaimTodo(todo_id="t-edit", owner="another-agent", lease_expires_at=lease),
            "lease held by demo-agent",
        )

        _step("evidence is bound to command, revision and time")
        _run_check(repo, goals, gid, "ev-1", check)
        _refused(
            goals,
            gid,
            CompleteTodo(todo_id="t-edit", fence=fence, evidence_ids=["ev-1"]),
            "the evidence failed",
        )
        (repo / "greet.py").write_text("def greet(name):\n    return f'Hello, {name}!'\n")
        _git(repo, "commit", "-q", "-am", "friendlier greeting")
        _run_check(repo, goals, gid, "ev-2", check)
        goals.submit(
            gid,
            CompleteTodo(
                todo_id="t-edit",
                fence=fence,
                evidence_ids=["ev-2"],
                current_revision=git_revision(repo),
            ),
        )
        docs = goals.submit(gid, ClaimTodo(todo_id="t-docs", owner=OWNER, lease_expires_at=lease))
        docs_claim = docs.state.todos["t-docs"].claim
        goals.submit(
            gid,
            CompleteTodo(
                todo_id="t-docs",
                fence=Fence(owner=OWNER, epoch=docs_claim.epoch if docs_claim else 0),
            ),
        )

        _step("all todos ticked is not enough")
        render_audit(goals.audit(gid))
        _refused(
            goals,
            gid,
            CloseGoal(reason=NoFollowUpReason.ACCEPTANCE_MET, summary="done"),
            "acceptance criterion not yet satisfied",
        )
        goals.submit(
            gid,
            SatisfyCriterion(
                criterion_id="c1", evidence_ids=["ev-2"], current_revision=git_revision(repo)
            ),
        )
        open_ids = [o.id for o in goals.load(gid).open_obligations()]
        _refused(
            goals,
            gid,
            Note(author=OWNER, text="re-assessed, continuing", discharges=open_ids),
            "a note is not an observable delta",
        )
        goals.submit(
            gid,
            RecordNoFollowUp(
                reason=NoFollowUpReason.ACCEPTANCE_MET,
                summary="criterion met at HEAD",
                discharges=open_ids,
            ),
        )
        goals.submit(
            gid,
            CloseGoal(
                reason=NoFollowUpReason.ACCEPTANCE_MET,
                summary="greet() is friendlier; checked at HEAD",
            ),
        )

        _step("the goal, its audit and its history")
        records = goals.history(gid)
        render_goal(goals.load(gid), goals.audit(gid), records[-8:])
        _step("verify: every projection equals the fold of its events")
        render_verify(store.verify(kernel_folder()))
    finally:
        store.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    console.print(f"[dim]directory: {root}{' (kept)' if keep else ' (removed)'}[/]")
