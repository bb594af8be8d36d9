"""A database behind what it already said: snapshot refs checked against the log.

Every snapshot commit names, in its message, the completed turn it was taken for
(its ordinal: the session's completed-turn count with it), how many turns the
session had accepted and the goal stream's head (runtime/workspaces/snapshots.py,
``SnapshotClaims``); each of those was durable in the log before the snapshot was
taken. Git keeps the refs in the workspace, out of the database's reach. So when a
ref claims more than the log holds — a lost or truncated WAL after an unclean exit,
a database restored from an older copy — the log lost acknowledged writes, and a
``run`` would do the lost turns' work again on top of the work already in the
workspace. That is ``DATA_LOSS`` (``database_behind_workspace``), naming the ref and
what the log holds, and ``run`` must not go on until an operator decides: restore
the database, or accept the loss with ``turnkeeper repair --accept-loss SESSION``,
which keeps the refs the log cannot account for under ``refs/turnkeeper/lost/``.

A ref whose ordinal is one past the log's completed turns is not behind: a crash
between taking a snapshot and committing its turn's completion leaves exactly that,
and recovery completes (or abandons) the turn.

The check costs one ``git for-each-ref`` per workspace (all its sessions' refs and
their messages at once) and one head read per goal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from turnkeeper.errors import DataLoss, NotFound
from turnkeeper.json_types import JsonDict, JsonMapping
from turnkeeper.runtime.workspaces.gitcmd import SNAPSHOT_REF_PREFIX as REF_PREFIX
from turnkeeper.runtime.workspaces.gitcmd import git

# `status` runs this check: the session kernel is imported only to type it.
if TYPE_CHECKING:
    from turnkeeper.kernel.session import SessionState
    from turnkeeper.store.base import EventStore
    from turnkeeper.store.records import Mismatch

LOST_PREFIX = "refs/turnkeeper/lost"
# How runtime/services/goals.py names a goal's stream (a test keeps the two equal).
GOAL_STREAM_PREFIX = "goal:"
REASON = "database_behind_workspace"
_FORMAT = "--format=%(refname)%00%(objectname)%00%(contents:body)%00"


@dataclass(frozen=True)
class _Session:
    """What the check needs of a session, from a decoded state or its projection JSON."""

    session_id: str
    goal_id: str
    workspace: str
    snapshots: bool
    turns_completed: int
    turns_accepted: int


@dataclass(frozen=True)
class SnapshotClaim:
    ref: str
    commit: str
    session_id: str
    turn_id: str
    ordinal: int
    turns_accepted: int | None
    goal_seq: int | None


@dataclass(frozen=True)
class Behind:
    """A snapshot that names more than the log holds."""

    claim: SnapshotClaim
    log_turns_completed: int
    log_turns_accepted: int
    log_goal_head: int

    def as_json(self) -> JsonDict:
        c = self.claim
        return {
            "session_id": c.session_id,
            "ref": c.ref,
            "turn_id": c.turn_id,
            "snapshot": {
                "completed_turn": c.ordinal,
                "turns_accepted": c.turns_accepted,
                "goal_seq": c.goal_seq,
            },
            "log": {
                "turns_completed": self.log_turns_completed,
                "turns_accepted": self.log_turns_accepted,
                "goal_seq": self.log_goal_head,
            },
        }

    def describe(self) -> str:
        c = self.claim
        said = [f"completed turn #{c.ordinal}"]
        if c.turns_accepted is not None:
            said.append(f"{c.turns_accepted} turns accepted")
        if c.goal_seq is not None:
            said.append(f"goal seq {c.goal_seq}")
        return (
            f"snapshot {c.ref} of session {c.session_id} names turn {c.turn_id} "
            f"({', '.join(said)}) but the log holds {self.log_turns_completed} completed "
            f"turns, {self.log_turns_accepted} accepted, goal seq {self.log_goal_head}"
        )


def _session(value: SessionState | JsonMapping) -> _Session | None:
    if not isinstance(value, Mapping):
        return _Session(
            value.session_id,
            value.goal_id,
            value.workspace,
            value.snapshots,
            value.counters.turns_completed,
            value.counters.turns_accepted,
        )
    counters = value.get("counters")
    fields = (value.get("session_id"), value.get("goal_id"), value.get("workspace"))
    if not all(isinstance(f, str) for f in fields) or not isinstance(counters, Mapping):
        return None  # not a session state this code wrote: nothing it can claim
    sid, goal_id, workspace = (str(f) for f in fields)
    completed, accepted = counters.get("turns_completed"), counters.get("turns_accepted")
    if not isinstance(completed, int) or not isinstance(accepted, int):
        return None
    return _Session(
        sid, goal_id, workspace, value.get("snapshots") is not False, completed, accepted
    )


def _claims_in(workspace: Path) -> list[SnapshotClaim]:
    """Every snapshot ref of the workspace's repository with what its commit names."""
    if not workspace.is_dir():
        return []
    proc = git(workspace, "for-each-ref", _FORMAT, f"{REF_PREFIX}/", check=False)
    if proc.returncode != 0:
        return []  # not a repository (any more): nothing it could claim
    fields = proc.stdout.split("\0")
    claims = []
    for i in range(0, len(fields) - 2, 3):
        claim = _parse(fields[i].strip(), fields[i + 1].strip(), fields[i + 2])
        if claim is not None:
            claims.append(claim)
    return claims


def _parse(ref: str, commit: str, body: str) -> SnapshotClaim | None:
    rest = ref.removeprefix(f"{REF_PREFIX}/")
    session_id, _, name = rest.partition("/")
    ordinal_text, _, turn_id = name.partition("-")
    facts = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition(":") for line in body.splitlines())
        if value
    )
    try:
        ordinal = int(facts.get("ordinal", ordinal_text))
        accepted = int(facts["turns-accepted"]) if "turns-accepted" in facts else None
        goal_seq = int(facts["goal-seq"]) if "goal-seq" in facts else None
    except ValueError:
        return None  # not a snapshot this code wrote
    return SnapshotClaim(ref, commit, session_id, turn_id, ordinal, accepted, goal_seq)


def workspace_claims_beyond_log(
    store: EventStore, sessions: Iterable[SessionState | JsonMapping]
) -> list[Behind]:
    """Every snapshot of these sessions that names more than the log holds."""
    by_workspace: dict[str, dict[str, _Session]] = {}
    for value in sessions:
        one = _session(value)
        if one is not None and one.snapshots:
            by_workspace.setdefault(one.workspace, {})[one.session_id] = one
    heads: dict[str, int] = {}
    behind: list[Behind] = []
    for workspace, known in by_workspace.items():
        for claim in _claims_in(Path(workspace)):
            session = known.get(claim.session_id)
            if session is None:
                continue  # another project's session, or one this log never had
            if session.goal_id not in heads:
                heads[session.goal_id] = store.head(GOAL_STREAM_PREFIX + session.goal_id)
            goal_head = heads[session.goal_id]
            if (
                claim.ordinal > session.turns_completed + 1
                or (claim.turns_accepted or 0) > session.turns_accepted
                or (claim.goal_seq or 0) > goal_head
            ):
                behind.append(
                    Behind(claim, session.turns_completed, session.turns_accepted, goal_head)
                )
    return behind


def behind_error(behind: list[Behind]) -> DataLoss:
    first = behind[0]
    sid = first.claim.session_id
    more = f" (and {len(behind) - 1} more)" if len(behind) > 1 else ""
    return DataLoss(
        f"the database is behind its workspace: {first.describe()}{more}. Writes it had "
        "acknowledged are lost (a lost or truncated WAL, an older copy of the database), "
        "and running on would redo work the workspace already holds. Restore the "
        f"database from a backup, or accept the loss: `turnkeeper repair --accept-loss "
        f"{sid}` (the snapshots the log lacks are kept under {LOST_PREFIX}/{sid}/)",
        reason=REASON,
        details={"session_id": sid, "behind": [b.as_json() for b in behind[:20]]},
    )


def check_workspaces_not_ahead(
    store: EventStore, sessions: Iterable[SessionState | JsonMapping]
) -> None:
    """``DATA_LOSS`` (``database_behind_workspace``) when a snapshot of these sessions
    names a turn or sequence the log lacks; ``run`` calls it before any recovery."""
    behind = workspace_claims_beyond_log(store, sessions)
    if behind:
        raise behind_error(behind)


def check_store_not_behind(store: EventStore) -> None:
    """:func:`check_workspaces_not_ahead` over every session of the store: what a read
    command checks before it answers (cli/context.py), so that it never shows as the
    project's state a log that lost what its workspaces record. Reads the sessions'
    projections as ``status`` does (no state model).

    A damaged session row leaves the check undone rather than refusing every read: it
    is DATA_LOSS for whatever reads that session (and for ``status`` and ``verify``),
    and a read of an intact goal stays possible, as it is with no claims at all."""
    from turnkeeper.runtime.services.session_listing import list_sessions

    try:
        listed = list_sessions(store)
    except DataLoss:
        return
    check_workspaces_not_ahead(store, [s.state for s in listed])


def accept_loss(store: EventStore, state: SessionState) -> list[str]:
    """Move the session's snapshot refs the log lacks to ``refs/turnkeeper/lost/``; the
    refs moved (their new names). The log's view wins from here on: ``run`` goes on
    from what the log holds."""
    from turnkeeper.runtime.workspaces.snapshots import forget, is_repository

    workspace = Path(state.workspace)
    if not is_repository(workspace):
        raise NotFound(
            f"the workspace {workspace} of session {state.session_id} is no repository",
            reason="runtime_missing",
        )
    moved = []
    for item in workspace_claims_beyond_log(store, [state]):
        claim = item.claim
        target = f"{LOST_PREFIX}/{claim.ref.removeprefix(f'{REF_PREFIX}/')}"
        git(workspace, "update-ref", target, claim.commit)
        git(workspace, "update-ref", "-d", claim.ref, claim.commit)
        moved.append(target)
    forget(workspace, state.session_id)
    return moved


def behind_mismatches(store: EventStore) -> list[Mismatch]:
    """``verify``'s view of the check: one mismatch per snapshot the log lacks."""
    from turnkeeper.runtime.services.session_listing import list_sessions
    from turnkeeper.store.records import Mismatch, MismatchKind

    try:
        states = [s.state for s in list_sessions(store)]
    except DataLoss:
        return []  # verify has reported what made the sessions unreadable
    return [
        Mismatch(
            stream_id=f"session:{b.claim.session_id}",
            kind=MismatchKind.DATABASE_BEHIND,
            detail=b.describe(),
            damaged=True,
        )
        for b in workspace_claims_beyond_log(store, states)
    ]


def accept_losses(store: EventStore, session_ids: Iterable[str]) -> list[str]:
    """:func:`accept_loss` for each session named (a unique prefix will do)."""
    from turnkeeper.runtime.services.sessions import SessionService

    sessions = SessionService(store)
    moved: list[str] = []
    for given in session_ids:
        moved += accept_loss(store, sessions.load(sessions.resolve_id(given)))
    return moved
