"""The goal aggregate: typed entities and :class:`GoalState`.

Everything here is an immutable pydantic model. The state of a goal is never
edited in place; :mod:`turnkeeper.kernel.evolve` builds a new one from the old
one and an event, so a state can always be recomputed from its event stream.
"""

# Annotations are evaluated as written, with no ``from __future__ import annotations``:
# pydantic would otherwise evaluate each field's annotation from its string (a compile
# each), ~25% of the time this module takes to import.
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PrivateAttr


class KernelModel(BaseModel):
    """Base for every kernel model: immutable and strict about unknown fields.

    ``extra="forbid"`` makes a record written by a newer version fail loudly
    instead of silently dropping the fields this version does not know.
    """

    # ``defer_build``: a model's validator is built when it is first used, not when its
    # class is defined, so a command pays only for the models it reads (``status``
    # decodes goal states, never proposals or session commands).
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def model_copy(self, *, update: Mapping[str, object] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied; a name the model has no field for is refused.

        pydantic's own copy sets any attribute it is given, so a misspelt field in an
        ``evolve`` step would pass silently and the state would fold wrong. The names
        are checked here, once per copy (a subset test of the key views); the values are the
        caller's, as the kernel's own code builds them.
        """
        if update:
            fields = _field_names(type(self))
            if not update.keys() <= fields:
                unknown = sorted(update.keys() - fields)
                raise ValueError(f"{type(self).__name__} has no field {unknown}")
        return super().model_copy(update=update, deep=deep)


# Cached for the process; never cleared: a model class's fields are fixed when it is made.
@functools.cache
def _field_names(model: type[BaseModel]) -> frozenset[str]:
    """A model class's field names, once per class: the evolve steps copy a state a
    dozen times a turn, and ``model_fields`` is looked up through a descriptor each."""
    return frozenset(model.model_fields)


# --- goal, acceptance, vision -------------------------------------------------


class GoalStatus(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class Criterion(KernelModel):
    """One acceptance criterion. ``met`` only by a passing, fresh evidence record."""

    id: str
    text: str
    met: bool = False
    evidence_ids: list[str] = Field(default_factory=list)


class VisionStatus(StrEnum):
    PATCHED = "patched"
    UNCHANGED = "unchanged"
    RETIRED = "retired"
    SUPERSEDED = "superseded"
    NOT_NEEDED = "not_needed"


# A checkpoint with one of these statuses changed the agent's vision, so it is an
# observable delta that may discharge a replan obligation ("unchanged" is not).
VISION_DELTA_STATUSES = frozenset(
    {VisionStatus.PATCHED, VisionStatus.RETIRED, VisionStatus.SUPERSEDED}
)


class VisionCheckpoint(KernelModel):
    """An agent's statement about its vision at material refresh ``refresh_seq``."""

    agent: str
    status: VisionStatus
    reason: str = ""
    vision_text: str | None = None
    at: datetime
    refresh_seq: int


class NoFollowUpReason(StrEnum):
    """Why nothing more needs doing: structured so an audit can count the kinds."""

    ACCEPTANCE_MET = "acceptance_met"
    NO_ACTION_NEEDED = "no_action_needed"
    HANDLED_ELSEWHERE = "handled_elsewhere"
    ACCEPTED_RISK = "accepted_risk"
    OUT_OF_SCOPE = "out_of_scope"


class NoFollowUp(KernelModel):
    """A structured "nothing more to do" record: the reason, a summary, when."""

    reason: NoFollowUpReason
    summary: str
    at: datetime


class Goal(KernelModel):
    id: str
    title: str
    objective: str
    criteria: list[Criterion] = Field(default_factory=list)
    agents_requiring_vision: list[str] = Field(default_factory=list)
    # Latest checkpoint per agent; older ones live in the event stream.
    vision: dict[str, VisionCheckpoint] = Field(default_factory=dict)
    # Bumped by every material refresh (acceptance changed, obligation raised).
    # A vision checkpoint counts only if taken at the current value.
    refresh_seq: int = 0
    status: GoalStatus = GoalStatus.OPEN
    closure: NoFollowUp | None = None
    created_at: datetime


# --- todos --------------------------------------------------------------------


class TodoStatus(StrEnum):
    OPEN = "open"
    CLAIMED = "claimed"
    DONE = "done"
    BLOCKED = "blocked"
    SUPERSEDED = "superseded"


# Statuses that still count as work to do in the terminal audit.
UNFINISHED_TODO_STATUSES = frozenset({TodoStatus.OPEN, TodoStatus.CLAIMED, TodoStatus.BLOCKED})
# Statuses from which an agent could pick the todo up right now (the frontier).
RUNNABLE_TODO_STATUSES = frozenset({TodoStatus.OPEN, TodoStatus.CLAIMED})
_FINISHED = frozenset({TodoStatus.DONE, TodoStatus.SUPERSEDED})

_K = TypeVar("_K")
_V = TypeVar("_V")


class Claim(KernelModel):
    """Who works on a todo, until when, and the fencing epoch of this claim."""

    owner: str
    lease_expires_at: datetime
    epoch: int

    def is_live(self, now: datetime) -> bool:
        return self.lease_expires_at > now


class Completion(KernelModel):
    owner: str
    evidence_ids: list[str]
    at: datetime


class Todo(KernelModel):
    id: str
    title: str
    status: TodoStatus = TodoStatus.OPEN
    depends_on: list[str] = Field(default_factory=list)
    claim: Claim | None = None
    # The last epoch handed out; survives release so the next claim gets a new one.
    epoch: int = 0
    required_evidence: list[str] = Field(default_factory=list)
    successor_required: bool = False
    successor_of: str | None = None
    successors: list[str] = Field(default_factory=list)
    blocked_reason: str | None = None
    superseded_reason: str | None = None
    completion: Completion | None = None
    created_at: datetime


# --- gates --------------------------------------------------------------------


class GateStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


class GateResolution(KernelModel):
    by: str
    # "approved", "rejected" or any other free-form decision word.
    decision: str
    payload: dict[str, JsonValue] = Field(default_factory=dict)
    at: datetime


class Gate(KernelModel):
    id: str
    title: str
    blocking: bool = True
    # Todo ids the decision covers; empty means the whole goal.
    scope: list[str] = Field(default_factory=list)
    status: GateStatus = GateStatus.OPEN
    resolution: GateResolution | None = None
    opened_at: datetime

    def blocks(self, todo_id: str) -> bool:
        """True while this gate stops ``todo_id`` from being claimed."""
        unresolved = self.status is GateStatus.OPEN
        return self.blocking and unresolved and (not self.scope or todo_id in self.scope)


# --- monitors -----------------------------------------------------------------


class Readback(KernelModel):
    value: JsonValue
    at: datetime


class Monitor(KernelModel):
    id: str
    target: str
    cadence_seconds: int
    next_due: datetime
    last_readback: Readback | None = None
    # Consecutive readbacks that returned the previous value.
    no_change_streak: int = 0
    # When the current value was first read: identifies one stall occurrence.
    streak_started_at: datetime | None = None
    stall_limit: int = 3
    required: bool = False
    freshness_seconds: int | None = None
    retired: bool = False
    retired_reason: str | None = None


# --- evidence -----------------------------------------------------------------


class Evidence(KernelModel):
    """A command's result bound to what it ran on and the time it ran: ``revision`` is
    the commit checked out (HEAD), ``tree`` the worktree's whole content then (tracked
    and untracked-not-ignored files, as a git tree id), which tells apart two runs on
    the same commit with different uncommitted work. Both None outside a repository."""

    id: str
    key: str
    command: str
    revision: str | None = None
    tree: str | None = None
    exit_code: int
    output_digest: str = ""
    # The end of the command's output, so a failure can be shown without rerunning it.
    output_tail: str = ""
    recorded_at: datetime
    freshness_seconds: int

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def is_fresh(self, now: datetime) -> bool:
        # A record from the future is not fresh either: freshness is never assumed.
        age = (now - self.recorded_at).total_seconds()
        return 0 <= age <= self.freshness_seconds


# --- replan obligations -------------------------------------------------------


class ReplanTrigger(StrEnum):
    FRONTIER_EXHAUSTED = "frontier_exhausted"
    MONITOR_STALLED = "monitor_stalled"
    EVIDENCE_CONTRADICTED = "evidence_contradicted"
    EVIDENCE_STALE = "evidence_stale"
    SUCCESSOR_NEEDED = "successor_needed"
    # A session's turns changed nothing in the kernel several times in a row
    # (raised by ``ReportNoProgress``: the session kernel counts, the goal records).
    NO_PROGRESS = "no_progress"


class ObligationStatus(StrEnum):
    OPEN = "open"
    DISCHARGED = "discharged"


class Discharge(KernelModel):
    """The observable delta that discharged an obligation."""

    # The proposal kind that carried the delta, e.g. "add_todo".
    by: str
    # The entity the delta touched (todo id, agent, "acceptance", ...).
    ref: str
    at: datetime


class ReplanObligation(KernelModel):
    id: str
    trigger: ReplanTrigger
    # The entity the trigger is about (goal id, monitor id, evidence key, todo id).
    subject: str
    # Identifies one occurrence of the condition, so a discharged obligation is
    # not raised again while the same occurrence persists.
    fingerprint: str
    detail: str
    raised_at: datetime
    status: ObligationStatus = ObligationStatus.OPEN
    discharged_by: Discharge | None = None


# --- the aggregate ------------------------------------------------------------


class GoalNote(KernelModel):
    author: str
    text: str
    at: datetime


@dataclass(frozen=True)
class TodoTally:
    """What the kernel asks of every todo on every write and turn, kept as they change.

    ``decide`` checks the replan triggers after every accepted proposal, the planner
    looks for the first runnable todo before every turn, the brief counts the todos by
    status: asked by walking the todos, each grew with the goal (at 10,000 todos, most
    of a write and nine tenths of a turn). A state counts its tally once (one walk) and
    ``GoalState.with_todos`` carries it to the next state, moving only the changed
    todos' shares.

    ``unfinished`` keeps goal order without positions because a finished todo (done or
    superseded) never becomes unfinished again (the kernel refuses every change to one)
    and a new todo goes last: the unfinished todos' order never changes. A change that
    broke this is counted afresh by ``with_todos``.
    """

    # How many todos have each status (a status no todo has is absent).
    counts: Mapping[TodoStatus, int] = field(default_factory=dict)
    # Open, claimed and blocked todos' ids, in goal order (a dict used as an ordered set).
    unfinished: Mapping[str, None] = field(default_factory=dict)
    # Evidence key -> how many done todos require it (keys with no such todo absent).
    relied: Mapping[str, int] = field(default_factory=dict)
    # Finished todos that promised a successor and have none yet.
    successor_needed: frozenset[str] = frozenset()

    @property
    def runnable(self) -> int:
        """Open or claimed todos: the frontier."""
        return sum(self.counts.get(status, 0) for status in RUNNABLE_TODO_STATUSES)

    @property
    def finished(self) -> int:
        """Done or superseded todos."""
        return sum(self.counts.get(status, 0) for status in _FINISHED)

    @classmethod
    def of(cls, todos: Iterable[Todo]) -> "TodoTally":
        """The tally of ``todos`` (in goal order), counted in one walk."""
        counting = _TallyCounting(TodoTally())
        unfinished: dict[str, None] = {}
        for todo in todos:
            if todo.status in UNFINISHED_TODO_STATUSES:
                unfinished[todo.id] = None  # the common case: no share beyond its count
                counting.counts[todo.status] = counting.counts.get(todo.status, 0) + 1
            else:
                counting.count(todo, 1)
        counting.unfinished = unfinished
        return counting.tally()

    def moved(self, changes: Iterable[tuple[Todo | None, Todo]]) -> "TodoTally | None":
        """This tally with each change's old todo's share (None: a new todo) taken out
        and the new one's put in; None if a finished todo became unfinished."""
        counting = _TallyCounting(self)
        for old, new in changes:
            was = old is not None and old.id in self.unfinished
            now = new.status in UNFINISHED_TODO_STATUSES
            if old is not None:
                if now and not was:
                    return None  # a finished todo back: its place in goal order is lost
                counting.count(old, -1)
            counting.count(new, 1)
            if now != was:  # open -> blocked, say, keeps its place
                counting.place(new.id, now)
        return counting.tally()


class _TallyCounting:
    """A tally being counted; each table is copied only once it changes (a claim moves a
    count, not the unfinished todos)."""

    def __init__(self, start: TodoTally) -> None:
        self.start = start
        self.counts = dict(start.counts)
        self.unfinished: Mapping[str, None] = start.unfinished
        self.relied: Mapping[str, int] = start.relied
        self.successor_needed = start.successor_needed

    def place(self, todo_id: str, unfinished: bool) -> None:
        """Put ``todo_id`` last among the unfinished todos, or take it out."""
        table = self._mine(self.unfinished, self.start.unfinished)
        if unfinished:
            table[todo_id] = None
        else:
            table.pop(todo_id, None)
        self.unfinished = table

    def count(self, todo: Todo, sign: int) -> None:
        """Add ``todo``'s share of the counts (``sign`` 1) or take it out (-1)."""
        _set_count(self.counts, todo.status, self.counts.get(todo.status, 0) + sign)
        if todo.status is TodoStatus.DONE and todo.required_evidence:
            relied = self._mine(self.relied, self.start.relied)
            for key in dict.fromkeys(todo.required_evidence):
                _set_count(relied, key, relied.get(key, 0) + sign)
            self.relied = relied
        if todo.status in _FINISHED and todo.successor_required and not todo.successors:
            if sign > 0:
                self.successor_needed = self.successor_needed | {todo.id}
            else:
                self.successor_needed = self.successor_needed - {todo.id}

    @staticmethod
    def _mine(table: Mapping[str, _V], started: Mapping[str, _V]) -> dict[str, _V]:
        """``table`` to change in place: a copy while it is still the starting tally's."""
        return dict(table) if table is started else cast(dict[str, _V], table)

    def tally(self) -> TodoTally:
        return TodoTally(self.counts, self.unfinished, self.relied, self.successor_needed)


def _set_count(counts: dict[_K, int], key: _K, value: int) -> None:
    if value:
        counts[key] = value
    else:
        counts.pop(key, None)


class GoalState(KernelModel):
    """Everything the kernel knows about one goal, folded from its event stream."""

    goal: Goal
    todos: dict[str, Todo] = Field(default_factory=dict)
    gates: dict[str, Gate] = Field(default_factory=dict)
    monitors: dict[str, Monitor] = Field(default_factory=dict)
    evidence: dict[str, Evidence] = Field(default_factory=dict)
    obligations: dict[str, ReplanObligation] = Field(default_factory=dict)
    no_follow_ups: list[NoFollowUp] = Field(default_factory=list)
    notes: list[GoalNote] = Field(default_factory=list)
    # Number of events folded into this state (the stream's length).
    version: int = 0

    @property
    def is_closed(self) -> bool:
        return self.goal.status is GoalStatus.CLOSED

    def open_obligations(self) -> list[ReplanObligation]:
        return [o for o in self.obligations.values() if o.status is ObligationStatus.OPEN]

    # Derived, never stored: every key's records in run-time order (ties: log order),
    # and the ``evidence`` table it was built from. ``evidence_for_key`` asked of a
    # goal of 100,000 records sorted them all on each call (every evidence event's
    # progress check, the audit once per key); this is built once per state and
    # carried from one state to the next by ``evolve`` (``with_evidence_recorded``),
    # which copies only the one key's records. A state made by ``model_copy`` carries
    # its source's index too; it is used only while ``evidence`` is the very table it
    # was built from (tables are never changed in place), so a copy with other
    # evidence (a page of it, say) builds its own.
    _by_key: dict[str, tuple[Evidence, ...]] | None = PrivateAttr(default=None)
    _by_key_of: dict[str, Evidence] | None = PrivateAttr(default=None)
    # Derived likewise: the tally of ``todos`` (:class:`TodoTally`), valid while
    # ``todos`` is the very table it was counted from; ``with_todos`` carries it to the
    # next state.
    _tally: TodoTally | None = PrivateAttr(default=None)
    _tally_of: dict[str, Todo] | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        # The fields alone: pydantic also compares private attributes, and whether a
        # state has built its evidence index yet says nothing about the goal.
        if not isinstance(other, GoalState):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable dicts inside: as pydantic's

    def _evidence_by_key(self) -> dict[str, tuple[Evidence, ...]]:
        by_key = self._by_key
        if by_key is None or self._by_key_of is not self.evidence:
            # Keys in the order the log first names them; each key's records sorted by
            # run time (``sort`` is stable: ties keep log order).
            lists: dict[str, list[Evidence]] = {}
            for record in self.evidence.values():
                lists.setdefault(record.key, []).append(record)
            by_key = {
                key: tuple(sorted(records, key=lambda e: e.recorded_at))
                for key, records in lists.items()
            }
            self._by_key, self._by_key_of = by_key, self.evidence
        return by_key

    def with_evidence_recorded(self, evidence: Evidence) -> "GoalState":
        """This state with ``evidence`` added last to its table (``evolve``'s step), its
        evidence index carried over when this state has one: O(records of that key),
        not a sort of every record."""
        table = {**self.evidence, evidence.id: evidence}
        after = self.model_copy(update={"evidence": table})
        known = self._by_key
        if (
            known is not None
            and self._by_key_of is self.evidence
            and evidence.id not in self.evidence
        ):
            records = known.get(evidence.key, ())
            # After every record that ran no later (ties: log order, this one last).
            at = len(records)
            while at and records[at - 1].recorded_at > evidence.recorded_at:
                at -= 1
            after._by_key = {**known, evidence.key: (*records[:at], evidence, *records[at:])}
            after._by_key_of = table
        return after

    def indexed(self) -> "GoalState":
        """This state with its derived indexes built — the todo tally and the evidence by
        key — and carried by every ``evolve`` step after it. ``evolve`` asks this of each
        state it steps from: the state a process holds (its streams' cache) is always one
        evolve made, so only a state read from the store counts and sorts, once, and a
        write never walks the todos or sorts the evidence, whichever it asks about."""
        self.todo_tally()
        self._evidence_by_key()
        return self

    def todo_tally(self) -> TodoTally:
        """The tally of this state's todos (one walk, then kept and carried)."""
        tally = self._tally
        if tally is None or self._tally_of is not self.todos:
            tally = TodoTally.of(self.todos.values())
            self._tally, self._tally_of = tally, self.todos
        return tally

    def with_todos(self, changed: Mapping[str, Todo]) -> "GoalState":
        """This state with the ``changed`` todos put in (a new id goes last), its tally
        carried over: O(changed todos) beside the copies of the tables."""
        tally = self.todo_tally()  # counted once per loaded state, then carried
        table = {**self.todos, **changed}
        moved = tally.moved((self.todos.get(i), todo) for i, todo in changed.items())
        after = self.model_copy(update={"todos": table})
        after._tally = moved if moved is not None else TodoTally.of(table.values())
        after._tally_of = table
        return after

    def evidence_keys(self) -> list[str]:
        """Every evidence key, in the order the log first names each."""
        return list(self._evidence_by_key())

    def latest_evidence(self, key: str) -> Evidence | None:
        """The most recent record for ``key`` by run time, ties broken by log order."""
        records = self._evidence_by_key().get(key)
        return records[-1] if records else None

    def evidence_for_key(self, key: str) -> list[Evidence]:
        """All records for ``key``, oldest first (run time, then log order)."""
        return list(self._evidence_by_key().get(key, ()))
