"""``turnkeeper serve``: the HTTP API on this project's store (docs/api.md)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import typer

from turnkeeper.cli.context import handles_errors
from turnkeeper.errors import InvalidArgument, Unavailable

DEFAULT_PORT = 8765


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is printed: the port printed (also
    for ``--port 0``, any free port) is the one that answers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # TCP named, not left to the default (0): asyncio turns off Nagle's algorithm on each
    # connection only for a socket that says it is TCP, and without that every answer
    # written in two parts (headers, body) waited ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Unavailable(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", reason="cannot_listen"
        ) from None
    sock.listen(128)
    return sock


def _admin_token(token_file: Path | None) -> tuple[str, bool]:
    """The admin token and whether it was generated here (then it is printed once)."""
    from turnkeeper.cli.arguments import read_argument
    from turnkeeper.runtime.services.access import ADMIN_TOKEN_PREFIX, check_token_text, new_token

    if token_file is None:
        return new_token(ADMIN_TOKEN_PREFIX), True
    return check_token_text(read_argument("--token-file", f"@{token_file}")), False


@handles_errors
def serve(
    host: str = typer.Option(
        "127.0.0.1", help="The address to listen on (default: loopback only)."
    ),
    port: int = typer.Option(DEFAULT_PORT, min=0, max=65535, help="The port (0: any free one)."),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help="Read the admin token from this file (default: make a new one and print it "
        "once). Only its sha256 is stored.",
    ),
    json_logs: bool = typer.Option(False, "--json-logs", help="Log one JSON object per line."),
) -> None:
    """Serve the HTTP API (goals, sessions, turns, operations, live events, /metrics).

    Every call needs a bearer token: the admin token printed at start (or read from
    --token-file), or a share made with `turnkeeper share create`. A new start without
    --token-file makes a new admin token, and the previous one stops working; a start
    that cannot listen (the port is taken) changes no token.

    Example:

    \b
        turnkeeper serve --port 8765 --token-file ~/.config/turnkeeper/token
    """
    from turnkeeper.extras import needs_extra
    from turnkeeper.runtime.services.access import AccessService
    from turnkeeper.runtime.services.project import find_project
    from turnkeeper.store import open_store
    from turnkeeper.store.sql import display_url

    # Before anything else: without the server's packages nothing is bound or recorded.
    with needs_extra("server", "turnkeeper serve"):
        import uvicorn

        from turnkeeper.api import logs
        from turnkeeper.server.app import create_app

    if not host.strip():
        raise InvalidArgument("--host must not be empty", reason="empty_host")
    project = find_project()
    token, generated = _admin_token(token_file)
    # The port first, the token after: a second start that cannot listen (the port is
    # a live server's) must leave that server's admin token, and the web logins made
    # with it, working. Recording the token replaces the live one.
    sock = _bind(host, port)
    try:
        store = open_store(project.database_url)
    except BaseException:
        sock.close()
        raise
    try:
        AccessService(store).set_admin_token(token)
        app = create_app(store, project.root)
        shown_host = f"[{host}]" if ":" in host else host
        base = f"http://{shown_host}:{sock.getsockname()[1]}"
        out = sys.stdout
        out.write(f"serving {project.root} ({display_url(project.database_url)}) on {base}\n")
        if generated:
            out.write(f"admin token (shown once): {token}\n")
            out.write(f"login: {base}/?token={token}\n")
        else:
            out.write(f"admin token: the one in {token_file}\n")
        out.flush()
        logs.configure(json_logs)
        # Live event streams never end by themselves: a stop waits for them 5 s at most.
        config = uvicorn.Config(
            app, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=5
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        store.close()
