"""Rich renderings of one goal's todos, gates and evidence, for people.

Every value shown came from a user, an agent or the database: ``safe`` shows its
control characters as escapes and its markup as typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from turnkeeper.cli.output import console, safe
from turnkeeper.cli.render import id_column, styled, tested_on, when
from turnkeeper.kernel.model import Gate, GoalState, Todo

if TYPE_CHECKING:
    from turnkeeper.runtime.services.work_views import EvidenceRow, TodoBrief, TodoDetail


def _claim(todo: Todo) -> str:
    if todo.claim is None:
        return "-"
    claim = todo.claim
    return f"{safe(claim.owner)} e{claim.epoch} until {when(claim.lease_expires_at)}"


def render_todo_list(state: GoalState, todos: Sequence[Todo]) -> None:
    if not todos:
        console.print(f"no todos in {safe(state.goal.id)} match")
        return
    table = Table(id_column("todo"), "title", "status", "claim", "depends on", "needs evidence")
    for todo in todos:
        table.add_row(
            safe(todo.id),
            safe(todo.title),
            styled(todo.status.value),
            _claim(todo),
            safe(", ".join(todo.depends_on)) or "-",
            safe(", ".join(todo.required_evidence)) or "-",
        )
    console.print(table)


def _brief(item: TodoBrief) -> str:
    return f"{safe(item['id'])} {styled(item['status'])} {safe(item['title'])}"


def render_todo(detail: TodoDetail) -> None:
    todo = detail["todo"]
    console.print(
        f"[bold]{safe(todo.title)}[/]  [dim]{safe(todo.id)}[/]  {styled(todo.status.value)}"
        f"  [dim]goal {safe(detail['goal_id'])}[/]"
    )
    # The view's claim is the todo's, as JSON with whether it is live now.
    claim, shown = todo.claim, detail["claim"]
    if claim is not None and shown is not None:
        state = "[green]live[/]" if shown["live"] else "[red]expired[/]"
        console.print(
            f"  claim: {safe(claim.owner)}, epoch [bold]{claim.epoch}[/], "
            f"until {when(claim.lease_expires_at)} ({state})"
        )
    else:
        console.print(f"  claim: none (next claim gets epoch {todo.epoch + 1})")
    if todo.blocked_reason:
        console.print(f"  blocked: {safe(todo.blocked_reason)}")
    if todo.superseded_reason:
        console.print(f"  superseded: {safe(todo.superseded_reason)}")
    for dep in detail["dependencies"]:
        mark = "[green]✓[/]" if dep["met"] else "[yellow]·[/]"
        console.print(f"  depends on {mark} {_brief(dep)}")
    for req in detail["required_evidence"]:
        if req["latest"] is None:
            console.print(f"  needs evidence {safe(req['key'])}: [yellow]none recorded[/]")
            continue
        passed = "[green]passed[/]" if req["passed"] else "[red]failed[/]"
        fresh = "fresh" if req["fresh"] else "[red]stale[/]"
        console.print(
            f"  needs evidence {safe(req['key'])}: latest {safe(req['latest'])} {passed}, {fresh}"
        )
    for ev in detail["evidence"]:
        console.print(f"  evidence {safe(ev.id)} {safe(ev.key)}: exit {ev.exit_code}")
    if detail["successor_of"] is not None:
        console.print(f"  follows {_brief(detail['successor_of'])}")
    for succ in detail["successors"]:
        console.print(f"  successor {_brief(succ)}")
    if todo.successor_required and not detail["successors"]:
        console.print("  [yellow]needs a successor[/] when finished")
    for gate in detail["blocking_gates"]:
        console.print(f"  [red]blocked by gate[/] {safe(gate['id'])}: {safe(gate['title'])}")


def render_gate_list(gates: Sequence[Gate]) -> None:
    if not gates:
        console.print("no gates match")
        return
    table = Table(id_column("gate"), "title", "blocking", "scope", "status", "resolution")
    for gate in gates:
        resolution = (
            f"{safe(gate.resolution.decision)} by {safe(gate.resolution.by)} "
            f"at {when(gate.resolution.at)}"
            if gate.resolution
            else "-"
        )
        table.add_row(
            safe(gate.id),
            safe(gate.title),
            "yes" if gate.blocking else "no",
            safe(", ".join(gate.scope)) or "whole goal",
            styled(gate.status.value),
            resolution,
        )
    console.print(table)


def render_evidence_list(rows: Sequence[EvidenceRow]) -> None:
    if not rows:
        console.print("no evidence recorded")
        return
    table = Table(
        id_column("evidence"),
        id_column("key"),
        "command",
        "exit",
        "revision / tree",
        "recorded",
        "fresh",
    )
    for row in rows:
        ev = row["evidence"]
        exit_style = "green" if row["passed"] else "red"
        fresh = "fresh" if row["fresh"] else "[red]stale[/]"
        if not row["latest"]:
            fresh += " [dim](older run)[/]"
        table.add_row(
            safe(ev.id),
            safe(ev.key),
            safe(ev.command),
            f"[{exit_style}]{ev.exit_code}[/]",
            safe(tested_on(ev)),
            when(ev.recorded_at),
            fresh,
        )
    console.print(table)
