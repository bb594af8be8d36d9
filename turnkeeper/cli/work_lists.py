"""``todo list|show``, ``gate list`` and ``evidence list``: one goal's work, read back.

The functions here are registered by the command groups they belong to
(:mod:`turnkeeper.cli.todos`, :mod:`turnkeeper.cli.watch`); the views themselves
are :mod:`turnkeeper.runtime.services.work_views`.
"""

from __future__ import annotations

from enum import StrEnum

import typer

from turnkeeper.cli.context import GoalArgument, JsonOption, goal_service, handles_errors
from turnkeeper.cli.output import print_json

# The kernel and the runtime are imported by the commands that use them, so that
# parsing a command line (and ``--help``) does not wait for them.


class TodoStatusChoice(StrEnum):
    """``todo list --status``: the kernel's ``TodoStatus``, spelled out here so that
    building the command line does not import the kernel (a test keeps the two equal)."""

    OPEN = "open"
    CLAIMED = "claimed"
    DONE = "done"
    BLOCKED = "blocked"
    SUPERSEDED = "superseded"


class GateStatusChoice(StrEnum):
    """``gate list --status``: the kernel's ``GateStatus`` (a test keeps them equal)."""

    OPEN = "open"
    RESOLVED = "resolved"


@handles_errors
def todo_list(
    goal_id: str = GoalArgument,
    status: list[TodoStatusChoice] = typer.Option(
        [], help="Only todos with this status (repeatable)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """A goal's todos, in the order they were added, with status and claim.

    Example:

    \b
        turnkeeper todo list "$GOAL" --status open --status claimed
    """
    from turnkeeper.cli.render_work import render_todo_list
    from turnkeeper.runtime.services import work_views

    with goal_service(reading=True) as goals:
        state = goals.load(goals.resolve("goal", goal_id))
    rows = work_views.todos(state, [s.value for s in status])
    if as_json:
        print_json({"goal_id": state.goal.id, "todos": rows})
    else:
        render_todo_list(state, rows)


@handles_errors
def todo_show(
    todo_id: str = typer.Argument(..., metavar="TODO", help="A todo id, or a unique prefix."),
    as_json: bool = JsonOption,
) -> None:
    """One todo: status, claim, dependencies, evidence, successors, gates.

    The claim shows owner, epoch and expiry; the evidence, what it requires
    and what its completion attached.

    Example:

    \b
        turnkeeper todo show todo-3f9c
    """
    from turnkeeper.cli.render_work import render_todo
    from turnkeeper.runtime.services import work_views
    from turnkeeper.runtime.services.goals import utc_now

    with goal_service(reading=True) as goals:
        gid, tid = goals.locate("todo", todo_id)
        state = goals.load(gid)
    detail = work_views.todo_detail(state, tid, utc_now())
    if as_json:
        print_json(detail)
    else:
        render_todo(detail)


@handles_errors
def gate_list(
    goal_id: str = GoalArgument,
    status: list[GateStatusChoice] = typer.Option(
        [], help="Only gates with this status (repeatable)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """A goal's gates: what each blocks and how it was resolved.

    Example:

    \b
        turnkeeper gate list "$GOAL" --status open
    """
    from turnkeeper.cli.render_work import render_gate_list

    with goal_service(reading=True) as goals:
        state = goals.load(goals.resolve("goal", goal_id))
    wanted = {s.value for s in status}
    rows = [g for g in state.gates.values() if not wanted or g.status.value in wanted]
    if as_json:
        print_json({"goal_id": state.goal.id, "gates": rows})
    else:
        render_gate_list(rows)


@handles_errors
def evidence_list(
    goal_id: str = GoalArgument,
    key: str = typer.Option("", help="Only evidence recorded under this key."),
    as_json: bool = JsonOption,
) -> None:
    """A goal's evidence: id, key, command, exit code, revision and tree, time, freshness.

    Only the latest run of a key counts for the terminal audit; older runs
    are listed for the record.

    Example:

    \b
        turnkeeper evidence list "$GOAL" --key tests
    """
    from turnkeeper.cli.render_work import render_evidence_list
    from turnkeeper.runtime.services import work_views
    from turnkeeper.runtime.services.goals import utc_now

    with goal_service(reading=True) as goals:
        state = goals.load(goals.resolve("goal", goal_id))
    rows = work_views.evidence_rows(state, utc_now(), key)
    if as_json:
        print_json({"goal_id": state.goal.id, "evidence": rows})
    else:
        render_evidence_list(rows)
