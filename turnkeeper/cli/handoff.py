"""``turnkeeper handoff GOAL`` and ``turnkeeper adopt PACKET``: a goal carried elsewhere.

The packet format and what it leaves out: docs/handoff.md.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import typer

from turnkeeper.cli.context import JsonOption, handles_errors, open_project_store
from turnkeeper.cli.output import console, print_json, safe
from turnkeeper.cli.writes import say
from turnkeeper.errors import InvalidArgument

# The runtime, the kernel and pydantic are imported inside the commands: building the
# command line (and ``--help``) must not wait for them.

# A packet holds a goal's whole state, so it may be larger than an ``@FILE`` option.
MAX_PACKET_BYTES = 64 << 20


@handles_errors
def handoff(
    goal_id: str = typer.Argument(..., metavar="GOAL", help="A goal id, or a unique prefix."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the packet to FILE (default: standard output)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Write a handoff packet: what another agent, machine or team needs to carry
    GOAL on (ids, criteria, todos with their lineage, gates, monitors, evidence
    references, the audit's blockers), without transcripts, host session handles,
    credentials or local paths.

    Example:

    \b
        turnkeeper handoff parser -o parser.handoff.json
    """
    from turnkeeper.handoff.build import Origin, build_packet
    from turnkeeper.runtime.services.goals import GoalService
    from turnkeeper.runtime.services.sessions import SessionService
    from turnkeeper.runtime.workspaces.workspace import git_revision

    with open_project_store(reading=True) as (project, store):
        goals = GoalService(store)
        gid = goals.resolve("goal", goal_id)
        state = goals.load(gid)
        audit = goals.audit(gid)
        sessions = SessionService(store).list()
        root = project.root.resolve()
        origin = Origin(
            project_root=str(root),
            source_revision=git_revision(root),
            private_paths=(str(Path.home()),),
        )
        packet = build_packet(state, audit, sessions, origin, store.now())
    text = packet.to_json()
    if output is None:  # stdout is the packet itself (``--json`` shapes only errors)
        say(text.rstrip("\n"))
        return
    _write_atomically(output, text)
    summary = {
        "goal_id": gid,
        "output": str(output),
        "todos": len(packet.todos),
        "evidence": len(packet.evidence),
        "omitted": len(packet.omitted),
    }
    if as_json:
        print_json(summary)
    else:
        console.print(
            f"wrote the handoff packet of goal [bold]{safe(gid)}[/] to {safe(output)} "
            f"({len(packet.todos)} todos, {len(packet.evidence)} evidence references, "
            f"{len(packet.omitted)} omissions)"
        )


@handles_errors
def adopt(
    packet_file: Path = typer.Argument(..., metavar="PACKET", help="A handoff packet file."),
    as_json: bool = JsonOption,
) -> None:
    """Recreate a handed-over goal here from its packet, under the same ids.

    Handed-over evidence is recorded stale: what stood on it (a done todo, a met
    criterion) is open here until checked again.

    Example:

    \b
        turnkeeper adopt parser.handoff.json
    """
    from turnkeeper.handoff.adopt import adopt_packet
    from turnkeeper.handoff.packet import parse_packet

    packet = parse_packet(_read_packet(packet_file))
    with open_project_store() as (_, store):
        done = adopt_packet(store, packet)
    if as_json:
        print_json({"id": done.goal_id, **vars(done)})
        return
    console.print(
        f"adopted goal [bold]{safe(done.goal_id)}[/]: {len(done.todos)} todos, "
        f"{len(done.gates)} gates, {len(done.monitors)} monitors, "
        f"{len(done.evidence)} evidence references (stale until run again)"
    )
    again = [*done.reverify_todos, *done.reverify_criteria]
    if again:
        console.print(f"  to verify again here: {safe(', '.join(again))}")


def _read_packet(path: Path) -> str:
    def refused(reason: str, why: str) -> InvalidArgument:
        return InvalidArgument(
            f"PACKET: {path} {why}", reason=reason, details={"argument": "PACKET"}
        )

    try:
        info = path.stat()
    except FileNotFoundError:
        raise refused("missing_file", "does not exist") from None
    except OSError as exc:
        raise refused("unreadable_file", f"cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise refused("not_a_file", "is not a regular file")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_PACKET_BYTES + 1)
    except OSError as exc:
        raise refused("unreadable_file", f"cannot be read: {exc.strerror}") from None
    if len(data) > MAX_PACKET_BYTES:
        raise refused("file_too_large", f"is larger than {MAX_PACKET_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(
            f"PACKET: {path} is not UTF-8 text, so not a handoff packet",
            reason="packet_malformed",
            details={"field": ""},
        ) from None


def _write_atomically(path: Path, text: str) -> None:
    # A packet half written (a full disk, a kill) must never look like a packet.
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise InvalidArgument(
            f"cannot write {path}: {exc.strerror}",
            reason="unwritable_file",
            details={"option": "--output"},
        ) from None
