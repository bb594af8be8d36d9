"""Rich renderings of a session's turns (``turn list``, ``turn show``) and one line of
text for any host event (``logs``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from rich import box
from rich.table import Table

from turnkeeper.cli.output import console, safe
from turnkeeper.runtime.turn.run_progress import duration, message_text

# The most of an event's data a line shows.
MAX_EVENT_TEXT: Final = 300
MAX_REASON_IN_LIST: Final = 60
# Columns from which ``turn list`` has room for a reason column.
WIDE_SCREEN: Final = 140
_OUTCOME: Final = {
    "completed": "green",
    "failed": "red",
    "lost": "red",
    "abandoned": "yellow",
    "in_flight": "cyan",
}
# For kinds without words of their own: the fields that say what happened.
_TELLING_FIELDS: Final = ("message", "summary", "command", "path", "handle", "name")


def event_text(kind: str, data: Mapping[str, Any]) -> str:
    """What an event says, in one line: the agent's words, an error, a command..."""
    said = message_text(kind, data)
    if said is not None:
        return " ".join(said.split())
    telling = [f"{data[k]}" for k in _TELLING_FIELDS if isinstance(data.get(k), str | int)]
    if "exit_code" in data and telling:
        telling.append(f"(exit {data['exit_code']})")
    text = " ".join(telling) if telling else json.dumps(data, sort_keys=True, default=str)
    text = " ".join(text.split())
    return text if len(text) <= MAX_EVENT_TEXT else text[: MAX_EVENT_TEXT - 1] + "…"


def _outcome(value: str) -> str:
    return f"[{_OUTCOME.get(value, 'white')}]{safe(value)}[/]"


def _short(reason: str | None, width: int) -> str:
    if not reason:
        return "-"
    line = " ".join(reason.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def render_turn_list(session_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
    # A session holds tens or hundreds of turns, not thousands of rows: Rich's own
    # Table, whose columns can keep a turn id whole and give the reason what is left.
    table = Table(
        title=f"Turns of session {safe(session_id)}",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
    )
    table.add_column("turn", no_wrap=True, min_width=len("turn-") + 16)
    for name in ("#", "kind", "todo", "outcome", "started", "elapsed", "events"):
        table.add_column(name, no_wrap=True, min_width=len(name))
    # A reason needs room: beside the row on a wide screen, under the table otherwise.
    beside = console.width >= WIDE_SCREEN
    if beside:
        table.add_column("reason", no_wrap=True, overflow="ellipsis")
    for row in rows:
        kind = row["kind"] if row["attempt"] == 1 else f"{row['kind']} #{row['attempt']}"
        started = datetime.fromisoformat(row["started_at"]).astimezone()
        table.add_row(
            safe(row["turn_id"]),
            str(row["number"]),
            safe(kind),
            safe(row["todo_id"] or "-"),
            _outcome(row["outcome"]),
            started.strftime("%H:%M:%S"),
            duration(row["elapsed_seconds"]),
            str(row["host_events"]),
            *([safe(_short(row["reason"], MAX_REASON_IN_LIST))] if beside else []),
        )
    console.print(table)
    if not rows:
        console.print("  no turns yet")
    for row in rows if not beside else ():
        if row["reason"]:
            room = console.width - len(row["turn_id"]) - len(row["outcome"]) - 6
            why = _short(row["reason"], max(20, room))
            console.print(f"  {safe(row['turn_id'])} [red]{safe(row['outcome'])}[/]: {safe(why)}")


def render_turn(detail: Mapping[str, Any], *, total_events: int) -> None:
    env = detail["envelope"]
    console.print(
        f"[bold]turn {safe(detail['turn_id'])}[/]  #{detail['number']}  "
        f"{safe(env['kind'])} (attempt {env['attempt']})  {_outcome(detail['outcome'])}"
    )
    console.print(
        f"  session {safe(env['session_id'])}  goal {safe(env['goal_id'])}  "
        f"todo {safe(env['todo_id'] or '-')}  generation {env['generation']}"
    )
    host = detail["host"]
    if host["kind"] is not None:
        console.print(f"  host {safe(host['kind'])} pid {host['pid']}")
    if env.get("recovers_turn_id"):
        console.print(f"  recovers turn {safe(env['recovers_turn_id'])}")
    if detail["reason"]:
        kind = detail["error_kind"] or detail["outcome"]
        console.print(f"  [red]why[/]: {safe(kind)}: {safe(detail['reason'], lines=True)}")
    console.print("[bold]Steps[/]")
    started = detail["started_at"]
    for step in detail["phases"]:
        at = step["at"]
        console.print(f"  {safe(step['phase']):<13} {safe(at[:23])}{_since(started, at)}")
    console.print("[bold]Instructions sent[/]")
    console.print(_indented(env["instructions"]))
    if env.get("reconcile_note"):
        console.print(_indented(env["reconcile_note"]))
    _render_receipt(detail["receipt"])
    _render_events(detail["events"], total_events)
    if detail["written_back"]:
        wb = detail["written_back"]
        console.print(
            f"[bold]Written back[/]: {len(wb.get('accepted', ()))} accepted, "
            f"{len(wb.get('rejected', ()))} rejected, progress {wb.get('progress')}"
        )
        for rejected in wb.get("rejected", ()):
            console.print(
                f"  rejected {safe(rejected['proposal_id'])}: {safe(rejected.get('reason', ''))}"
            )
    if detail["effects"]:
        console.print("[bold]Effects[/]")
        for effect in detail["effects"]:
            console.print(f"  {safe(_effect_line(effect))}")
    snap = detail["snapshot"]
    if snap is not None:
        commit = (snap.get("workspace_commit") or "-")[:12]
        console.print(
            f"[bold]Snapshot[/]: {safe(snap.get('snapshot_ref') or '-')} commit {safe(commit)}"
        )
        if snap.get("snapshot_failed"):
            console.print(f"  [red]no snapshot[/]: {safe(snap['snapshot_failed'])}")


def _since(started: str, at: str) -> str:
    seconds = (datetime.fromisoformat(at) - datetime.fromisoformat(started)).total_seconds()
    return f"  (+{seconds:.1f}s)" if seconds > 0 else ""


def _indented(text: str) -> str:
    return "\n".join(f"  {safe(line)}" for line in text.splitlines() or [""])


def _render_receipt(receipt: Mapping[str, Any] | None) -> None:
    if receipt is None:
        console.print("[bold]Receipt[/]: none yet")
        return
    if receipt.get("outcome") == "failure":
        console.print(
            f"[bold]Receipt[/]: [red]failure[/] in {safe(receipt.get('failed_phase'))}: "
            f"{safe(receipt.get('error_kind'))}, exit code {_or_dash(receipt.get('exit_code'))}, "
            f"signal {_or_dash(receipt.get('signal'))}"
        )
        console.print(_indented(str(receipt.get("message") or "(no message)")))
        return
    result = receipt.get("result") or {}
    console.print("[bold]Receipt[/]: [green]success[/]")
    console.print(_indented(json.dumps(result, indent=2, sort_keys=True)))


def _or_dash(value: object) -> str:
    return "-" if value is None else safe(value)


def _render_events(events: Sequence[Mapping[str, Any]], total: int) -> None:
    which = f"the last {len(events)} of {total}" if len(events) < total else f"all {total}"
    console.print(f"[bold]Host events[/] ({which})")
    for event in events:
        at = str(event["at"])[11:19]
        text = event_text(event["kind"], event["data"])
        console.print(f"  {safe(at)} #{event['seq']:<4} {safe(event['kind']):<16} {safe(text)}")


def _effect_line(effect: Mapping[str, Any]) -> str:
    kind = str(effect.get("type", "")).removeprefix("turn.")
    parts = [kind, str(effect.get("effect_id", ""))]
    for key in ("provider", "outcome", "reason", "detail"):
        if effect.get(key):
            parts.append(f"{key} {effect[key]}")
    return " ".join(p for p in parts if p)
