"""A turn's tool channel: the folder through which one turn's agent reaches its tools.

The control plane opens a channel when a turn starts (:meth:`ToolChannels.open`): a
folder ``<root>/<turn id>/`` (0700) holding what the tools read — the goal as it stood
when the turn started (``goal.json`` and ``goal_events.json``, see below), and, written
last, ``channel.json``: the turn, its brief and the sha256 of a fresh capability token
(one file, not three: on some disks creating a file costs more than the rest of a
short write, and a turn's channel is made and removed for every turn). The
token itself goes only into the environment of the turn's tool server
(:data:`~turnkeeper.hosts.base.TOOLS_TOKEN_ENV`), next to the folder's path
(:data:`~turnkeeper.hosts.base.TOOLS_DIR_ENV`).

A call is admitted only by :func:`attach`: the folder exists, the token hashes to the
folder's, and the turn has not ended (no ``closed`` marker) — else ``PERMISSION_DENIED``
and nothing is written. Admitted calls append one line each to ``calls.jsonl`` under an
exclusive ``flock`` (two servers may run for one turn), fsync'd before the agent hears
back. :meth:`ToolChannels.close` takes the same lock to write the marker, so once it
returns no call can land, and :meth:`ToolChannels.calls` reads every call the turn made.

Every file but the journal is written whole (a temporary file, then a rename): a reader
sees the old file or the new one, never half of one. Only the journal is fsync'd (each
call before its answer): a channel is worth nothing after the machine stops — its turn
is lost, its processes gone, and the turn's record is the event log's — but what a
lost turn had called is told to the next turn, so the calls outlive the control
plane's crash. A crash in the middle of an append leaves a torn last line: readers
skip it and count it, and the next append ends it first so it cannot swallow the line
after it.

The goal is handed over as the store keeps it: a snapshot and the events after it. A
goal that has lived for days is megabytes of state, and encoding it for every turn cost
more than the rest of the turn (25 ms at 10,000 todos). So ``goal.json`` is a hard link
to a snapshot of the goal shared by every channel (``<root>/.goals/<goal>/<seq>.json``),
and ``goal_events.json`` holds the goal's events after that snapshot up to the turn's
start; the tools fold them onto it (:meth:`Channel.goal`). A snapshot is written again
once the events since it number its length over ``SNAPSHOT_BYTES_PER_EVENT`` (the rule
of the store's own projection, runtime/log/streams.py ``projection_for``), so each turn
pays a constant share of it and folds a bounded tail. The link keeps a channel's
snapshot whole after a newer one replaces it. A goal under ``WHOLE_BELOW_BYTES`` is
written whole into the channel, as is any goal where no hard link can be made.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import logging
import os
import re
import secrets
import shutil
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from turnkeeper.brief import TurnBrief
from turnkeeper.errors import DataLoss, FailedPrecondition, InvalidArgument, PermissionDenied
from turnkeeper.hosts.base import TOOLS_DIR_ENV, TOOLS_TOKEN_ENV, ToolServer
from turnkeeper.json_types import json_object
from turnkeeper.kernel import evolve_goal
from turnkeeper.kernel.events import GOAL_EVENT_LIST_ADAPTER
from turnkeeper.kernel.model import GoalState
from turnkeeper.tools.calls import TOOL_CALL_ADAPTER, TOOL_NAMES, ToolCall

__all__ = [
    "CHANNEL_VERSION",
    "KEEP_CHANNELS",
    "TOOL_NAMES",
    "Channel",
    "ChannelFile",
    "ChannelTurn",
    "GoalHistory",
    "JournaledCalls",
    "ToolChannels",
    "attach",
    "parse_journal",
]

_log = logging.getLogger(__name__)

CHANNEL_VERSION: Final = 2
#: Channel folders kept under a root; older closed ones are deleted on open.
KEEP_CHANNELS: Final = 200
# How far below KEEP_CHANNELS a prune goes: the walk over the channels comes that rarely.
PRUNE_SLACK: Final = 50

CHANNEL_FILE: Final = "channel.json"
GOAL_FILE: Final = "goal.json"
GOAL_EVENTS_FILE: Final = "goal_events.json"
# The goals' shared snapshots, under the root: a hidden name no turn id takes.
SNAPSHOTS_DIR: Final = ".goals"
#: A goal's snapshot is written again once the events since it number its length in
#: bytes over this (as the store's goal projection: runtime/services/goal_reads.py).
SNAPSHOT_BYTES_PER_EVENT: Final = 16 * 1024
# A goal shorter than this is written whole into each channel, as before snapshots:
# it costs less than a snapshot's files (the store's own rule for its projections).
WHOLE_BELOW_BYTES: Final = 64 * 1024
# Goals whose snapshot a ToolChannels remembers; one it forgot gets a new snapshot.
_REMEMBERED_SNAPSHOTS: Final = 256
CALLS_FILE: Final = "calls.jsonl"
CLOSED_FILE: Final = "closed"

_PRIVATE_DIR = 0o700
_PRIVATE_FILE = 0o600


def _folder_name(turn_id: str) -> str:
    """``turn_id`` if it names one folder under the root: no separator, no whitespace,
    no leading dot (hidden names are the root's own: ``SNAPSHOTS_DIR``), bounded."""
    if (
        not turn_id
        or turn_id.startswith(".")
        or len(turn_id) > 200
        or re.search(r"[/\s=\x00]", turn_id)
    ):
        raise ValueError("a turn id names one folder: no '/', whitespace, '=', NUL or leading '.'")
    return turn_id


class ChannelTurn(BaseModel):
    """The turn a channel serves, as its tools need to know it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The folder's name: one path component (see _folder_name).
    turn_id: Annotated[str, AfterValidator(_folder_name)]
    session_id: str = Field(min_length=1)
    goal_id: str = Field(min_length=1)
    todo_id: str | None = None
    # The owner the session's todo claims carry (writeback.claim_owner: session:<id>),
    # and the epoch of this turn's claim on its todo (None: whatever the goal holds).
    claim_owner: str = Field(min_length=1)
    claim_epoch: int | None = None
    workspace: Path
    opened_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


class ChannelFile(BaseModel):
    """``channel.json``: the turn, its brief, and the sha256 of the turn's capability
    token. Written last: it is what makes a folder a channel, and a server holding the
    token finds every other file in place."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[2] = CHANNEL_VERSION
    turn: ChannelTurn
    brief: TurnBrief
    token_sha256: str


@dataclass(frozen=True)
class GoalHistory:
    """Where the goal a channel is opened with stands in its stream: the seq of that
    state, and the JSON of the stream's events after a seq up to it, each in the
    kernel's current shape (what the tools fold onto a snapshot)."""

    head_seq: int
    events_after: Callable[[int], Sequence[str]]


@dataclass(frozen=True)
class _Snapshot:
    """A goal's shared snapshot: its state at ``seq``, ``chars`` long, in ``path``."""

    seq: int
    path: Path
    chars: int


@dataclass(frozen=True)
class JournaledCalls:
    """A turn's calls in order, and how many torn lines (a crash mid-append) were skipped."""

    calls: list[ToolCall] = field(default_factory=list)
    torn: int = 0


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` whole (0600): a temporary file renamed over it. Not
    fsync'd: see the module's note (a turn opens a channel; four fsyncs each time
    cost more than the rest of a short turn)."""
    tmp = _temporary(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _PRIVATE_FILE)
    try:
        view = memoryview(data)
        while view:  # bounded: every write takes at least one byte or raises
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _temporary(path: Path) -> Path:
    """A name beside ``path`` for what is renamed over it: hidden, and this process's
    own (two controllers may write one shared snapshot at once)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _make_private_dirs(path: Path) -> None:
    """Create ``path`` and each missing parent with mode 0700 (``Path.mkdir(parents=True)``
    gives the parents the default mode, readable by everyone)."""
    missing: list[Path] = []
    for candidate in (path, *path.parents):  # bounded: the path's depth
        if candidate.exists():
            break
        missing.append(candidate)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=_PRIVATE_DIR)
        except FileExistsError:
            continue  # another process made it in between: it is there, as wanted
        os.chmod(directory, _PRIVATE_DIR)  # the umask may have taken bits off


def parse_journal(data: bytes) -> JournaledCalls:
    """The calls of a ``calls.jsonl``'s bytes. A line that is not JSON is torn (a crash
    mid-append; the next append ends it with a newline): skipped and counted. A JSON
    line that is not a call (damaged, or written by a later version) is ``DATA_LOSS``:
    a call must never vanish in silence."""
    calls: list[ToolCall] = []
    torn = 0
    for n, line in enumerate(data.split(b"\n")):  # bounded: the file's lines
        if not line.strip():
            continue
        try:
            raw = json_object(line)
        except ValueError:  # not UTF-8, not JSON, or not an object: cut short
            torn += 1
            continue
        try:
            calls.append(TOOL_CALL_ADAPTER.validate_python(raw))
        except ValidationError as exc:
            raise DataLoss(
                f"line {n + 1} of the tool call journal is not a call this version reads",
                reason="unreadable_tool_call",
                details={"line": n + 1, "errors": exc.error_count()},
            ) from None
    return JournaledCalls(calls=calls, torn=torn)


@contextmanager
def _locked(path: Path, operation: int) -> Iterator[int]:
    """``path`` opened for appending and held under ``flock(operation)``."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    try:
        fcntl.flock(fd, operation)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def _read_fd(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


class ToolChannels:
    """The channels under one root folder (the control plane's side)."""

    def __init__(self, root: Path, keep: int = KEEP_CHANNELS) -> None:
        self.root = root
        self.keep = keep
        # The root's entry count up to which an open does not walk the channels: what
        # the last walk could not remove (open channels, other entries) plus a slack.
        self._walk_above = 0
        # The snapshot this object last wrote of each goal, by goal id (at most
        # _REMEMBERED_SNAPSHOTS, the oldest forgotten first), under its lock: the
        # sessions' threads open channels at once. A snapshot gone from disk (another
        # controller or thread replaced it) is found when it cannot be linked.
        self._snapshots: dict[str, _Snapshot] = {}
        self._snapshots_lock = threading.Lock()

    def path(self, turn_id: str) -> Path:
        return self.root / turn_id

    def open(
        self,
        turn: ChannelTurn,
        brief: TurnBrief,
        goal: GoalState,
        history: GoalHistory | None = None,
    ) -> ToolServer:
        """Open ``turn``'s channel and return the tool server its agent starts.

        ``history`` says where ``goal`` stands in its stream, so the channel gets the
        goal's shared snapshot and the events after it (see the module's note); without
        it the goal is written whole.

        Opening a channel that exists and has not been closed opens it again: its files
        and its token are replaced (the old token stops working), its journal is kept. A
        closed one is refused (``FAILED_PRECONDITION``, ``channel_closed``): its turn
        ended. The oldest closed channels beyond ``keep`` are deleted.
        """
        if brief.turn_id != turn.turn_id:
            raise InvalidArgument(
                f"the brief is turn {brief.turn_id!r}'s, not {turn.turn_id!r}'s",
                reason="brief_turn_mismatch",
            )
        folder = self.path(turn.turn_id)
        if (folder / CLOSED_FILE).exists():
            raise FailedPrecondition(
                f"turn {turn.turn_id}'s tool channel is closed: the turn has ended",
                reason="channel_closed",
                details={"turn_id": turn.turn_id},
            )
        _make_private_dirs(folder)
        token = secrets.token_hex(32)
        self._write_goal(folder, turn.goal_id, goal, history)
        calls = folder / CALLS_FILE
        if not calls.exists():
            os.close(os.open(calls, os.O_WRONLY | os.O_CREAT, _PRIVATE_FILE))
        # The token last: a server holding it finds every other file in place.
        written = ChannelFile(turn=turn, brief=brief, token_sha256=_sha256(token))
        write_atomic(folder / CHANNEL_FILE, written.model_dump_json().encode())
        self._prune(keep=folder)
        return ToolServer(
            command=[sys.executable, "-m", "turnkeeper.cli.main", "mcp"],
            env={TOOLS_DIR_ENV: str(folder), TOOLS_TOKEN_ENV: token},
            names=list(TOOL_NAMES),
        )

    def _write_goal(
        self, folder: Path, goal_id: str, goal: GoalState, history: GoalHistory | None
    ) -> None:
        """``goal.json`` and ``goal_events.json``: the goal's shared snapshot linked and
        the events after it; or the goal whole, when it is small, when there is no
        history to fold, or when no hard link can be made."""
        target = folder / GOAL_FILE
        events = folder / GOAL_EVENTS_FILE
        if history is not None:
            with self._snapshots_lock:
                snapshot = self._snapshots.get(goal_id)
            if (
                snapshot is not None
                and _still_serves(snapshot, history.head_seq)
                and _linked(snapshot.path, target)
            ):
                tail = history.events_after(snapshot.seq)
                write_atomic(events, b"[" + ",".join(tail).encode() + b"]")
                return
        data = goal.model_dump_json().encode()
        # A re-opened channel's events were folded onto the goal it held before.
        events.unlink(missing_ok=True)
        if history is not None and len(data) >= WHOLE_BELOW_BYTES:
            snapshot = self._new_snapshot(goal_id, data, history.head_seq)
            if _linked(snapshot.path, target):
                return
        write_atomic(target, data)

    def _new_snapshot(self, goal_id: str, data: bytes, seq: int) -> _Snapshot:
        """The goal's snapshot at ``seq`` (``data``) written, and its older ones removed
        (each channel that serves one holds a link of its own)."""
        digest = hashlib.sha256(goal_id.encode()).hexdigest()[:32]
        directory = self.root / SNAPSHOTS_DIR / digest
        _make_private_dirs(directory)
        path = directory / f"{seq}.json"
        write_atomic(path, data)
        for entry in os.listdir(directory):  # bounded: this goal's snapshots
            if entry != path.name and entry.endswith(".json"):
                # Gone already: another controller's newer snapshot removed it.
                (directory / entry).unlink(missing_ok=True)
        snapshot = _Snapshot(seq=seq, path=path, chars=len(data))
        with self._snapshots_lock:
            self._snapshots.pop(goal_id, None)
            self._snapshots[goal_id] = snapshot
            while len(self._snapshots) > _REMEMBERED_SNAPSHOTS:  # bounded: one over at most
                del self._snapshots[next(iter(self._snapshots))]
        return snapshot

    def close(self, turn_id: str) -> JournaledCalls:
        """End the turn's channel — every later call is refused — and return its calls.

        Under the journal's lock, so a call in flight either landed before or is
        refused. The calls are read through the descriptor that was open before the
        channel was marked closed: another controller's prune (which deletes closed
        channels only) may remove the folder the moment it is closed, and what was
        journaled is still read whole. Idempotent: a channel closed already is read as
        it is (nothing, once pruned); a channel that does not exist made no calls."""
        folder = self.path(turn_id)
        if not folder.is_dir() or (folder / CLOSED_FILE).exists():
            return self.read_calls(turn_id)
        try:
            fd = os.open(folder / CALLS_FILE, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:  # a channel whose open did not finish: no calls
            write_atomic(folder / CLOSED_FILE, b"closed\n")
            return JournaledCalls()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            write_atomic(folder / CLOSED_FILE, b"closed\n")
            return parse_journal(_read_fd(fd))
        finally:
            os.close(fd)  # closing releases the lock

    def read_calls(self, turn_id: str) -> JournaledCalls:
        """The turn's journaled calls in order, with the count of torn lines skipped.
        A turn that had no channel (or whose channel was pruned) made no calls."""
        try:
            with _locked(self.path(turn_id) / CALLS_FILE, fcntl.LOCK_SH) as fd:
                return parse_journal(_read_fd(fd))
        except FileNotFoundError:  # never opened, or pruned (also while being read)
            return JournaledCalls()

    def close_and_list(self, turn_id: str) -> list[ToolCall]:
        """:meth:`close`, its calls as a list; a torn line is skipped and logged."""
        return _logged(turn_id, self.close(turn_id))

    def calls(self, turn_id: str) -> list[ToolCall]:
        """The turn's journaled calls in order; a torn line is skipped and logged."""
        return _logged(turn_id, self.read_calls(turn_id))

    def _prune(self, keep: Path) -> None:
        """Delete the oldest closed channels beyond ``self.keep`` (by when each was opened).
        Only folders holding a ``channel.json`` count: nothing else is touched.

        Run at every open, so it costs one directory listing while the root holds no
        more than ``keep`` entries, and walks the channels only past that — then down
        to ``keep`` less a quarter (at most ``PRUNE_SLACK``), so the walk comes that
        many turns apart. What a walk cannot remove (the channels of turns still
        running: with more sessions than ``keep``, more than ``keep`` of them) is not
        walked again until that slack more entries have come: else every open would
        stat every running turn's channel, which took a fifth of a controller's time
        with 256 sessions.
        Several controllers may prune one root at once: a channel another one deleted
        first is simply gone."""
        entries = len(os.listdir(self.root))
        if entries <= max(self.keep, self._walk_above):
            return
        channels: list[tuple[float, Path]] = []
        for entry in self.root.iterdir():  # bounded: the root's entries
            channel_file = entry / CHANNEL_FILE
            if entry.is_symlink() or not entry.is_dir():
                continue
            try:
                channels.append((channel_file.stat().st_mtime, entry))
            except FileNotFoundError:  # not a channel, or pruned by another controller
                continue
        channels.sort(reverse=True)
        slack = min(PRUNE_SLACK, self.keep // 4)
        removed = 0
        for _, folder in channels[self.keep - slack :]:
            if folder != keep and (folder / CLOSED_FILE).exists():
                shutil.rmtree(folder, onerror=_gone_is_fine)
                removed += 1
        self._walk_above = entries - removed + max(1, slack)


def _still_serves(snapshot: _Snapshot, head_seq: int) -> bool:
    """Whether a channel for the goal at ``head_seq`` may fold onto ``snapshot``: it is
    not ahead of the goal, and the events since it number less than its length over
    ``SNAPSHOT_BYTES_PER_EVENT``."""
    return 0 <= head_seq - snapshot.seq < snapshot.chars // SNAPSHOT_BYTES_PER_EVENT


def _linked(source: Path, target: Path) -> bool:
    """Whether ``target`` is now a hard link to ``source`` (replacing what it held); False
    when ``source`` is gone or this filesystem makes no hard link there."""
    tmp = _temporary(target)
    try:
        os.link(source, tmp)
    except OSError:  # gone, or no hard links here (EPERM, EXDEV, EMLINK)
        return False
    os.replace(tmp, target)
    return True


def _logged(turn_id: str, journaled: JournaledCalls) -> list[ToolCall]:
    if journaled.torn:
        _log.warning(
            "turn %s: %d torn line(s) skipped in its tool call journal (a crash mid-append)",
            turn_id,
            journaled.torn,
        )
    return journaled.calls


def _gone_is_fine(
    function: Callable[..., object],
    path: str,
    error: tuple[type[BaseException], BaseException, object],
) -> None:
    """``rmtree``'s error handler: a file another pruning controller removed first is
    what we wanted; anything else is raised."""
    if not isinstance(error[1], FileNotFoundError):
        raise error[1]


# --- the tool server's side ----------------------------------------------------------


class Channel:
    """A channel a call was admitted to (by :func:`attach`)."""

    def __init__(self, folder: Path, written: ChannelFile) -> None:
        self.folder = folder
        self.turn = written.turn
        self._brief = written.brief
        self._token_digest = written.token_sha256

    def goal(self) -> GoalState:
        """The goal as it stood when the turn started: its snapshot with the events
        after it folded in (``DATA_LOSS`` when either cannot be read or decoded)."""
        try:
            state = GoalState.model_validate_json((self.folder / GOAL_FILE).read_bytes())
            events = self.folder / GOAL_EVENTS_FILE
            tail = (
                GOAL_EVENT_LIST_ADAPTER.validate_json(events.read_bytes())
                if events.exists()
                else []
            )
        except (OSError, ValidationError):  # gone or damaged since the channel was opened
            raise DataLoss(
                f"turn {self.turn.turn_id}'s tool channel holds a goal this version cannot read",
                reason="unreadable_channel_goal",
                details={"turn_id": self.turn.turn_id},
            ) from None
        for event in tail:  # bounded: the events since the snapshot
            state = evolve_goal(state, event)
        return state

    def brief(self) -> TurnBrief:
        """The turn's brief, as the channel held it when this call was admitted."""
        return self._brief

    def read(self) -> JournaledCalls:
        with _locked(self.folder / CALLS_FILE, fcntl.LOCK_SH) as fd:
            return parse_journal(_read_fd(fd))

    @contextmanager
    def journal(self) -> Iterator[Journal]:
        """The journal, locked for one call: its calls so far, and :meth:`Journal.append`.
        Refused (``PERMISSION_DENIED``) if the turn ended meanwhile (``turn_ended``) or its
        channel was opened again with a new token (``not_this_turn``)."""
        with _locked(self.folder / CALLS_FILE, fcntl.LOCK_EX) as fd:
            # Checked again under the lock close() and open() write under: a call admitted
            # before the turn ended (or its channel was opened again) lands no line after.
            _refuse_if_closed(self.folder, self.turn.turn_id)
            _refuse_unless_token(self.folder, self.turn.turn_id, self._token_digest)
            data = _read_fd(fd)
            yield Journal(
                fd, parse_journal(data).calls, torn_tail=bool(data) and data[-1:] != b"\n"
            )


class Journal:
    """One call's hold on the journal: the calls before it, and the append."""

    def __init__(self, fd: int, calls: list[ToolCall], *, torn_tail: bool) -> None:
        self._fd = fd
        self.calls = calls
        self._torn_tail = torn_tail
        self.appended = False

    def append(self, call: ToolCall) -> None:
        """One line for ``call``, on disk before this returns."""
        if self.appended:
            raise RuntimeError("one append per hold on the journal")
        line = TOOL_CALL_ADAPTER.dump_json(call) + b"\n"
        # A torn tail (a crash mid-append) is ended first, so it stays a line of its own.
        data = (b"\n" if self._torn_tail else b"") + line
        view = memoryview(data)
        while view:  # bounded: every write takes at least one byte or raises
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)
        self.appended = True


def _refuse_if_closed(folder: Path, turn_id: str) -> None:
    if (folder / CLOSED_FILE).exists():
        raise PermissionDenied(
            f"turn {turn_id} has ended: its turnkeeper tools take no more calls",
            reason="turn_ended",
            details={"turn_id": turn_id},
        )


def attach(env: Mapping[str, str]) -> Channel:
    """The channel ``env`` names, if its capability is this turn's and the turn has not
    ended; else ``PERMISSION_DENIED`` saying which (``no_channel``, ``not_this_turn``,
    ``turn_ended``). Reads only."""
    where = env.get(TOOLS_DIR_ENV, "")
    if not where:
        raise PermissionDenied(
            f"no turnkeeper tool channel: {TOOLS_DIR_ENV} is not set (the tools work only "
            "inside a turn turnkeeper started)",
            reason="no_channel",
        )
    folder = Path(where)
    written = _read_channel_file(folder)
    if written is None:
        raise PermissionDenied(f"no turnkeeper tool channel at {folder}", reason="no_channel")
    token = env.get(TOOLS_TOKEN_ENV, "")
    if not token or not hmac.compare_digest(_sha256(token), written.token_sha256):
        raise _not_this_turn(written.turn.turn_id)
    _refuse_if_closed(folder, written.turn.turn_id)
    return Channel(folder, written)


def _read_channel_file(folder: Path) -> ChannelFile | None:
    """The folder's ``channel.json``; None when it is not there or not one this version
    reads."""
    try:
        return ChannelFile.model_validate_json((folder / CHANNEL_FILE).read_bytes())
    except (OSError, ValidationError):
        return None


def _not_this_turn(turn_id: str) -> PermissionDenied:
    return PermissionDenied(
        f"{TOOLS_TOKEN_ENV} is not turn {turn_id}'s capability: this server was started "
        "for another turn, or without one",
        reason="not_this_turn",
        details={"turn_id": turn_id},
    )


def _refuse_unless_token(folder: Path, turn_id: str, digest: str) -> None:
    written = _read_channel_file(folder)
    if written is None or not hmac.compare_digest(digest, written.token_sha256):
        raise _not_this_turn(turn_id)
