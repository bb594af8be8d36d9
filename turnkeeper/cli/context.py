"""What every command needs: the project, an open store, the goal service, error mapping."""

from __future__ import annotations

import gc
import getpass
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer

from turnkeeper.cli.arguments import read_argument, refuse_undecodable
from turnkeeper.cli.output import print_error
from turnkeeper.errors import InvalidArgument, TurnkeeperError
from turnkeeper.runtime.services.project import Project, find_project

# The store, the runtime and the kernel are imported by the functions that use them:
# building the command line (and ``--help``) must not wait for SQLAlchemy and pydantic.
if TYPE_CHECKING:
    from turnkeeper.json_types import JsonDict, JsonValue
    from turnkeeper.runtime.services.goals import GoalService
    from turnkeeper.store.base import EventStore

P = ParamSpec("P")
R = TypeVar("R")

JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON.")
# The ids a command is given, named in its usage line and in a missing-argument error.
GoalArgument = typer.Argument(..., metavar="GOAL", help="A goal id, or a unique prefix of one.")
SessionArgument = typer.Argument(
    ..., metavar="SESSION", help="A session id, or a unique prefix of one."
)
# Where a session's workspace lives, or where a worker runs: a name of the user's own
# (a machine, a shared volume). Workers drive only the sessions of their site.
SiteOption = typer.Option(
    None,
    "--site",
    envvar="TURNKEEPER_SITE",
    help="Where the workspace lives / the worker runs (default $TURNKEEPER_SITE; none: "
    "any worker without a site). Workers drive only sessions of their own site.",
)


def default_owner() -> str:
    """Who claims work from this shell: stable across invocations, overridable."""
    return os.environ.get("TURNKEEPER_OWNER") or f"{getpass.getuser()}@{socket.gethostname()}"


@contextmanager
def open_project_store(
    project: Project | None = None, *, reading: bool = False
) -> Iterator[tuple[Project, EventStore]]:
    """The project's store, open for the block.

    ``reading``: for a command that only reads. A database known to be behind its
    workspaces (their snapshots name turns the log lost) is refused as DATA_LOSS,
    as ``status``, ``verify`` and ``run`` refuse it: a read would show as the
    project's state what is no longer all of it. (``status`` and ``session list``
    check the sessions they list themselves, to list them once.)
    """
    project = project or find_project()
    from turnkeeper.store import open_store

    store = open_store(project.database_url)
    try:
        if reading:
            from turnkeeper.runtime.services.workspace_claims import check_store_not_behind

            check_store_not_behind(store)
        yield project, store
    finally:
        store.close()


@contextmanager
def open_project_store_waiting(
    wait_seconds: float, say: Callable[[str], None]
) -> Iterator[tuple[Project, EventStore]]:
    """:func:`open_project_store`, waiting up to ``wait_seconds`` for a database that is
    away (``UNAVAILABLE``) — a worker started before its database server, or while
    it restarts — and saying so before each new try."""
    import time

    from turnkeeper.errors import Unavailable
    from turnkeeper.store import open_store

    project = find_project()
    deadline = time.monotonic() + wait_seconds
    pause = 0.25
    while True:
        try:
            store = open_store(project.database_url)
            break
        except Unavailable as down:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            pause = min(pause * 2, 10.0, left)
            say(f"database unavailable ({down.message}); trying again in {pause:.1f}s")
            time.sleep(pause)
    try:
        yield project, store
    finally:
        store.close()


@contextmanager
def goal_service(*, reading: bool = False) -> Iterator[GoalService]:
    """The goal service on the project's store (``reading``: see open_project_store)."""
    from turnkeeper.runtime.services.goals import GoalService

    with open_project_store(reading=reading) as (_, store):
        yield GoalService(store)


def parse_json_arg(name: str, text: str) -> JsonValue:
    """A JSON option value, given inline, as ``@FILE`` or as ``-`` (stdin). Text that is
    not JSON, nested too deeply, not UTF-8, or a file that is missing, a directory or too
    large, is INVALID_ARGUMENT before anything is written."""
    from turnkeeper.kernel.limits import load_json

    # Decoded JSON (load_json is typed Any): a JSON value, for the caller to narrow.
    value: JsonValue = load_json(read_argument(name, text), name)
    return value


def parse_json_object(name: str, text: str) -> JsonDict:
    """:func:`parse_json_arg` for an option that must hold a JSON object."""
    data = parse_json_arg(name, text)
    if not isinstance(data, dict):
        raise InvalidArgument(
            f"{name} must be a JSON object", reason="malformed_json", details={"option": name}
        )
    return data


def handles_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Map typed errors to their exit code; with ``--json`` print them as JSON too.
    Arguments that are not UTF-8 are refused before the command runs."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            refuse_undecodable(kwargs)
            return func(*args, **kwargs)
        except TurnkeeperError as error:
            print_error(error, as_json=bool(kwargs.get("as_json")))
            raise typer.Exit(error.exit_code) from None

    return wrapper


def without_cycle_collection(func: Callable[P, R]) -> Callable[P, R]:
    """Run a short read command with the cyclic garbage collector paused.

    ``status`` and ``session list`` import SQLAlchemy, pydantic and the kernel and build a
    thousand rows: the collector ran ~200 times in such a command (~115 ms here, a tenth
    of it), walking the objects those imports made and freeing almost nothing, since
    what a listing drops is freed by its reference counts. When the command ends,
    what it made is frozen (``gc.freeze``) before collection resumes: the process exits
    next, and the interpreter's collections on the way out would walk every object the
    imports made (measured: status 1.34 s without the freeze, 1.01 s with it, at 1,000
    sessions on a slow machine). In a process that goes on (a test calling the command
    in-process) the frozen objects are never collected: the price, small for a listing.
    """

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if not gc.isenabled():  # someone else's choice: leave it
            return func(*args, **kwargs)
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            gc.freeze()
            gc.enable()

    return wrapper
