"""``turnkeeper todo ...``: units of work with leased claims, evidence and successors."""

from __future__ import annotations

from datetime import timedelta

import typer

from turnkeeper.cli import work_lists
from turnkeeper.cli.arguments import CLAIM_LEASE_MAX_SECONDS, check_seconds
from turnkeeper.cli.context import JsonOption, default_owner, goal_service, handles_errors
from turnkeeper.cli.output import safe
from turnkeeper.cli.writes import QuietOption, check_output_mode, report, say, written

# The kernel and the runtime are imported by the commands that use them, so that
# parsing a command line (and ``--help``) does not wait for them.

todo_app = typer.Typer(
    help="Todos: units of work with claims and evidence. Every id may be shortened to a "
    "unique prefix.",
    no_args_is_help=True,
)

TodoArgument = typer.Argument(..., metavar="TODO", help="A todo id, or a unique prefix of one.")
EpochOption = typer.Option(..., help="The epoch your claim was given (todo claim prints it).")
OwnerOption = typer.Option(
    "", help="Who holds the claim (default: $TURNKEEPER_OWNER or user@host)."
)

todo_app.command("list")(work_lists.todo_list)
todo_app.command("show")(work_lists.todo_show)


@todo_app.command("add")
@handles_errors
def todo_add(
    goal_id: str = typer.Argument(..., metavar="GOAL", help="A goal id, or a unique prefix."),
    title: str = typer.Argument(..., metavar="TITLE", help="What is to be done."),
    depends_on: list[str] = typer.Option([], help="A todo that must be done first."),
    requires_evidence: list[str] = typer.Option([], help="An evidence key needed to finish."),
    successor_required: bool = typer.Option(False, help="Finishing it needs a follow-up todo."),
    successor_of: str = typer.Option("", help="The todo this one follows up."),
    todo_id: str | None = typer.Option(None, "--id", help="Choose the id (default: generated)."),
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
) -> None:
    """Add a todo to a goal.

    Example:

    \b
        TODO=$(turnkeeper todo add "$GOAL" "Write the tokenizer" \\
            --requires-evidence tests -q)
    """
    from turnkeeper.kernel.proposals import AddTodo, TodoSpec, checked_input
    from turnkeeper.runtime.services.goals import id_in_goal, new_id

    check_output_mode(as_json, quiet)
    tid = new_id("todo") if todo_id is None else todo_id
    with goal_service() as goals:
        gid = goals.resolve("goal", goal_id)
        state = goals.load(gid)
        deps = [id_in_goal(state, "todo", d) for d in depends_on]
        follows = id_in_goal(state, "todo", successor_of) if successor_of else None
        with checked_input():
            spec = TodoSpec(
                todo_id=tid,
                title=title,
                depends_on=deps,
                required_evidence=requires_evidence,
                successor_required=successor_required,
            )
            proposal = AddTodo(todo=spec, successor_of=follows)
        done = goals.submit(gid, proposal)
    answer = written("todo", tid, done.state.todos[tid], done, todo_id=tid)
    report(answer, as_json=as_json, quiet=quiet, message=f"added todo [bold]{safe(tid)}[/]")


@todo_app.command("claim")
@handles_errors
def todo_claim(
    todo_id: str = TodoArgument,
    owner: str = typer.Option("", help="Who claims it (default: $TURNKEEPER_OWNER or user@host)."),
    lease: int = typer.Option(900, help="Lease length in seconds."),
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(
        False,
        "--quiet",
        "-q",
        help="Print only the claim's epoch (what renew, release and done need), not an id.",
    ),
) -> None:
    """Claim a todo under a lease; prints the claim's epoch for later writes.

    With -q only the epoch is printed: it is the one value the later writes
    on this claim (renew, release, done) need; the todo's id is known.

    Example:

    \b
        EPOCH=$(turnkeeper todo claim "$TODO" -q)
        turnkeeper todo done "$TODO" --epoch "$EPOCH" --evidence "$EV"
    """
    from turnkeeper.kernel.proposals import ClaimTodo, checked_input
    from turnkeeper.runtime.services.goals import utc_now

    check_output_mode(as_json, quiet)
    check_seconds("--lease", lease, CLAIM_LEASE_MAX_SECONDS)
    who = owner or default_owner()
    with goal_service() as goals:
        gid, tid = goals.locate("todo", todo_id)
        until = utc_now() + timedelta(seconds=lease)
        with checked_input():
            proposal = ClaimTodo(todo_id=tid, owner=who, lease_expires_at=until)
        done = goals.submit(gid, proposal)
    todo = done.state.todos[tid]
    epoch = todo.claim.epoch if todo.claim else 0
    # The lease's expiry is in the todo's claim (``todo.claim.lease_expires_at``).
    answer = written("todo", tid, todo, done, todo_id=tid, owner=who, epoch=epoch)
    if quiet:
        say(str(epoch))
        return
    report(
        answer,
        as_json=as_json,
        quiet=False,
        message=f"claimed [bold]{safe(tid)}[/] as {safe(who)}, epoch [bold]{epoch}[/]",
    )


@todo_app.command("renew")
@handles_errors
def todo_renew(
    todo_id: str = TodoArgument,
    epoch: int = EpochOption,
    owner: str = OwnerOption,
    lease: int = typer.Option(900, help="New lease length in seconds from now."),
    as_json: bool = JsonOption,
) -> None:
    """Extend your claim's lease.

    Example:

    \b
        turnkeeper todo renew "$TODO" --epoch 1 --lease 1800
    """
    from turnkeeper.kernel.proposals import Fence, RenewClaim, checked_input
    from turnkeeper.runtime.services.goals import utc_now

    check_seconds("--lease", lease, CLAIM_LEASE_MAX_SECONDS)
    with checked_input():
        fence = Fence(owner=owner or default_owner(), epoch=epoch)
    with goal_service() as goals:
        gid, tid = goals.locate("todo", todo_id)
        until = utc_now() + timedelta(seconds=lease)
        with checked_input():
            proposal = RenewClaim(todo_id=tid, fence=fence, lease_expires_at=until)
        done = goals.submit(gid, proposal)
    answer = written("todo", tid, done.state.todos[tid], done, todo_id=tid, epoch=epoch)
    report(
        answer, as_json=as_json, quiet=False, message=f"renewed {safe(tid)} until {until:%H:%M:%S}"
    )


@todo_app.command("release")
@handles_errors
def todo_release(
    todo_id: str = TodoArgument,
    epoch: int = EpochOption,
    owner: str = OwnerOption,
    as_json: bool = JsonOption,
) -> None:
    """Give a claimed todo back, for someone else to claim.

    Example:

    \b
        turnkeeper todo release "$TODO" --epoch 1
    """
    from turnkeeper.kernel.proposals import Fence, ReleaseClaim, checked_input

    with checked_input():
        fence = Fence(owner=owner or default_owner(), epoch=epoch)
    with goal_service() as goals:
        gid, tid = goals.locate("todo", todo_id)
        with checked_input():
            proposal = ReleaseClaim(todo_id=tid, fence=fence)
        done = goals.submit(gid, proposal)
    answer = written("todo", tid, done.state.todos[tid], done, todo_id=tid)
    report(answer, as_json=as_json, quiet=False, message=f"released {safe(tid)}")


@todo_app.command("done")
@handles_errors
def todo_done(
    todo_id: str = TodoArgument,
    epoch: int = EpochOption,
    evidence: list[str] = typer.Option(
        [], metavar="EV", help="An evidence id proving the work (repeatable)."
    ),
    owner: str = OwnerOption,
    revision: str = typer.Option("", help="Require evidence from this git revision."),
    as_json: bool = JsonOption,
) -> None:
    """Finish a claimed todo; its required evidence must pass and be fresh.

    Example:

    \b
        turnkeeper todo done "$TODO" --epoch 1 --evidence "$EV"
    """
    from turnkeeper.kernel.proposals import CompleteTodo, Fence, checked_input
    from turnkeeper.runtime.services.goals import id_in_goal

    with checked_input():
        fence = Fence(owner=owner or default_owner(), epoch=epoch)
    with goal_service() as goals:
        gid, tid = goals.locate("todo", todo_id)
        state = goals.load(gid)
        evidence_ids = [id_in_goal(state, "evidence", e) for e in evidence]
        with checked_input():
            proposal = CompleteTodo(
                todo_id=tid,
                fence=fence,
                evidence_ids=evidence_ids,
                current_revision=revision or None,
            )
        done = goals.submit(gid, proposal)
    answer = written("todo", tid, done.state.todos[tid], done, todo_id=tid)
    report(answer, as_json=as_json, quiet=False, message=f"done: [bold]{safe(tid)}[/]")


@todo_app.command("supersede")
@handles_errors
def todo_supersede(
    todo_id: str = TodoArgument,
    reason: str = typer.Option(..., help="Why the todo is replaced."),
    successor: str = typer.Option("", help="Title of a successor todo to create."),
    epoch: int = typer.Option(0, help="Your claim's epoch, when the todo is claimed."),
    owner: str = OwnerOption,
    as_json: bool = JsonOption,
    quiet: bool = typer.Option(
        False,
        "--quiet",
        "-q",
        help="Print only the successor's id (the todo's own id when no --successor).",
    ),
) -> None:
    """Replace a todo, optionally by a successor todo.

    Example:

    \b
        NEXT=$(turnkeeper todo supersede "$TODO" --reason "split in two" \\
            --successor "Tokenize numbers" -q)
    """
    from turnkeeper.kernel.proposals import Fence, SupersedeTodo, TodoSpec, checked_input
    from turnkeeper.runtime.services.goals import new_id

    check_output_mode(as_json, quiet)
    with checked_input():
        fence = Fence(owner=owner or default_owner(), epoch=epoch) if epoch else None
        spec = TodoSpec(todo_id=new_id("todo"), title=successor) if successor else None
    with goal_service() as goals:
        gid, tid = goals.locate("todo", todo_id)
        with checked_input():
            proposal = SupersedeTodo(todo_id=tid, reason=reason, fence=fence, successor=spec)
        done = goals.submit(gid, proposal)
    sid = spec.todo_id if spec else None
    answer = written(
        "todo",
        tid,
        done.state.todos[tid],
        done,
        todo_id=tid,
        successor_id=sid,
        successor=done.state.todos[sid] if sid else None,
    )
    if quiet:
        say(sid or tid)
        return
    extra = f", successor [bold]{safe(sid)}[/]" if sid else ""
    report(answer, as_json=as_json, quiet=False, message=f"superseded {safe(tid)}{extra}")


@todo_app.command("block")
@handles_errors
def todo_block(
    todo_id: str = TodoArgument,
    reason: str = typer.Option(..., help="What the todo waits on."),
    epoch: int = typer.Option(0, help="Your claim's epoch, when the todo is claimed."),
    owner: str = OwnerOption,
    as_json: bool = JsonOption,
) -> None:
    """Hold a todo back: no agent starts it until it is unblocked. A claimed todo is
    blocked only by its claim's holder (--epoch), and its claim ends.

    Example:

    \b
        turnkeeper todo block "$TODO" --reason "waits on the API keys"
    """
    from turnkeeper.kernel.proposals import BlockTodo, Fence, checked_input

    with checked_input():
        fence = Fence(owner=owner or default_owner(), epoch=epoch) if epoch else None
    with goal_service() as goals:
        gid, tid = goals.locate("todo", todo_id)
        with checked_input():
            proposal = BlockTodo(todo_id=tid, reason=reason, fence=fence)
        done = goals.submit(gid, proposal)
    answer = written("todo", tid, done.state.todos[tid], done, todo_id=tid)
    report(answer, as_json=as_json, quiet=False, message=f"blocked {safe(tid)}")


@todo_app.command("unblock")
@handles_errors
def todo_unblock(todo_id: str = TodoArgument, as_json: bool = JsonOption) -> None:
    """Let a blocked todo be started again, in its place in the goal's order.

    Example:

    \b
        turnkeeper todo unblock "$TODO"
    """
    from turnkeeper.kernel.proposals import UnblockTodo, checked_input

    with goal_service() as goals:
        gid, tid = goals.locate("todo", todo_id)
        with checked_input():
            proposal = UnblockTodo(todo_id=tid)
        done = goals.submit(gid, proposal)
    answer = written("todo", tid, done.state.todos[tid], done, todo_id=tid)
    report(answer, as_json=as_json, quiet=False, message=f"unblocked {safe(tid)}")
