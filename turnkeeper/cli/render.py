"""Rich renderings of goal state, audits and store reports, for people."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.table import Column, Table

from turnkeeper.cli.fast_table import FastTable
from turnkeeper.cli.output import console, safe
from turnkeeper.kernel import GoalState, TerminalAudit
from turnkeeper.kernel.model import Evidence
from turnkeeper.store.records import EventRecord, RepairReport, VerifyReport

_STATUS_STYLE = {
    "open": "yellow",
    "claimed": "cyan",
    "done": "green",
    "blocked": "red",
    "superseded": "dim",
    "resolved": "green",
    "closed": "green",
}


def id_column(header: str) -> Column:
    """A table's column of ids that people copy into the next command (todos, gates,
    monitors, evidence): never cut with an ellipsis; the other columns give way."""
    return Column(header, no_wrap=True)


def styled(value: str) -> str:
    style = _STATUS_STYLE.get(value, "white")
    return f"[{style}]{safe(value)}[/]"


def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def tested_on(evidence: Evidence) -> str:
    """The commit and the worktree content a check ran on (see ``Evidence``): the tree
    tells apart two records on one commit with different uncommitted work."""
    revision = (evidence.revision or "-")[:10]
    return f"{revision} / {evidence.tree[:10]}" if evidence.tree else revision


def render_goal(state: GoalState, audit: TerminalAudit, history: Sequence[EventRecord]) -> None:
    goal = state.goal
    # Every value below came from a user, an agent or the database: ``safe`` shows its
    # control characters as escapes and its markup as typed.
    console.print(
        f"[bold]{safe(goal.title)}[/]  [dim]{safe(goal.id)}[/]  {styled(goal.status.value)}"
    )
    if goal.objective:
        console.print(f"  {safe(goal.objective, lines=True)}")
    if goal.criteria:
        # Ids first: `goal criterion-met GOAL CRITERION` names a criterion by its id.
        console.print("[bold]Acceptance[/] (criterion id, met, text)")
        for criterion in goal.criteria:
            mark = "[green]✓ met[/]" if criterion.met else "[yellow]· unmet[/]"
            evidence = (
                f" [dim](evidence {safe(', '.join(criterion.evidence_ids))})[/]"
                if criterion.evidence_ids
                else ""
            )
            console.print(
                f"  [bold]{safe(criterion.id)}[/]  {mark}  {safe(criterion.text)}{evidence}"
            )
    if state.todos:
        table = Table(
            id_column("todo"), "title", "status", "claim", "needs evidence", title="Todos"
        )
        for todo in state.todos.values():
            claim = (
                f"{safe(todo.claim.owner)} e{todo.claim.epoch} "
                f"until {when(todo.claim.lease_expires_at)}"
                if todo.claim
                else "-"
            )
            table.add_row(
                safe(todo.id),
                safe(todo.title),
                styled(todo.status.value),
                claim,
                safe(", ".join(todo.required_evidence)) or "-",
            )
        console.print(table)
    if state.gates:
        table = Table(id_column("gate"), "title", "blocking", "status", "resolution", title="Gates")
        for gate in state.gates.values():
            resolution = (
                f"{safe(gate.resolution.decision)} by {safe(gate.resolution.by)}"
                if gate.resolution
                else "-"
            )
            table.add_row(
                safe(gate.id),
                safe(gate.title),
                str(gate.blocking),
                styled(gate.status.value),
                resolution,
            )
        console.print(table)
    if state.monitors:
        table = Table(
            id_column("monitor"), "target", "next due", "last readback", "streak", title="Monitors"
        )
        for mon in state.monitors.values():
            last = (
                f"{safe(repr(mon.last_readback.value))} at {when(mon.last_readback.at)}"
                if mon.last_readback
                else "-"
            )
            table.add_row(
                safe(mon.id), safe(mon.target), when(mon.next_due), last, str(mon.no_change_streak)
            )
        console.print(table)
    if state.evidence:
        table = Table(
            id_column("evidence"), "key", "exit", "revision / tree", "recorded", title="Evidence"
        )
        for ev in state.evidence.values():
            table.add_row(
                safe(ev.id),
                safe(ev.key),
                str(ev.exit_code),
                safe(tested_on(ev)),
                when(ev.recorded_at),
            )
        console.print(table)
    obligations = state.open_obligations()
    if obligations:
        console.print(
            "[bold]Open replan obligations[/] (settle with a new todo, changed acceptance, "
            "or `goal no-follow-up`)"
        )
        for ob in obligations:
            console.print(
                f"  [red]![/] [bold]{safe(ob.id)}[/] {ob.trigger.value}: {safe(ob.detail)}"
            )
    render_audit(audit)
    if history:
        console.print(f"[bold]History[/] (last {len(history)} events)")
        for record in history:
            console.print(
                f"  [dim]#{record.seq:<4} {when(record.recorded_at)}[/] {safe(record.type)}"
            )


def render_audit(audit: TerminalAudit) -> None:
    verdict = "[bold green]terminal[/]" if audit.terminal else "[bold yellow]not terminal[/]"
    console.print(f"[bold]Terminal audit[/]: {verdict}")
    table = Table("counter", "value", show_header=False, box=None, padding=(0, 2))
    for name, value in audit.counters().items():
        table.add_row(name, f"[red]{value}[/]" if value else "0")
    console.print(table)
    for blocker in audit.blockers:
        console.print(
            f"  [red]blocker[/] {blocker.kind.value} {safe(blocker.subject)}: {safe(blocker.text)}"
        )


def render_goal_list(goals: Sequence[tuple[GoalState, TerminalAudit]]) -> None:
    # Drawn as Rich's Table draws it (cli/fast_table.py), without a Rich object a cell.
    table = FastTable("goal", "title", "status", "todos open/total", "blockers", title="Goals")
    for state, audit in goals:
        open_count = audit.open_todos
        table.add_row(
            safe(state.goal.id),
            safe(state.goal.title),
            styled(state.goal.status.value),
            f"{open_count}/{len(state.todos)}",
            str(len(audit.blockers)),
        )
    console.print(table)


def render_verify(report: VerifyReport) -> None:
    if report.ok:
        console.print(
            f"[green]verified[/]: {report.streams_checked} streams, "
            f"{report.events_checked} events, every projection equals its fold"
        )
        return
    table = Table("stream", "kind", "seq", "detail", title="Mismatches")
    for m in report.mismatches:
        table.add_row(safe(m.stream_id), m.kind.value, str(m.seq or "-"), safe(m.detail))
    console.print(table)


def render_repair(report: RepairReport) -> None:
    for stream in report.repaired:
        console.print(f"[green]rebuilt[/] projection of {safe(stream)}")
    for m in report.unrepairable:
        console.print(
            f"[red]cannot repair[/] {safe(m.stream_id)}#{m.seq}: {m.kind.value}: {safe(m.detail)}"
        )
    render_verify(report.after)
