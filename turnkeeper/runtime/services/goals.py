"""The goal service: read a goal's state, submit a proposal, append what the kernel decided.

``submit`` decides on the current state and appends optimistically, deciding
again when another writer got there first (see :mod:`turnkeeper.runtime.log.streams`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.kernel import (
    EVENT_SCHEMA_VERSIONS,
    GOAL_EVENT_ADAPTER,
    GoalEvent,
    GoalProposal,
    GoalState,
    TerminalAudit,
    audit,
    decide_goal,
    evolve_goal,
    fold_goal,
)
from turnkeeper.kernel.proposals import CreateGoal
from turnkeeper.runtime.log.codec import StreamCodec
from turnkeeper.runtime.log.ids import pick_id
from turnkeeper.runtime.log.streams import decide_and_append, load_stream
from turnkeeper.runtime.services.goal_reads import GOAL_KIND, GOAL_LAG_BYTES_PER_EVENT, goal_states
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import EventRecord, IndexEntry, Projection

GOAL_CODEC: StreamCodec[GoalState, GoalEvent] = StreamCodec(
    kind=GOAL_KIND,
    state_type=GoalState,
    event_adapter=GOAL_EVENT_ADAPTER,
    supported_versions=EVENT_SCHEMA_VERSIONS,
    fold_events=fold_goal,
    evolve_event=evolve_goal,
    # A goal grows to thousands of todos and evidence records (megabytes of state):
    # its projection is rewritten every so many appends, not on every one.
    lag_bytes_per_event=GOAL_LAG_BYTES_PER_EVENT,
)

# Which events introduce an entity that commands may name on its own (todo ids, ...).
_ENTITY_FIELDS: dict[str, tuple[str, str]] = {
    "goal_created": ("goal_id", "goal"),
    "todo_added": ("todo_id", "todo"),
    "gate_opened": ("gate_id", "gate"),
    "monitor_added": ("monitor_id", "monitor"),
    "evidence_recorded": ("evidence_id", "evidence"),
}
# The kinds of id the store's entity index knows (``GoalService.resolve``); the others
# live inside one goal (``id_in_goal``).
INDEXED_KINDS = frozenset(kind for _, kind in _ENTITY_FIELDS.values())


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_id(prefix: str) -> str:
    """A short, readable, collision-resistant id such as ``todo-3f9c2a1b7e``."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def goal_stream(goal_id: str) -> str:
    return f"goal:{goal_id}"


@dataclass(frozen=True)
class Submitted:
    events: list[GoalEvent]
    state: GoalState
    head_seq: int


class GoalService:
    def __init__(self, store: EventStore, clock: Callable[[], datetime] | None = None):
        self._store = store
        # Leases and claims expire on the database's clock, which every worker shares.
        self._clock = clock or store.now

    # --- reads ---------------------------------------------------------------

    def load(self, goal_id: str) -> GoalState:
        state, _ = self.load_at_head(goal_id)
        return state

    def load_at_head(self, goal_id: str) -> tuple[GoalState, int]:
        """The goal's state and the seq of its stream's last event folded into it."""
        state, head = self._load_with_head(goal_id)
        if state is None:
            raise NotFound(f"goal {goal_id!r} not found", reason="goal_not_found")
        return state, head

    def event_texts(self, goal_id: str, after_seq: int, upto_seq: int) -> list[str]:
        """The JSON of the goal's events after ``after_seq`` up to ``upto_seq``, each in
        its current shape, not decoded (what a turn's tool channel folds onto the
        goal's snapshot: turnkeeper/tools/channel.py)."""
        if upto_seq <= after_seq:
            return []
        stream = goal_stream(goal_id)
        # A stream's seqs run without gaps: the limit ends the read at ``upto_seq``.
        records = self._store.read_stream(stream, after_seq=after_seq, limit=upto_seq - after_seq)
        return [GOAL_CODEC.current_payload(r) for r in records]

    def goal_of(self, entity_id: str, expected_kind: str | None = None) -> str:
        """The goal that owns a todo, gate, monitor or evidence id."""
        found = self._store.lookup(entity_id)
        if found is None or (expected_kind is not None and found[1] != expected_kind):
            what = expected_kind or "entity"
            raise NotFound(f"{what} {entity_id!r} not found", reason=f"{what}_not_found")
        stream_id, _ = found
        return stream_id.removeprefix("goal:")

    # --- ids (a unique prefix will do: turnkeeper.runtime.log.ids) ---------------

    def resolve(self, kind: str, text: str) -> str:
        """The full id of the goal, todo, gate, monitor or evidence record (``kind``)
        that ``text`` names, exactly or by a unique prefix.

        Only commands resolve: the runtime names what it writes by full id, so a typo
        there is never quietly turned into another entity.
        """
        if kind not in INDEXED_KINDS:
            raise InvalidArgument(f"no index of {kind} ids", reason="unknown_id_kind")
        if text:
            found = self._store.lookup(text)
            if found is not None and found[1] == kind:
                return text
        candidates = self._store.lookup_prefix(text, kind) if text else []
        return pick_id(kind, text, candidates)

    def locate(self, kind: str, text: str) -> tuple[str, str]:
        """``(goal id, full id)`` of a todo, gate, monitor or evidence id or prefix."""
        full = self.resolve(kind, text)
        return self.goal_of(full, kind), full

    def list_goals(self) -> list[GoalState]:
        return self.goals_of(self._store.list_projections(GOAL_KIND))

    @staticmethod
    def goals_of(projections: Iterable[Projection]) -> list[GoalState]:
        """The states of goal projections a caller listed itself (``status`` lists goals
        and sessions in one read: ``EventStore.list_projections_of``)."""
        return goal_states(projections)

    def history(self, goal_id: str, limit: int | None = None) -> list[EventRecord]:
        self.load(goal_id)  # NOT_FOUND for an unknown goal, not an empty list
        return self._store.read_stream(goal_stream(goal_id), limit=limit)

    def recent_history(self, goal_id: str, count: int) -> list[EventRecord]:
        """The goal's last ``count`` events, oldest first: read from the head back, so a
        goal of 100,000 events costs what one of 20 does (``goal show``)."""
        if count <= 0:
            return []
        stream = goal_stream(goal_id)
        head = self._store.head(stream)
        if head == 0:
            raise NotFound(f"goal {goal_id!r} not found", reason="goal_not_found")
        return self._store.read_stream(stream, after_seq=max(0, head - count), limit=count)

    def audit(self, goal_id: str) -> TerminalAudit:
        return self.audit_of(self.load(goal_id))

    def audit_of(self, state: GoalState) -> TerminalAudit:
        """The audit of a state the caller read already (``status`` audits the goals it
        listed, with no second read of each)."""
        return audit(state, self._clock())

    # --- writes --------------------------------------------------------------

    def create(self, proposal: CreateGoal) -> Submitted:
        return self.submit(proposal.goal_id, proposal)

    def submit(self, goal_id: str, proposal: GoalProposal) -> Submitted:
        return self._submit(goal_id, lambda _: proposal)

    def submit_built(self, goal_id: str, build: Callable[[GoalState], GoalProposal]) -> Submitted:
        """Submit the proposal ``build`` makes from the goal's state, built again on
        the state each retry decides on: a proposal that names what the state holds
        (its open obligations, say) never names what another writer just changed."""

        def proposal_for(state: GoalState | None) -> GoalProposal:
            if state is None:
                raise NotFound(f"goal {goal_id!r} not found", reason="goal_not_found")
            return build(state)

        return self._submit(goal_id, proposal_for)

    def _submit(
        self, goal_id: str, proposal_for: Callable[[GoalState | None], GoalProposal]
    ) -> Submitted:
        if not goal_id:
            raise InvalidArgument("goal id must not be empty", reason="empty_goal_id")
        done = decide_and_append(
            self._store,
            GOAL_CODEC,
            goal_stream(goal_id),
            lambda state: decide_goal(state, proposal_for(state), self._clock()),
            index=index_entries,
        )
        if done.state is None:
            raise NotFound(f"goal {goal_id!r} not found", reason="goal_not_found")
        return Submitted(events=done.events, state=done.state, head_seq=done.head_seq)

    def _load_with_head(self, goal_id: str) -> tuple[GoalState | None, int]:
        return load_stream(self._store, GOAL_CODEC, goal_stream(goal_id))


def id_in_goal(state: GoalState, kind: str, text: str) -> str:
    """The full id of a criterion, obligation, todo, gate, monitor or evidence record
    of this goal that ``text`` names, exactly or by a unique prefix."""
    tables: dict[str, Callable[[], Sequence[str]]] = {
        "criterion": lambda: [c.id for c in state.goal.criteria],
        "obligation": lambda: list(state.obligations),
        "todo": lambda: list(state.todos),
        "gate": lambda: list(state.gates),
        "monitor": lambda: list(state.monitors),
        "evidence": lambda: list(state.evidence),
    }
    if kind not in tables:
        raise InvalidArgument(f"a goal holds no {kind} ids", reason="unknown_id_kind")
    return pick_id(kind, text, tables[kind]())


def index_entries(events: Sequence[GoalEvent]) -> list[IndexEntry]:
    entries = []
    for event in events:
        field = _ENTITY_FIELDS.get(event.type)
        if field is not None:
            attr, kind = field
            entries.append(IndexEntry(entity_id=str(getattr(event, attr)), entity_kind=kind))
    return entries
