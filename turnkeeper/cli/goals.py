"""``turnkeeper goal ...``: goals, their acceptance criteria and their closure.

The todo commands live in :mod:`turnkeeper.cli.todos`; ``todo_app`` is re-exported
here, where the command line is assembled from.
"""

from __future__ import annotations

from enum import StrEnum

import typer

from turnkeeper.cli.context import GoalArgument, JsonOption, goal_service, handles_errors
from turnkeeper.cli.output import console, print_json, safe
from turnkeeper.cli.todos import todo_app
from turnkeeper.cli.writes import QuietOption, check_output_mode, report, written
from turnkeeper.runtime.services.goal_pages import DEFAULT_PAGE_SIZE

# The kernel and the runtime are imported by the commands that use them, so that
# parsing a command line (and ``--help``) does not wait for them.

__all__ = ["CloseReason", "goal_app", "todo_app"]


class CloseReason(StrEnum):
    """``--reason`` of ``goal close`` and ``goal no-follow-up``: the kernel's
    ``NoFollowUpReason``, spelled out here so that building the command line does not
    import the kernel (a test keeps the two equal)."""

    ACCEPTANCE_MET = "acceptance_met"
    NO_ACTION_NEEDED = "no_action_needed"
    HANDLED_ELSEWHERE = "handled_elsewhere"
    ACCEPTED_RISK = "accepted_risk"
    OUT_OF_SCOPE = "out_of_scope"


goal_app = typer.Typer(
    help="Goals: objectives with acceptance criteria. Every id may be shortened to a "
    "unique prefix.",
    no_args_is_help=True,
)


@goal_app.command("add")
@handles_errors
def goal_add(
    title: str = typer.Argument(..., metavar="TITLE", help="The goal, in a few words."),
    objective: str = typer.Option("", help="What the goal is for."),
    criterion: list[str] = typer.Option(
        [], "--criterion", "-c", help="An acceptance criterion (ids c1, c2, ... in order)."
    ),
    vision_agent: list[str] = typer.Option([], help="An agent that must keep a vision checkpoint."),
    goal_id: str | None = typer.Option(None, "--id", help="Choose the id (default: generated)."),
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
) -> None:
    """Create a goal with its acceptance criteria.

    Example:

    \b
        GOAL=$(turnkeeper goal add "Ship the parser" -c "all parser tests pass" -q)
    """
    from turnkeeper.kernel.proposals import CreateGoal, CriterionSpec, checked_input
    from turnkeeper.runtime.services.goals import new_id

    check_output_mode(as_json, quiet)
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
    answer = written("goal", gid, done.state.goal, done)
    report(answer, as_json=as_json, quiet=quiet, message=f"created goal [bold]{safe(gid)}[/]")


@goal_app.command("show")
@handles_errors
def goal_show(
    goal_id: str = GoalArgument,
    history: int = typer.Option(20, help="How many recent events to show."),
    limit: int = typer.Option(
        DEFAULT_PAGE_SIZE, min=1, help="Todos and evidence records per page (at most 1000)."
    ),
    offset: int = typer.Option(0, min=0, help="Skip this many todos and evidence records."),
    as_json: bool = JsonOption,
) -> None:
    """A goal: criteria with their ids, todos, gates, monitors, evidence, audit.

    Todos, evidence records and the audit's blockers are shown a page at a time
    (--limit, from --offset), with a line saying how many more there are; the audit's
    counters count them all. Ends with the goal's recent history (--history events).

    Example:

    \b
        turnkeeper goal show goal-3f9c
        turnkeeper goal show goal-3f9c --offset 50
    """
    from turnkeeper.cli.render import render_goal
    from turnkeeper.runtime.services.goal_pages import check_page, page_audit, page_of

    check_page(offset, limit)
    with goal_service(reading=True) as goals:
        gid = goals.resolve("goal", goal_id)
        state = goals.load(gid)
        audit = goals.audit_of(state)
        recent = goals.recent_history(gid, history)
    shown, page = page_of(state, offset, limit)
    shown_audit, page = page_audit(audit, page)
    if as_json:
        answer = {"id": gid, "state": shown, "page": page, "audit": shown_audit}
        print_json({**answer, "history": recent})
        return
    render_goal(shown, shown_audit, recent)
    remaining = page.remaining_line()
    if remaining is not None:
        console.print(f"[dim]{safe(remaining)}[/]")


@goal_app.command("list")
@handles_errors
def goal_list(as_json: bool = JsonOption) -> None:
    """Every goal with its status and how much is left.

    Example:

    \b
        turnkeeper goal list --json
    """
    from turnkeeper.cli.render import render_goal_list

    with goal_service(reading=True) as goals:
        # Each goal audited from the state listed, not read again.
        rows = [(state, goals.audit_of(state)) for state in goals.list_goals()]
    if as_json:
        print_json([{"goal": s.goal, "audit": a} for s, a in rows])
    else:
        render_goal_list(rows)


@goal_app.command("criterion-met")
@handles_errors
def goal_criterion_met(
    goal_id: str = GoalArgument,
    criterion: str = typer.Argument(
        ..., metavar="CRITERION", help="A criterion id as `goal show` lists it (c1, ...)."
    ),
    evidence: list[str] = typer.Option(
        [], "--evidence", metavar="EV", help="Passing, fresh evidence that shows it (repeatable)."
    ),
    revision: str = typer.Option("", help="Require evidence from this git revision."),
    as_json: bool = JsonOption,
) -> None:
    """Mark an acceptance criterion met, shown by passing, fresh evidence.

    Example:

    \b
        turnkeeper goal criterion-met "$GOAL" c1 --evidence "$EV"
    """
    from turnkeeper.kernel.proposals import SatisfyCriterion, checked_input
    from turnkeeper.runtime.services.goals import id_in_goal

    with goal_service() as goals:
        gid = goals.resolve("goal", goal_id)
        state = goals.load(gid)
        cid = id_in_goal(state, "criterion", criterion)
        evidence_ids = [id_in_goal(state, "evidence", e) for e in evidence]
        with checked_input():
            proposal = SatisfyCriterion(
                criterion_id=cid, evidence_ids=evidence_ids, current_revision=revision or None
            )
        done = goals.submit(gid, proposal)
    met = next(c for c in done.state.goal.criteria if c.id == cid)
    answer = written("criterion", cid, met, done)
    shown = ", ".join(safe(e) for e in evidence_ids)
    report(
        answer,
        as_json=as_json,
        quiet=False,
        message=f"criterion [bold]{safe(cid)}[/] met: {safe(met.text)} (evidence {shown})",
    )


@goal_app.command("no-follow-up")
@handles_errors
def goal_no_follow_up(
    goal_id: str = GoalArgument,
    summary: str = typer.Option(..., help="Why nothing more needs doing."),
    reason: CloseReason = typer.Option(
        CloseReason.ACCEPTANCE_MET.value, help="The kind of reason."
    ),
    discharges: list[str] = typer.Option(
        [],
        "--discharges",
        metavar="OBLIGATION",
        help="A replan obligation this settles (repeatable; default: every open one).",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Record that no follow-up work is needed, discharging replan obligations.

    When every todo is finished while a criterion is still unmet, the goal
    raises a frontier_exhausted replan obligation, and `goal close` is refused
    until it is discharged. Once the criteria are met, this records why no
    more work follows. Without --discharges it discharges every open replan
    obligation of the goal (`goal show` lists them); name some to discharge
    only those.

    Example:

    \b
        turnkeeper goal no-follow-up "$GOAL" --summary "nothing more to do"
    """
    from turnkeeper.errors import FailedPrecondition
    from turnkeeper.kernel.events import ObligationDischarged
    from turnkeeper.kernel.model import GoalState, NoFollowUpReason
    from turnkeeper.kernel.proposals import RecordNoFollowUp, checked_input
    from turnkeeper.runtime.services.goals import id_in_goal

    def build(state: GoalState) -> RecordNoFollowUp:
        # Built on the state the write decides on, so "every open one" is exactly
        # what is open when the record lands.
        if discharges:
            ids = [id_in_goal(state, "obligation", d) for d in discharges]
        else:
            ids = [o.id for o in state.open_obligations()]
            if not ids:
                raise FailedPrecondition(
                    f"goal {state.goal.id!r} has no open replan obligation to discharge",
                    reason="no_open_obligation",
                    details={"goal_id": state.goal.id},
                )
        with checked_input():
            return RecordNoFollowUp(
                reason=NoFollowUpReason(reason.value), summary=summary, discharges=ids
            )

    with goal_service() as goals:
        gid = goals.resolve("goal", goal_id)
        done = goals.submit_built(gid, build)
    discharged = [e.obligation_id for e in done.events if isinstance(e, ObligationDischarged)]
    answer = written("no_follow_up", gid, done.state.no_follow_ups[-1], done, discharged=discharged)
    report(
        answer,
        as_json=as_json,
        quiet=False,
        message=f"no follow-up ({reason.value}) recorded on [bold]{safe(gid)}[/]; "
        f"discharged {safe(', '.join(discharged))}",
    )


@goal_app.command("close")
@handles_errors
def goal_close(
    goal_id: str = GoalArgument,
    summary: str = typer.Option(..., help="What was achieved."),
    reason: CloseReason = typer.Option(
        CloseReason.ACCEPTANCE_MET.value, help="Why no follow-up is needed."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Close a goal; refused, naming each blocker, unless the terminal audit passes.

    Example:

    \b
        turnkeeper audit "$GOAL"
        turnkeeper goal close "$GOAL" --summary "parser shipped"
    """
    from turnkeeper.kernel.model import NoFollowUpReason
    from turnkeeper.kernel.proposals import CloseGoal, checked_input

    with checked_input():
        proposal = CloseGoal(reason=NoFollowUpReason(reason.value), summary=summary)
    with goal_service() as goals:
        gid = goals.resolve("goal", goal_id)
        done = goals.submit(gid, proposal)
    answer = written("goal", gid, done.state.goal, done)
    report(answer, as_json=as_json, quiet=False, message=f"closed goal [bold]{safe(gid)}[/]")
