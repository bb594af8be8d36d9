"""Rich renderings of sessions, their turn in flight and their recovery reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from turnkeeper.cli.output import console
from turnkeeper.kernel.session import SessionState
from turnkeeper.kernel.session.report import RecoveryReport

_STATUS = {
    "ready": "yellow",
    "running": "cyan",
    "suspended": "dim",
    "crashed": "red",
    "closed": "green",
    "deleted": "dim",
}


def _status(value: str) -> str:
    return f"[{_STATUS.get(value, 'white')}]{value}[/]"


def render_session(state: SessionState) -> None:
    console.print(f"[bold]session {state.session_id}[/]  {_status(state.status)}")
    console.print(f"  goal {state.goal_id}  host {state.host_kind}  generation {state.generation}")
    console.print(f"  workspace {state.workspace}")
    console.print(f"  host session handle {state.host_session_handle or '-'}")
    lease = state.lease
    console.print(
        f"  lease {lease.owner or '-'} epoch {lease.epoch} until {lease.expires_at or '-'}"
    )
    c = state.counters
    console.print(
        f"  turns: {c.turns_accepted} accepted, {c.turns_completed} completed, "
        f"{c.turns_failed} failed, {c.turns_lost} lost, {c.turns_recovered} recovered"
    )
    if state.in_flight is not None:
        env = state.in_flight.envelope
        console.print(
            f"  [cyan]in flight[/]: {env.turn_id} ({env.kind}, attempt {env.attempt}) "
            f"phase {state.in_flight.phase}"
        )
    if state.recovery is not None:
        r = state.recovery
        console.print(f"  [yellow]pending recovery[/]: turn {r.turn_id} {r.cause} ({r.status})")
    if state.last_completed is not None:
        snap = state.last_completed.snapshot
        console.print(
            f"  last snapshot: turn {state.last_completed.turn_id}, kernel seq {snap.kernel_seq}, "
            f"revision {(snap.workspace_revision or '-')[:12]}"
        )
    if state.latest_recovery_report is not None:
        render_recovery_report(state.latest_recovery_report)


def render_recovery_report(report: RecoveryReport) -> None:
    console.print(f"[bold]Recovery report[/] ({report.finished_at:%Y-%m-%d %H:%M:%S})")
    replayed = report.replayed
    console.print(
        f"  replayed from the log: goal {replayed.goal_id}, {len(replayed.todo_lineage)} todos, "
        f"{len(replayed.gate_resolutions)} gate resolutions, receipts {list(replayed.receipts)}"
    )
    probed = report.probed
    procs = ", ".join(
        f"pid {p.process.pid} {'alive' if p.alive else 'gone'}" for p in probed.host_processes
    )
    console.print(
        f"  probed again: workspace at {(probed.workspace_revision or '-')[:12]} "
        f"({probed.dirty_diff_summary or 'clean'}); host processes: {procs or 'none recorded'}; "
        f"due monitors: {len(probed.due_monitors)}"
    )
    for action in report.actions:
        pids = f" pids {list(action.pids)}" if action.pids else ""
        turn = f" turn {action.turn_id}" if action.turn_id else ""
        console.print(f"  did: [bold]{action.kind}[/]{turn}{pids} {action.detail}")


def render_session_list(states: Sequence[SessionState]) -> None:
    table = Table(
        "session",
        "goal",
        "host",
        "status",
        "turns",
        "lost",
        "failed",
        "in flight",
        title="Sessions",
    )
    for s in states:
        table.add_row(
            s.session_id[:8],
            s.goal_id,
            s.host_kind,
            _status(s.status),
            str(s.counters.turns_completed),
            str(s.counters.turns_lost),
            str(s.counters.turns_failed),
            s.in_flight.envelope.turn_id if s.in_flight else "-",
        )
    console.print(table)


def render_snapshots(session_id: str, rows: Sequence[dict[str, Any]]) -> None:
    table = Table(title=f"snapshots of session {session_id}")
    for column in ("turn", "completed", "commit", "tree", "artifact", "kept"):
        table.add_column(column)
    for row in rows:
        commit = row.get("workspace_commit") or "-"
        tree = row.get("workspace_tree") or "-"
        digest = row.get("host_artifact_digest") or "-"
        table.add_row(
            str(row["turn_id"]),
            str(row["completed_at"])[:19],
            commit[:12],
            tree[:12],
            digest[:12],
            "yes" if row["retained"] else "pruned",
        )
    console.print(table)
