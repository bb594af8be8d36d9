"""Checking a refusal the way a user meets it, and writing a record an older version could
have written (shared by the bad-input tests)."""

from __future__ import annotations

from typing import Any

from tests.usage.project import UserProject
from turnkeeper.kernel.events import GoalEvent
from turnkeeper.runtime.log.streams import decide_and_append
from turnkeeper.runtime.services.goals import GOAL_CODEC, goal_stream, index_entries
from turnkeeper.store import open_store

# The README's table of exit codes.
EXIT = {"INVALID_ARGUMENT": 3, "NOT_FOUND": 4, "FAILED_PRECONDITION": 6}


def with_json(args: tuple[str | bytes, ...]) -> list[str | bytes]:
    """``--json`` goes before a ``--`` that starts a command to run."""
    if "--" in args:
        cut = args.index("--")
        return [*args[:cut], "--json", *args[cut:]]
    return [*args, "--json"]


def refused(
    project: UserProject,
    *args: str | bytes,
    code: str = "INVALID_ARGUMENT",
    reason: str,
    input: bytes | None = None,
) -> dict[str, Any]:
    """``turnkeeper ARGS --json`` is refused with ``code``/``reason``, prints no traceback
    and writes nothing; returns the error body."""
    before = project.durable_digest()
    done = project.tk(*with_json(args), expect=EXIT[code], input=input)
    assert "Traceback" not in done.stderr, done.stderr
    error: dict[str, Any] = done.json()["error"]
    assert (error["code"], error["reason"]) == (code, reason), error
    assert project.durable_digest() == before, f"{args!r} wrote to the store"
    return error


def refused_plainly(project: UserProject, *args: str | bytes, reason: str) -> str:
    """The same refusal without ``--json``: a readable message on stderr, no traceback."""
    before = project.durable_digest()
    done = project.tk(*args, expect=EXIT["INVALID_ARGUMENT"])
    assert "Traceback" not in done.stderr, done.stderr
    assert f"INVALID_ARGUMENT ({reason})" in done.stderr, done.stderr
    assert project.durable_digest() == before
    return done.stderr


def record_as_an_older_version_did(project: UserProject, goal_id: str, event: GoalEvent) -> None:
    """Append ``event`` through the store API, past today's proposal checks: a record an
    earlier turnkeeper could have written, which must still be read and worked on."""
    store = open_store(f"sqlite:///{project.database}")
    try:
        decide_and_append(
            store, GOAL_CODEC, goal_stream(goal_id), lambda _state: [event], index=index_entries
        )
    finally:
        store.close()
