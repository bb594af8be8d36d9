"""``turnkeeper goal ...`` and ``turnkeeper todo ...``."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

import typer

from turnkeeper.cli.arguments import CLAIM_LEASE_MAX_SECONDS, check_seconds
from turnkeeper.cli.context import JsonOption, default_owner, goal_service, handles_errors
from turnkeeper.cli.output import console, print_json, safe

# The kernel and the runtime are imported by the commands that use them, so that
# parsing a command line (and ``--help``) does not wait for them.
if TYPE_CHECKING:
    from turnkeeper.runtime.goals import Submitted


class CloseReason(StrEnum):
    """``goal close --reason``: the kernel's ``NoFollowUpReason``, spelled out here so
    that building the command line does not import the kernel (a test keeps the two
    equal)."""

    ACCEPTANCE_MET = "acceptance_met"
    NO_ACTION_NEEDED = "no_action_needed"
    HANDLED_ELSEWHERE = "handled_elsewhere"
    ACCEPTED_RISK = "accepted_risk"
    OUT_OF_SCOPE = "out_of_scope"


goal_app = typer.Typer(help="Goals: objectives with acceptance criteria.", no_args_is_help=True)
todo_app = typer.Typer(help="Todos: units of work with claims and evidence.", no_args_is_help=True)


def _report(done: Submitted, as_json: bool, message: str) -> None:
    """``message`` is Rich markup: the values it names must have gone through ``safe``."""
    if as_json:
        print_json({"events": done.events, "head_seq": done.head_seq})
    else:
        console.print(message)


@goal_app.command("add")
@handles_errors
def goal_add(
    title: str,
    objective: str = typer.Option("", help="What the goal is for."),
    criterion: list[str] = typer.Option([], "--criterion", "-c", help="An acceptance criterion."),
    vision_agent: list[str] = typer.Option([], help="An agent that must keep a vision checkpoint."),
    goal_id: str | None = typer.Option(None, "--id", help="Choose the id (default: generated)."),
    as_json: bool = JsonOption,
) -> None:
    """Create a goal."""
    from turnkeeper.kernel.proposals import CreateGoal, CriterionSpec, checked_input
    from turnkeeper.runtime.goals import new_id

    # Only an absent --id is generated: an empty one is refused like any other bad id.
    gid = new_id("goal") if goal_id is None else goal_id
    with checked_input():
        proposal = CreateGoal(
            goal_id=gid,
            title=title,
            objective=objective,
            criteria=[CriterionSpec(id=f"c{i + 1}", text=text) for i, text in enumerate(criterion)],
            agents_requiring_vision=vision_agent,
        )
    with goal_service() as goals:
        done = goals.create(proposal)
    _report(done, as_json, f"created goal [bold]{safe(gid)}[/]")


@goal_app.command("show")
@handles_errors
def goal_show(
    goal_id: str,
    history: int = typer.Option(20, help="How many recent events to show."),
    as_json: bool = JsonOption,
) -> None:
    """A goal with its todos, gates, monitors, evidence, audit and recent history."""
    from turnkeeper.cli.render import render_goal

    with goal_service() as goals:
        state = goals.load(goal_id)
        audit = goals.audit(goal_id)
        records = goals.history(goal_id)
    recent = records[-history:] if history > 0 else []
    if as_json:
        print_json({"state": state, "audit": audit, "history": recent})
    else:
        render_goal(state, audit, recent)


@goal_app.command("list")
@handles_errors
def goal_list(as_json: bool = JsonOption) -> None:
    """Every goal with its status and how much is left."""
    from turnkeeper.cli.render import render_goal_list

    with goal_service() as goals:
        rows = [(state, goals.audit(state.goal.id)) for state in goals.list_goals()]
    if as_json:
        print_json([{"goal": s.goal, "audit": a} for s, a in rows])
    else:
        render_goal_list(rows)


@goal_app.command("close")
@handles_errors
def goal_close(
    goal_id: str,
    summary: str = typer.Option(..., help="What was achieved."),
    reason: CloseReason = typer.Option(
        CloseReason.ACCEPTANCE_MET.value, help="Why no follow-up is needed."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Close a goal; refused, naming each blocker, unless the terminal audit passes."""
    from turnkeeper.kernel.model import NoFollowUpReason
    from turnkeeper.kernel.proposals import CloseGoal, checked_input

    with checked_input():
        proposal = CloseGoal(reason=NoFollowUpReason(reason.value), summary=summary)
    with goal_service() as goals:
        done = goals.submit(goal_id, proposal)
    _report(done, as_json, f"closed goal [bold]{safe(goal_id)}[/]")


@todo_app.command("add")
@handles_errors
def todo_add(
    goal_id: str,
    title: str,
    depends_on: list[str] = typer.Option([], help="A todo that must be done first."),
    requires_evidence: list[str] = typer.Option([], help="An evidence key needed to finish."),
    successor_required: bool = typer.Option(False, help="Finishing it needs a follow-up todo."),
    successor_of: str = typer.Option("", help="The todo this one follows up."),
    todo_id: str | None = typer.Option(None, "--id", help="Choose the id (default: generated)."),
    as_json: bool = JsonOption,
) -> None:
    """Add a todo to a goal."""
    from turnkeeper.kernel.proposals import AddTodo, TodoSpec, checked_input
    from turnkeeper.runtime.goals import new_id

    tid = new_id("todo") if todo_id is None else todo_id
    with checked_input():
        spec = TodoSpec(
            todo_id=tid,
            title=title,
            depends_on=depends_on,
            required_evidence=requires_evidence,
            successor_required=successor_required,
        )
        proposal = AddTodo(todo=spec, successor_of=successor_of or None)
    with goal_service() as goals:
        done = goals.submit(goal_id, proposal)
    _report(done, as_json, f"added todo [bold]{safe(tid)}[/]")


@todo_app.command("claim")
@handles_errors
def todo_claim(
    todo_id: str,
    owner: str = typer.Option("", help="Who claims it (default: user@host)."),
    lease: int = typer.Option(900, help="Lease length in seconds."),
    as_json: bool = JsonOption,
) -> None:
    """Claim a todo under a lease; prints the claim's epoch for later writes."""
    from turnkeeper.kernel.proposals import ClaimTodo, checked_input
    from turnkeeper.runtime.goals import utc_now

    check_seconds("--lease", lease, CLAIM_LEASE_MAX_SECONDS)
    who = owner or default_owner()
    with goal_service() as goals:
        gid = goals.goal_of(todo_id, "todo")
        until = utc_now() + timedelta(seconds=lease)
        with checked_input():
            proposal = ClaimTodo(todo_id=todo_id, owner=who, lease_expires_at=until)
        done = goals.submit(gid, proposal)
    claim = done.state.todos[todo_id].claim
    epoch = claim.epoch if claim else 0
    if as_json:
        print_json({"todo_id": todo_id, "owner": who, "epoch": epoch, "events": done.events})
    else:
        console.print(f"claimed [bold]{safe(todo_id)}[/] as {safe(who)}, epoch [bold]{epoch}[/]")


@todo_app.command("renew")
@handles_errors
def todo_renew(
    todo_id: str,
    epoch: int = typer.Option(..., help="The epoch your claim was given."),
    owner: str = typer.Option("", help="Who holds the claim (default: user@host)."),
    lease: int = typer.Option(900, help="New lease length in seconds from now."),
    as_json: bool = JsonOption,
) -> None:
    """Extend your claim's lease."""
    from turnkeeper.kernel.proposals import Fence, RenewClaim, checked_input
    from turnkeeper.runtime.goals import utc_now

    check_seconds("--lease", lease, CLAIM_LEASE_MAX_SECONDS)
    with checked_input():
        fence = Fence(owner=owner or default_owner(), epoch=epoch)
    with goal_service() as goals:
        gid = goals.goal_of(todo_id, "todo")
        until = utc_now() + timedelta(seconds=lease)
        with checked_input():
            proposal = RenewClaim(todo_id=todo_id, fence=fence, lease_expires_at=until)
        done = goals.submit(gid, proposal)
    _report(done, as_json, f"renewed {safe(todo_id)} until {until:%H:%M:%S}")


@todo_app.command("release")
@handles_errors
def todo_release(
    todo_id: str,
    epoch: int = typer.Option(..., help="The epoch your claim was given."),
    owner: str = typer.Option("", help="Who holds the claim (default: user@host)."),
    as_json: bool = JsonOption,
) -> None:
    """Give a claimed todo back."""
    from turnkeeper.kernel.proposals import Fence, ReleaseClaim, checked_input

    with checked_input():
        proposal = ReleaseClaim(
            todo_id=todo_id, fence=Fence(owner=owner or default_owner(), epoch=epoch)
        )
    with goal_service() as goals:
        done = goals.submit(goals.goal_of(todo_id, "todo"), proposal)
    _report(done, as_json, f"released {safe(todo_id)}")


@todo_app.command("done")
@handles_errors
def todo_done(
    todo_id: str,
    epoch: int = typer.Option(..., help="The epoch your claim was given."),
    evidence: list[str] = typer.Option([], help="An evidence id proving the work."),
    owner: str = typer.Option("", help="Who holds the claim (default: user@host)."),
    revision: str = typer.Option("", help="Require evidence from this git revision."),
    as_json: bool = JsonOption,
) -> None:
    """Finish a claimed todo; its required evidence must pass and be fresh."""
    from turnkeeper.kernel.proposals import CompleteTodo, Fence, checked_input

    with checked_input():
        fence = Fence(owner=owner or default_owner(), epoch=epoch)
        proposal = CompleteTodo(
            todo_id=todo_id, fence=fence, evidence_ids=evidence, current_revision=revision or None
        )
    with goal_service() as goals:
        done = goals.submit(goals.goal_of(todo_id, "todo"), proposal)
    _report(done, as_json, f"done: [bold]{safe(todo_id)}[/]")


@todo_app.command("supersede")
@handles_errors
def todo_supersede(
    todo_id: str,
    reason: str = typer.Option(..., help="Why the todo is replaced."),
    successor: str = typer.Option("", help="Title of a successor todo to create."),
    epoch: int = typer.Option(0, help="Your claim's epoch, when the todo is claimed."),
    owner: str = typer.Option("", help="Who holds the claim (default: user@host)."),
    as_json: bool = JsonOption,
) -> None:
    """Replace a todo, optionally by a successor."""
    from turnkeeper.kernel.proposals import Fence, SupersedeTodo, TodoSpec, checked_input
    from turnkeeper.runtime.goals import new_id

    with checked_input():
        fence = Fence(owner=owner or default_owner(), epoch=epoch) if epoch else None
        spec = TodoSpec(todo_id=new_id("todo"), title=successor) if successor else None
        proposal = SupersedeTodo(todo_id=todo_id, reason=reason, fence=fence, successor=spec)
    with goal_service() as goals:
        done = goals.submit(goals.goal_of(todo_id, "todo"), proposal)
    extra = f", successor [bold]{safe(spec.todo_id)}[/]" if spec else ""
    _report(done, as_json, f"superseded {safe(todo_id)}{extra}")
