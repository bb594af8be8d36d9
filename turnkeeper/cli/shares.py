"""``turnkeeper share create|list|revoke``: tokens that reach one session over HTTP."""

from __future__ import annotations

import typer

from turnkeeper.cli.context import JsonOption, handles_errors, open_project_store
from turnkeeper.cli.output import console, print_json, print_line, safe
from turnkeeper.errors import InvalidArgument

share_app = typer.Typer(
    help="Shares: bearer tokens for `turnkeeper serve` that reach one session and its turns.",
    no_args_is_help=True,
)


@share_app.command("create")
@handles_errors
def share_create(
    session_id: str = typer.Argument(..., metavar="SESSION", help="A session id or prefix."),
    read_only: bool = typer.Option(False, "--read-only", help="Read the session, change nothing."),
    update: bool = typer.Option(
        False, "--update", help="Also stop, resume, crash, revert and recover it (not delete)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Share one session: prints a token, once (only its sha256 is stored).

    Example:

    \b
        TOKEN=$(turnkeeper share create 3f2a --read-only --json | jq -r .token)
    """
    from turnkeeper.runtime.services.access import AccessService, share_json

    if read_only == update:
        raise InvalidArgument(
            "give exactly one of --read-only and --update", reason="share_mode_required"
        )
    with open_project_store() as (_, store):
        made = AccessService(store).create_share(session_id, "update" if update else "read")
    if as_json:
        print_json({**share_json(made.share), "token": made.token})
        return
    share = made.share
    print_line(
        f"shared session [bold]{share.session_id}[/] ({share.mode}) as {share.share_id}; "
        "the token, shown once:"
    )
    print(made.token)


@share_app.command("list")
@handles_errors
def share_list(as_json: bool = JsonOption) -> None:
    """Every share, revoked ones too (tokens are never shown again).

    Example:

    \b
        turnkeeper share list --json
    """
    from turnkeeper.runtime.services.access import AccessService, share_json

    with open_project_store() as (_, store):
        shares = AccessService(store).list_shares()
    if as_json:
        print_json([share_json(s) for s in shares])
        return
    if not shares:
        console.print("no shares yet: `turnkeeper share create SESSION --read-only`")
    for share in shares:
        state = f"revoked {share.revoked_at:%Y-%m-%d %H:%M}" if share.revoked_at else "active"
        print_line(  # one share a line, for people and for grep alike
            f"{safe(share.share_id)}  {share.session_id}  {share.mode:<6}  "
            f"created {share.created_at:%Y-%m-%d %H:%M}  {state}"
        )


@share_app.command("revoke")
@handles_errors
def share_revoke(
    share_id: str = typer.Argument(..., metavar="SHARE", help="The share's id (share list)."),
    as_json: bool = JsonOption,
) -> None:
    """Revoke a share: its token stops working at once.

    Example:

    \b
        turnkeeper share revoke share-1a2b3c4d5e6f
    """
    from turnkeeper.runtime.services.access import AccessService, share_json

    with open_project_store() as (_, store):
        share = AccessService(store).revoke_share(share_id)
    if as_json:
        print_json(share_json(share))
    else:
        console.print(f"revoked {safe(share.share_id)}")
