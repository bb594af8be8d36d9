"""The session service: one session stream per agent session, every write fenced by its lease."""

from __future__ import annotations

import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.kernel.session import (
    SESSION_EVENT_ADAPTER,
    CreateSession,
    SessionCommand,
    SessionEvent,
    SessionState,
    decide_session,
    evolve_session,
    fold_session,
)
from turnkeeper.kernel.session.events import ReceiptRecorded, TurnAccepted, TurnCompleted
from turnkeeper.runtime.log.codec import StreamCodec
from turnkeeper.runtime.log.request_ids import check_request_free_or_for, session_id_for_request
from turnkeeper.runtime.log.streams import Appended, decide_and_append, load_stream
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import IndexEntry, Projection

SESSION_KIND = "session"


def _session_event_versions() -> dict[str, frozenset[int]]:
    # Read the types and versions off the union's Literal annotations (as the goal
    # kernel's table is), so a new event class or version is covered without a table.
    union = typing.get_args(typing.get_args(SessionEvent)[0])
    return {
        typing.get_args(cls.model_fields["type"].annotation)[0]: frozenset(
            typing.get_args(cls.model_fields["schema_version"].annotation)
        )
        for cls in union
    }


SESSION_CODEC: StreamCodec[SessionState, SessionEvent] = StreamCodec(
    kind=SESSION_KIND,
    state_type=SessionState,
    event_adapter=SESSION_EVENT_ADAPTER,
    supported_versions=_session_event_versions(),
    fold_events=fold_session,
    evolve_event=evolve_session,
)


def session_stream(session_id: str) -> str:
    return f"session:{session_id}"


def session_index(events: Sequence[SessionEvent]) -> list[IndexEntry]:
    # Sessions and turns are named by id alone on the command line (`recover TURN`).
    entries = []
    for event in events:
        if event.type == "session.created":
            entries.append(IndexEntry(entity_id=event.session_id, entity_kind="session"))
            if event.request_id is not None:  # `operation show ID` finds the create
                entries.append(IndexEntry(entity_id=event.request_id, entity_kind="operation"))
        elif event.type == "turn.accepted":
            entries.append(IndexEntry(entity_id=event.envelope.turn_id, entity_kind="turn"))
        elif event.type == "operation.started" or (
            event.type == "operation.joined" and event.request_id != event.joined
        ):
            # A request id names its operation's session (`operation show ID`, retries).
            entries.append(IndexEntry(entity_id=event.request_id, entity_kind="operation"))
    return entries


class SessionService:
    def __init__(self, store: EventStore, clock: Callable[[], datetime] | None = None):
        self._store = store
        # Leases and claims expire on the database's clock, which every worker shares.
        self._clock = clock or store.now

    @property
    def store(self) -> EventStore:
        return self._store

    def now(self) -> datetime:
        return self._clock()

    def create(
        self,
        goal_id: str,
        workspace: Path,
        host_kind: str,
        host_config: Mapping[str, object] | None = None,
        session_id: str | None = None,
        request_id: str | None = None,
        *,
        snapshots: bool = True,
        site: str | None = None,
    ) -> SessionState:
        """Create a session (``host_config`` may be any mapping: the command validates
        it as JSON). Under a client ``request_id`` the create is a durable operation: a
        retry with the same payload returns the same session and writes nothing; another
        payload is ALREADY_EXISTS (runtime/log/request_ids.py)."""
        if request_id is not None:
            if session_id is not None:
                raise InvalidArgument(
                    "a create names its session by request id or by session id, not both",
                    reason="session_id_with_request_id",
                )
            session_id = session_id_for_request(request_id)
            check_request_free_or_for(self._store, request_id, session_stream(session_id))
        sid = session_id or str(uuid.uuid4())
        command = CreateSession(
            session_id=sid,
            goal_id=goal_id,
            workspace=str(workspace.resolve()),
            host_kind=host_kind,
            host_config=host_config or {},
            request_id=request_id,
            snapshots=snapshots,
            site=site,
        )
        done = self.execute(sid, command)
        self._store.signal_work()  # a worker waiting for work may take it now
        assert done.state is not None
        return done.state

    def execute(
        self, session_id: str, command: SessionCommand, *, durable: bool = True
    ) -> Appended[SessionState, SessionEvent]:
        """Decide ``command`` on the session's current state and append the events."""
        return decide_and_append(
            self._store,
            SESSION_CODEC,
            session_stream(session_id),
            lambda state: decide_session(state, command, self._clock()),
            index=session_index,
            durable=durable,
        )

    def load(self, session_id: str) -> SessionState:
        state, _ = load_stream(self._store, SESSION_CODEC, session_stream(session_id))
        if state is None:
            raise NotFound(f"session {session_id!r} not found", reason="session_not_found")
        return state

    def resolve_id(self, prefix: str) -> str:
        """A full session id from a unique prefix (ids are long UUIDs)."""
        if self._store.lookup(prefix) is not None:
            return prefix
        matches = [s.session_id for s in self.list() if s.session_id.startswith(prefix)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise NotFound(f"session {prefix!r} not found", reason="session_not_found")
        raise InvalidArgument(f"session prefix {prefix!r} is ambiguous", reason="ambiguous_id")

    @staticmethod
    def states_of(projections: Iterable[Projection]) -> list[SessionState]:
        """The states of session projections a caller listed itself (the API's status
        lists goals and sessions in one read: ``EventStore.list_projections_of``)."""
        return [SESSION_CODEC.state_of(p) for p in projections]

    def list(self) -> list[SessionState]:
        return self.states_of(self._store.list_projections(SESSION_KIND))

    def session_of_turn(self, turn_id: str) -> str:
        found = self._store.lookup(turn_id)
        if found is None or found[1] != "turn":
            raise NotFound(f"turn {turn_id!r} not found", reason="turn_not_found")
        return found[0].removeprefix("session:")

    def receipt_event(self, session_id: str, turn_id: str) -> ReceiptRecorded:
        """The durable receipt of a turn, read back from the log (never from memory).

        Scans back from the head in growing windows: a receipt sits a few events
        after its turn was accepted, and recovery asks about recent turns.
        """
        stream = session_stream(session_id)
        upper, step = self._store.head(stream), 64
        while upper > 0:
            lower = max(0, upper - step)
            window = self._store.read_stream(stream, after_seq=lower, limit=upper - lower)
            for record in reversed(window):
                if record.type not in ("turn.receipt_recorded", "turn.accepted"):
                    continue
                event = SESSION_CODEC.decode_event(record)
                if isinstance(event, ReceiptRecorded) and event.turn_id == turn_id:
                    return event
                if isinstance(event, TurnAccepted) and event.envelope.turn_id == turn_id:
                    upper = 0  # reached the turn's start: it never got a receipt
                    break
            else:
                upper, step = lower, step * 2
        raise NotFound(f"turn {turn_id!r} has no receipt", reason="no_receipt")

    def completed_turns(self, session_id: str) -> tuple[TurnCompleted, ...]:
        """Every ``turn.completed`` of the session, oldest first: the snapshot history
        (which of them are still retained is for git to say: see
        runtime/workspaces/snapshots.py)."""
        self.load(session_id)  # NOT_FOUND for an unknown session
        records = self._store.read_stream(session_stream(session_id))
        events = (SESSION_CODEC.decode_event(r) for r in records if r.type == "turn.completed")
        return tuple(e for e in events if isinstance(e, TurnCompleted))
