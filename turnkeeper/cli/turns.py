"""``turnkeeper turn list|show`` and ``turnkeeper logs``: what a session's turns did.

Everything is read back from the log: a turn's steps with their times, its receipt
(with the full error of a failed one), the host events journaled for it (within a
second of the host printing them), its effects and its snapshot.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import typer

from turnkeeper.cli.context import JsonOption, SessionArgument, handles_errors, open_project_store
from turnkeeper.cli.output import print_json

# The runtime is imported by the commands that use it, so that parsing a command line
# (and ``--help``) does not wait for it.
if TYPE_CHECKING:
    from turnkeeper.runtime.services.turn_listing import JournaledEvent
    from turnkeeper.store.base import EventStore

turn_app = typer.Typer(
    help="Turns: what each turn of a session was asked, did and ended with.",
    no_args_is_help=True,
)

# How often ``logs -f`` looks for new events (they reach the log within a second).
FOLLOW_INTERVAL_SECONDS: Final = 0.25
DEFAULT_EVENTS_SHOWN: Final = 20


@turn_app.command("list")
@handles_errors
def turn_list(session_id: str = SessionArgument, as_json: bool = JsonOption) -> None:
    """A session's turns, oldest first: kind, todo, outcome, time, host events, reason.

    Example:

    \b
        turnkeeper turn list 3f2a
    """
    from turnkeeper.runtime.services.sessions import SessionService
    from turnkeeper.runtime.services.turn_listing import list_turns

    with open_project_store(reading=True) as (_, store):
        sessions = SessionService(store)
        sid = sessions.resolve_id(session_id)
        turns = list_turns(store, sid)
        now = sessions.now()
    if as_json:
        print_json({"session_id": sid, "turns": [t.summary_json(now) for t in turns]})
        return
    from turnkeeper.cli.render_turns import render_turn_list

    render_turn_list(sid, turns, now)


@turn_app.command("show")
@handles_errors
def turn_show(
    turn_id: str = typer.Argument(
        ..., metavar="TURN", help="A turn id, or a unique prefix of one."
    ),
    events: int = typer.Option(
        DEFAULT_EVENTS_SHOWN,
        "--events",
        min=0,
        max=1_000_000,
        help="Host events shown: the last N.",
    ),
    as_json: bool = JsonOption,
) -> None:
    """One turn: envelope, instructions, steps, receipt, host events, effects, snapshot.

    The steps carry their times and the receipt the full error of a failed turn. A
    unique prefix of the turn id is enough.

    Example:

    \b
        turnkeeper turn show turn-9c1e --events 50
    """
    from turnkeeper.runtime.services.sessions import SessionService
    from turnkeeper.runtime.services.turn_listing import find_turn, show_turn

    with open_project_store(reading=True) as (_, store):
        sid, tid = find_turn(store, turn_id)
        turn = show_turn(store, sid, tid)
        now = SessionService(store).now()
    if as_json:
        print_json(turn.detail_json(now, events))
        return
    from turnkeeper.cli.render_turns import render_turn

    render_turn(turn, last_events=events)


def _event_line(event: JournaledEvent) -> str:
    from turnkeeper.cli.output import visible
    from turnkeeper.cli.render_turns import event_text

    at = event.at.astimezone().strftime("%H:%M:%S")
    text = visible(event_text(event.kind, event.data))
    return f"{at}  {event.turn_id}  #{event.seq:<4} {visible(event.kind):<16} {text}"


def _still_driven(store: EventStore, sid: str) -> bool:
    """True while the session has a turn in flight or a live lease (a ``run`` drives it)."""
    from turnkeeper.runtime.services.sessions import SessionService

    state = SessionService(store).load(sid)
    if state.in_flight is not None:
        return True
    lease = state.lease
    if lease.owner is None or lease.expires_at is None:
        return False
    return lease.expires_at > datetime.now(UTC)


@handles_errors
def logs(
    session_id: str = SessionArgument,
    follow: bool = typer.Option(
        False,
        "--follow",
        "-f",
        help="Keep printing new events while the session is driven (a turn in flight or "
        "its lease held); Ctrl-C ends it.",
    ),
    turn: str | None = typer.Option(None, "--turn", help="Only this turn's events (a prefix)."),
    since: int = typer.Option(
        0,
        "--since",
        min=0,
        help="Only events journaled after this position of the session's log (the "
        "stream_seq of a line of --json).",
    ),
    as_json: bool = JsonOption,
) -> None:
    """A session's host events: time, turn, kind and text, as the agent produced them.

    With --json, one JSON object per line.

    Example:

    \b
        turnkeeper logs 3f2a -f
    """
    from turnkeeper.runtime.services.sessions import SessionService
    from turnkeeper.runtime.services.turn_listing import find_turn, journaled_events

    with open_project_store(reading=True) as (_, store):
        sid = SessionService(store).resolve_id(session_id)
        turn_id = None
        if turn is not None:
            turn_sid, turn_id = find_turn(store, turn)
            if turn_sid != sid:
                from turnkeeper.errors import InvalidArgument

                raise InvalidArgument(
                    f"turn {turn_id} belongs to session {turn_sid}, not {sid}",
                    reason="turn_of_another_session",
                    details={"turn_id": turn_id, "session_id": turn_sid},
                )
        position = since
        try:
            while True:
                # Whether to go on is read before the events: an event journaled just
                # before the session stopped being driven is still printed.
                driven = follow and _still_driven(store, sid)
                found, position = journaled_events(store, sid, after_seq=position, turn_id=turn_id)
                for event in found:
                    _print_event(event, as_json)
                if not driven:
                    return
                time.sleep(FOLLOW_INTERVAL_SECONDS)
        except KeyboardInterrupt:
            return  # Ctrl-C is how a follow ends: not an error


def _print_event(event: JournaledEvent, as_json: bool) -> None:
    line = json.dumps(event.as_json(), sort_keys=True) if as_json else _event_line(event)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
