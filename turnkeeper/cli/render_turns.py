"""Rich renderings of a session's turns (``turn list``, ``turn show``) and one line of
text for any host event (``logs``).

They read the turns as ``runtime/services/turn_listing.py`` folds them (``TurnInfo``),
not their JSON: what ``--json`` prints is the same fold dumped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final

from rich import box
from rich.table import Table

from turnkeeper.cli.output import TURN_ID_WIDTH, console, print_line, safe
from turnkeeper.kernel.session import events as ev
from turnkeeper.runtime.turn.run_progress import duration, message_text

if TYPE_CHECKING:
    from turnkeeper.json_types import JsonMapping
    from turnkeeper.kernel.session.records import ReceiptFailure, ReceiptSuccess
    from turnkeeper.runtime.services.turn_listing import EffectEvent, JournaledEvent, TurnInfo

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


def event_text(kind: str, data: JsonMapping) -> str:
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


def render_turn_list(session_id: str, turns: Sequence[TurnInfo], now: datetime) -> None:
    # A session holds tens or hundreds of turns, not thousands of rows: Rich's own
    # Table, whose columns can keep a turn id whole and give the reason what is left.
    table = Table(
        title=f"Turns of session {safe(session_id)}",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
    )
    table.add_column("turn", no_wrap=True, min_width=TURN_ID_WIDTH)
    for name in ("#", "kind", "todo", "outcome", "started", "elapsed", "events"):
        table.add_column(name, no_wrap=True, min_width=len(name))
    # A reason needs room: beside the row on a wide screen, under the table otherwise.
    beside = console.width >= WIDE_SCREEN
    if beside:
        table.add_column("reason", no_wrap=True, overflow="ellipsis")
    for turn in turns:
        env = turn.envelope
        kind = env.kind if env.attempt == 1 else f"{env.kind} #{env.attempt}"
        table.add_row(
            safe(turn.turn_id),
            str(turn.number),
            safe(kind),
            safe(env.todo_id or "-"),
            _outcome(turn.outcome),
            turn.started.astimezone().strftime("%H:%M:%S"),
            # Rounded as ``--json`` rounds it.
            duration(round(turn.elapsed_seconds(now), 3)),
            str(turn.host_events),
            *([safe(_short(turn.reason, MAX_REASON_IN_LIST))] if beside else []),
        )
    console.print(table)
    if not turns:
        console.print("  no turns yet")
    for turn in turns if not beside else ():
        if turn.reason:
            room = console.width - len(turn.turn_id) - len(turn.outcome) - 6
            why = _short(turn.reason, max(20, room))
            console.print(f"  {safe(turn.turn_id)} [red]{safe(turn.outcome)}[/]: {safe(why)}")


def render_turn(turn: TurnInfo, *, last_events: int | None) -> None:
    """``turn show``: ``last_events`` as ``TurnInfo.shown_events`` takes it."""
    env = turn.envelope
    console.print(
        f"[bold]turn {safe(turn.turn_id)}[/]  #{turn.number}  "
        f"{safe(env.kind)} (attempt {env.attempt})  {_outcome(turn.outcome)}"
    )
    print_line(
        f"  session {safe(env.session_id)}  goal {safe(env.goal_id)}  "
        f"todo {safe(env.todo_id or '-')}  generation {env.generation}"
    )
    if turn.host_kind is not None:
        console.print(f"  host {safe(turn.host_kind)} pid {turn.host_pid}")
    if env.recovers_turn_id:
        console.print(f"  recovers turn {safe(env.recovers_turn_id)}")
    if turn.reason:
        kind = turn.error_kind or turn.outcome
        console.print(f"  [red]why[/]: {safe(kind)}: {safe(turn.reason, lines=True)}")
    console.print("[bold]Steps[/]")
    for phase, at in turn.phases.items():
        console.print(f"  {safe(phase):<13} {safe(at.isoformat()[:23])}{_since(turn.started, at)}")
    console.print("[bold]Instructions sent[/]")
    console.print(_indented(env.instructions))
    if env.reconcile_note:
        console.print(_indented(env.reconcile_note))
    _render_receipt(turn.receipt)
    _render_events(turn.shown_events(last_events), turn.host_events)
    wb = turn.written_back
    if wb is not None:
        console.print(
            f"[bold]Written back[/]: {len(wb.accepted)} accepted, "
            f"{len(wb.rejected)} rejected, progress {wb.progress}"
        )
        for rejected in wb.rejected:
            console.print(f"  rejected {safe(rejected.proposal_id)}: {safe(rejected.reason)}")
    if turn.effects:
        console.print("[bold]Effects[/]")
        for effect in turn.effects:
            console.print(f"  {safe(_effect_line(effect))}")
    snap = turn.snapshot
    if snap is not None:
        commit = (snap.workspace_commit or "-")[:12]
        print_line(f"[bold]Snapshot[/]: {safe(snap.snapshot_ref or '-')} commit {safe(commit)}")
        if snap.snapshot_failed:
            console.print(f"  [red]no snapshot[/]: {safe(snap.snapshot_failed)}")


def _since(started: datetime, at: datetime) -> str:
    seconds = (at - started).total_seconds()
    return f"  (+{seconds:.1f}s)" if seconds > 0 else ""


def _indented(text: str) -> str:
    return "\n".join(f"  {safe(line)}" for line in text.splitlines() or [""])


def _render_receipt(receipt: ReceiptSuccess | ReceiptFailure | None) -> None:
    if receipt is None:
        console.print("[bold]Receipt[/]: none yet")
        return
    if receipt.outcome == "failure":
        console.print(
            f"[bold]Receipt[/]: [red]failure[/] in {safe(receipt.failed_phase)}: "
            f"{safe(receipt.error_kind)}, exit code {_or_dash(receipt.exit_code)}, "
            f"signal {_or_dash(receipt.signal)}"
        )
        console.print(_indented(receipt.message or "(no message)"))
        return
    console.print("[bold]Receipt[/]: [green]success[/]")
    console.print(_indented(json.dumps(receipt.result, indent=2, sort_keys=True)))


def _or_dash(value: object) -> str:
    return "-" if value is None else safe(value)


def _render_events(events: Sequence[JournaledEvent], total: int) -> None:
    which = f"the last {len(events)} of {total}" if len(events) < total else f"all {total}"
    console.print(f"[bold]Host events[/] ({which})")
    for event in events:
        at = event.at.isoformat()[11:19]
        text = event_text(event.kind, event.data)
        console.print(f"  {safe(at)} #{event.seq:<4} {safe(event.kind):<16} {safe(text)}")


def _effect_line(effect: EffectEvent) -> str:
    # The fields that say what became of the effect, as each kind of record has them.
    told: dict[str, str] = {}
    if isinstance(effect, ev.EffectIntended):
        told = {"provider": effect.provider}
    elif isinstance(effect, ev.EffectResolved):
        told = {"outcome": effect.outcome}
    elif isinstance(effect, ev.EffectRejected):
        told = {"provider": effect.provider, "reason": effect.reason, "detail": effect.detail}
    effect_id = "" if isinstance(effect, ev.EffectsRecorded) else effect.effect_id
    parts = [effect.type.removeprefix("turn."), effect_id]
    for key, value in told.items():
        if value:
            parts.append(f"{key} {value}")
    return " ".join(p for p in parts if p)
