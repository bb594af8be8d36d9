"""``turnkeeper notify add|list|remove|test``: webhook endpoints told of what needs a person."""

from __future__ import annotations

from pathlib import Path

import typer

from turnkeeper.cli.context import JsonOption, handles_errors, open_project_store
from turnkeeper.cli.output import console, print_json, print_line, safe
from turnkeeper.errors import InvalidArgument, Unavailable

notify_app = typer.Typer(
    help=(
        "Webhooks: signed notifications when a gate opens, a session crashes or is "
        "suspended, a goal closes or a turn hangs (docs/notifications.md)."
    ),
    no_args_is_help=True,
)


@notify_app.command("add")
@handles_errors
def notify_add(
    url: str = typer.Argument(..., metavar="URL", help="Where to POST (http:// or https://)."),
    events: str | None = typer.Option(
        None,
        "--events",
        help="Comma-separated: gate_opened, session_crashed, session_suspended, goal_closed, "
        "turn_hung (default: all).",
    ),
    secret_file: Path | None = typer.Option(
        None,
        "--secret-file",
        help="Sign with the secret in this file (default: a new one, printed once).",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Name an endpoint: it is told of these events from now on, signed with its secret.

    Each notification is a JSON POST carrying an Idempotency-Key header (the same on
    every retry) and X-Turnkeeper-Signature: sha256=HMAC(secret, "<timestamp>.<body>").
    `turnkeeper run` and `turnkeeper serve` deliver them, retrying with backoff.

    Example:

    \b
        turnkeeper notify add https://hooks.example.com/tk --events gate_opened,goal_closed
    """
    from turnkeeper.notify.endpoints import add_endpoint, check_secret, parse_events

    names = parse_events(events)
    secret = None
    if secret_file is not None:
        try:
            secret = check_secret(secret_file.read_text())
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidArgument(
                f"cannot read the secret file {secret_file}: {type(error).__name__}",
                reason="unreadable_secret_file",
            ) from None
    with open_project_store() as (_, store):
        added = add_endpoint(store, url, names, secret)
    shown = added.secret.get_secret_value() if added.generated else None
    if as_json:
        print_json({"endpoint_id": added.endpoint_id, "events": list(names), "secret": shown})
        return
    print_line(f"added endpoint [bold]{added.endpoint_id}[/] for {', '.join(names)}")
    if shown is not None:
        print_line("its signing secret, shown once:")
        print(shown)


@notify_app.command("list")
@handles_errors
def notify_list(as_json: bool = JsonOption) -> None:
    """Every endpoint: its events, deliveries, and whether it is failing (never its secret).

    Example:

    \b
        turnkeeper notify list --json
    """
    from turnkeeper.notify import outbox
    from turnkeeper.notify.endpoints import endpoint_rows

    with open_project_store(reading=True) as (_, store):
        state, _ = outbox.load(store)
    rows = endpoint_rows(state)
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no endpoints yet: `turnkeeper notify add URL`")
    for row in rows:
        events = row["events"]
        assert isinstance(events, list)
        print_line(
            f"{safe(str(row['endpoint_id']))}  {safe(str(row['url']))}  "
            f"{','.join(str(e) for e in events)}  delivered {row['delivered']}, "
            f"gave up {row['gave_up']}"
        )
        failing = row["failing"]
        if isinstance(failing, dict):
            print_line(
                f"  [red]failing: {failing['failures']} in a row, last error: "
                f"{safe(str(failing['last_error']))}; "
                f"next attempt at {failing['next_attempt_at']}[/]"
            )


@notify_app.command("remove")
@handles_errors
def notify_remove(
    endpoint: str = typer.Argument(..., metavar="ENDPOINT", help="An endpoint id or prefix."),
    as_json: bool = JsonOption,
) -> None:
    """Stop notifying an endpoint (what it was not sent yet is not sent).

    Example:

    \b
        turnkeeper notify remove ep-1a2b
    """
    from turnkeeper.notify.endpoints import remove_endpoint

    with open_project_store() as (_, store):
        removed = remove_endpoint(store, endpoint)
    if as_json:
        print_json({"endpoint_id": removed, "removed": True})
        return
    print_line(f"removed endpoint {safe(removed)}")


@notify_app.command("test")
@handles_errors
def notify_test(
    endpoint: str = typer.Argument(..., metavar="ENDPOINT", help="An endpoint id or prefix."),
    as_json: bool = JsonOption,
) -> None:
    """POST a signed test notification (event "test") now; UNAVAILABLE if not taken.

    Example:

    \b
        turnkeeper notify test ep-1a2b
    """
    from turnkeeper.notify.endpoints import test_endpoint

    with open_project_store(reading=True) as (_, store):
        endpoint_id, outcome = test_endpoint(store, endpoint)
    if not outcome.ok:
        raise Unavailable(
            f"endpoint {endpoint_id} did not take the test notification: {outcome.error}",
            reason="notify_test_failed",
            details={"endpoint_id": endpoint_id, "status_code": outcome.status_code},
        )
    if as_json:
        print_json({"endpoint_id": endpoint_id, "status_code": outcome.status_code})
        return
    print_line(f"endpoint {safe(endpoint_id)} took the test notification ({outcome.status_code})")
