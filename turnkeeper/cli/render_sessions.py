"""Rich renderings of sessions, their turn in flight and their recovery reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Column, Table

from turnkeeper.cli.fast_table import FastTable
from turnkeeper.cli.output import TURN_ID_WIDTH, console, print_line, safe
from turnkeeper.runtime.control.controller_view import state_controller, summary_controller

# Types only: a session listing is printed without importing the session kernel.
if TYPE_CHECKING:
    from turnkeeper.kernel.session import SessionState
    from turnkeeper.kernel.session.records import SnapshotRef
    from turnkeeper.kernel.session.report import RecoveryReport
    from turnkeeper.runtime.services.session_listing import SessionSummary
    from turnkeeper.runtime.services.snapshot_listing import SnapshotRow

_STATUS = {
    "ready": "yellow",
    "running": "cyan",
    "suspended": "dim",
    "crashed": "red",
    "closed": "green",
    "deleted": "dim",
}


def _status(value: str) -> str:
    return f"[{_STATUS.get(value, 'white')}]{safe(value)}[/]"


def render_session(state: SessionState) -> None:
    # Ids, paths, handles and reasons come from users, hosts and the database: ``safe``.
    why = f" ({safe(state.status_reason)})" if state.status_reason else ""
    console.print(f"[bold]session {safe(state.session_id)}[/]  {_status(state.status)}{why}")
    console.print(
        f"  goal {safe(state.goal_id)}  host {safe(state.host_kind)}  generation {state.generation}"
    )
    site = f"  (site {safe(state.site)}: only its workers drive it)" if state.site else ""
    print_line(f"  workspace {safe(state.workspace)}{site}")
    if not state.snapshots:
        console.print("  snapshots [yellow]off[/] (created with --no-snapshots): no revert")
    console.print(f"  host session handle {safe(state.host_session_handle or '-')}")
    lease = state.lease
    console.print(
        f"  lease {safe(lease.owner or '-')} epoch {lease.epoch} until {lease.expires_at or '-'}"
    )
    controller = state_controller(state)
    if controller is not None:
        colour = (
            "red" if controller.alive is False else "yellow" if controller.alive is None else ""
        )
        said = safe(controller.words())
        console.print(f"  [{colour}]{said}[/]" if colour else f"  {said}")
    c = state.counters
    console.print(
        f"  turns: {c.turns_accepted} accepted, {c.turns_completed} completed, "
        f"{c.turns_failed} failed, {c.turns_lost} lost, {c.turns_recovered} recovered"
    )
    if state.turns_without_progress or state.consecutive_host_failures or state.consecutive_lost:
        hangs = f" ({state.consecutive_hangs} hung)" if state.consecutive_hangs else ""
        lost = f", {state.consecutive_lost} lost in a row" if state.consecutive_lost else ""
        console.print(
            f"  streaks: {state.turns_without_progress} turns without progress "
            f"({state.replans_without_progress} replans), "
            f"{state.consecutive_host_failures} host failures in a row{hangs}{lost}"
        )
    if state.in_flight is not None:
        env = state.in_flight.envelope
        console.print(
            f"  [cyan]in flight[/]: {safe(env.turn_id)} ({env.kind}, attempt {env.attempt}) "
            f"phase {state.in_flight.phase}"
        )
    if state.recovery is not None:
        r = state.recovery
        console.print(
            f"  [yellow]pending recovery[/]: turn {safe(r.turn_id)} {safe(r.cause)} "
            f"({safe(r.status)})"
        )
    if state.last_completed is not None:
        snap = state.last_completed.snapshot
        label = "last snapshot" if state.snapshots else "last completed turn (no snapshot)"
        print_line(
            f"  {label}: turn {safe(state.last_completed.turn_id)}, "
            f"kernel seq {snap.kernel_seq}, {content_label(snap)}"
        )
        if snap.snapshot_failed:
            console.print(f"  [red]no snapshot of that turn[/]: {safe(snap.snapshot_failed)}")
    if state.latest_recovery_report is not None:
        render_recovery_report(state.latest_recovery_report)


def render_recovery_report(report: RecoveryReport) -> None:
    console.print(f"[bold]Recovery report[/] ({report.finished_at:%Y-%m-%d %H:%M:%S})")
    replayed = report.replayed
    console.print(
        f"  replayed from the log: goal {safe(replayed.goal_id)}, "
        f"{len(replayed.todo_lineage)} todos, {len(replayed.gate_resolutions)} gate resolutions, "
        f"receipts {safe(list(replayed.receipts))}"
    )
    probed = report.probed
    procs = ", ".join(
        f"pid {p.process.pid} {'alive' if p.alive else 'gone'}" for p in probed.host_processes
    )
    console.print(
        f"  probed again: workspace at {safe((probed.workspace_revision or '-')[:12])} "
        f"({safe(probed.dirty_diff_summary or 'clean')}); "
        f"host processes: {procs or 'none recorded'}; due monitors: {len(probed.due_monitors)}"
    )
    for action in report.actions:
        pids = f" pids {list(action.pids)}" if action.pids else ""
        turn = f" turn {safe(action.turn_id)}" if action.turn_id else ""
        console.print(f"  did: [bold]{safe(action.kind)}[/]{turn}{pids} {safe(action.detail)}")


def _gone(summary: SessionSummary) -> str:
    """A listing's word on a controller that is not known to run (a live one: nothing)."""
    controller = summary_controller(summary)
    if controller is None or controller.alive:
        return ""
    return f" [red]{safe(controller.words())}[/]"


def render_session_list(states: Sequence[SessionSummary]) -> None:
    # A thousand sessions are a thousand rows: FastTable draws what Table would, faster.
    # On a narrow terminal the status's reason and the turn in flight are folded onto
    # more lines rather than cut short: they are what a user looks at the table for.
    table = FastTable(
        "session",
        "goal",
        "host",
        Column("status", overflow="fold"),
        "turns",
        "lost",
        "failed",
        Column("in flight", overflow="fold"),
        title="Sessions",
    )
    for s in states:
        table.add_row(
            safe(s.session_id[:8]),
            safe(s.goal_id),
            safe(s.host_kind),
            _status(s.status)
            + (f" ({safe(s.status_reason)})" if s.status_reason else "")
            + _gone(s),
            str(s.counters.get("turns_completed", 0)),
            str(s.counters.get("turns_lost", 0)),
            str(s.counters.get("turns_failed", 0)),
            safe(s.in_flight_turn_id) if s.in_flight_turn_id is not None else "-",
        )
    console.print(table)


def content_label(snap: SnapshotRef) -> str:
    """What a snapshot holds, so two turns on the same commit can be told apart: its
    own commit and tree (the worktree's content), and the HEAD it was taken on."""
    head = safe((snap.workspace_revision or "-")[:12])
    if snap.workspace_commit is None:
        return f"revision {head}"
    return (
        f"snapshot {safe(snap.workspace_commit[:12])} "
        f"(tree {safe((snap.workspace_tree or '-')[:12])}, on HEAD {head})"
    )


def render_snapshots(session_id: str, rows: Sequence[SnapshotRow]) -> None:
    # The ids people copy (turn, commit, artifact digest) are never cut: on 80 columns
    # the time wraps at its space instead. The tree is in --json (the commit names it).
    table = Table(title=f"snapshots of session {safe(session_id)}")
    table.add_column("turn", no_wrap=True, min_width=TURN_ID_WIDTH)
    table.add_column("completed")
    table.add_column("commit", no_wrap=True, min_width=12)
    table.add_column("artifact", no_wrap=True)
    table.add_column("kept")
    for row in rows:
        snap = row.snapshot
        commit = snap.workspace_commit or "-"
        digest = snap.host_artifact_digest or "-"
        table.add_row(
            safe(row.turn_id),
            safe(f"{row.completed_at:%Y-%m-%d %H:%M:%S}"),
            safe(commit[:12]),
            safe(digest[:12]),
            safe(row.kept or ("yes" if row.retained else "pruned")),
        )
    console.print(table)
    for row in rows:
        if row.snapshot.snapshot_failed:
            console.print(
                f"  [red]turn {safe(row.turn_id)}[/]: {safe(row.snapshot.snapshot_failed)}"
            )
