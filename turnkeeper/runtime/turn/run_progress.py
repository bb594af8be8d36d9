"""What ``run`` reports while it drives sessions: structured records, one per happening.

The controller and the turn driver report here; the CLI shows the records (a live
table on a terminal, plain lines otherwise, one JSON object per line with
``--json``). Each record carries the line a person reads (``text``) and the fields
a program reads; the JSON form puts ``progress`` (that line) first and ``record``
(its kind) next, so every progress line of ``run --json`` starts the same way.

Records: ``session`` (recovered, backing off, stopped, ...), ``turn`` (a phase of
a turn: ``started``, ``completed``, ``failed``), ``message`` (what the agent said),
``agent_error`` (an ``error`` event of the agent, fatal or not: Codex's "Reconnecting…
2/5" while it cannot reach its model), ``refusal`` (a proposal of the turn's result
the goal kernel refused at the write-back, with its reason), ``host_silent`` (a host
printed nothing for a while) and ``note`` (anything else, e.g. what a first Ctrl-C
waits for). :class:`RunMonitor` turns the driver's view of each host (start, events,
refusals) into these records and finds silent hosts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

if TYPE_CHECKING:
    from turnkeeper.host_reports import HostEvent
    from turnkeeper.kernel.session import ProposalDecision, TurnEnvelope

# Event kinds that carry what the agent says, and the field holding the text.
MESSAGE_KINDS: Final = {"message": "text", "agent_message": "text", "output": "text"}
# The longest agent message a record carries (a progress line, not a transcript).
MAX_MESSAGE_CHARS: Final = 500
# Message records per turn: a host printing a million lines floods no screen; the
# rest are in the journal (``turnkeeper logs``).
MAX_MESSAGE_RECORDS_PER_TURN: Final = 200


# A record without fields shares this one (read-only: no record changes another's).
_NO_FIELDS: Final[Mapping[str, object]] = MappingProxyType({})


class RunRecord(NamedTuple):
    """One happening (a tuple: a few are made every turn, and a frozen dataclass costs
    four times what a tuple does to make)."""

    record: str
    text: str
    session: str | None = None
    # What a program reads; only printed (``run --json`` writes any other value as its
    # ``str``), so any value may be reported.
    fields: Mapping[str, object] = _NO_FIELDS

    def as_json(self) -> dict[str, object]:
        head: dict[str, object] = {"progress": self.text, "record": self.record}
        if self.session is not None:
            head["session"] = self.session
        return {**head, **self.fields}


Reporter = Callable[[RunRecord], None]


class TurnWatcher(Protocol):
    """What the turn driver tells while a host runs (from the turn's own thread)."""

    def host_started(self, session_id: str, envelope: TurnEnvelope) -> None: ...

    def host_event(self, session_id: str, turn_id: str, event: HostEvent) -> None: ...

    def refused(
        self, session_id: str, envelope: TurnEnvelope, rejected: Sequence[ProposalDecision]
    ) -> None:
        """What the goal kernel refused of the turn's result (its write-back is durable)."""
        ...


def duration(seconds: float) -> str:
    """``12s``, ``2m 0s``, ``1h 3m``: how long, as a person says it."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m"


def error_text(kind: str, data: Mapping[str, object]) -> tuple[str, bool] | None:
    """The message of an agent's ``error`` event and whether it is fatal, or None."""
    if kind != "error":
        return None
    message = data.get("message")
    text = message.strip() if isinstance(message, str) and message.strip() else "(no message)"
    return text[:MAX_MESSAGE_CHARS], data.get("fatal") is True


def refused_part(turn_id: str, proposal_id: str) -> str:
    """What of a turn's result a refusal is about: ``complete`` (its ``todo_done``),
    ``proposal 0``, ``evidence 1``, ``result`` (the write-back's proposal ids,
    runtime/turn/writeback.py)."""
    return proposal_id.removeprefix(f"{turn_id}:").replace(":", " ")


def message_text(kind: str, data: Mapping[str, object]) -> str | None:
    """The agent's words in a host event (a message, a line of plain output), or None."""
    key = MESSAGE_KINDS.get(kind)
    value = data.get(key) if key is not None else None
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()[:MAX_MESSAGE_CHARS]


@dataclass
class RunningTurn:
    """A host running now, as the display shows it."""

    session_id: str
    turn_id: str
    kind: str
    todo_id: str | None
    attempt: int
    started: float  # monotonic
    last_output: float  # monotonic: the host's latest event (or its start)
    events: int = 0
    message: str | None = None
    messages_reported: int = 0
    warned_silent: bool = False

    @property
    def label(self) -> str:
        return self.todo_id or "goal"

    def elapsed(self, now: float) -> float:
        return now - self.started


class RunMonitor:
    """The running hosts of one ``run``: their elapsed time, their latest message, and
    which of them has been silent for ``silence_seconds``. Thread-safe: every
    session's thread reports here, and the display reads it from its own."""

    def __init__(
        self,
        report: Reporter,
        silence_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._report = report
        self._silence = silence_seconds
        self._clock = clock
        self._running: dict[str, RunningTurn] = {}
        # Reattached turns (a runner kept them running while no ``run`` watched): how
        # long each had already run, by turn id, for its ``host_started`` to count from.
        self._resumed: dict[str, float] = {}
        self._lock = threading.Lock()

    def resuming(self, turn_id: str, running_seconds: float) -> None:
        """Turn ``turn_id`` is reattached, ``running_seconds`` after its durable start:
        its elapsed time (``completed in``) counts from that start, not from now."""
        with self._lock:
            self._resumed[turn_id] = max(0.0, running_seconds)

    # --- what the driver tells (TurnWatcher) --------------------------------------------

    def host_started(self, session_id: str, envelope: TurnEnvelope) -> None:
        now = self._clock()
        with self._lock:
            already = self._resumed.pop(envelope.turn_id, 0.0)
            turn = RunningTurn(
                session_id=session_id,
                turn_id=envelope.turn_id,
                kind=envelope.kind,
                todo_id=envelope.todo_id,
                attempt=envelope.attempt,
                started=now - already,
                last_output=now,
            )
            self._running[session_id] = turn
        self._report(
            RunRecord(
                "turn",
                f"{turn.label}: turn {turn.turn_id} started "
                f"({turn.kind}, attempt {turn.attempt}, session {session_id[:8]})",
                session_id,
                {
                    **self._turn_fields(turn),
                    "phase": "started",
                    "elapsed_seconds": round(already, 3),
                },
            )
        )

    def host_event(self, session_id: str, turn_id: str, event: HostEvent) -> None:
        now = self._clock()
        error = error_text(event.kind, event.data)
        if error is not None:
            self._agent_error(session_id, turn_id, error, now)
            return
        text = message_text(event.kind, event.data)
        with self._lock:
            turn = self._running.get(session_id)
            if turn is None or turn.turn_id != turn_id:
                return
            turn.events += 1
            turn.last_output = now
            turn.warned_silent = False
            if text is not None:
                turn.message = text
                turn.messages_reported += 1
            count = turn.messages_reported
            elapsed = turn.elapsed(now)
        if text is not None and count == MAX_MESSAGE_RECORDS_PER_TURN + 1:
            self._report(
                RunRecord(
                    "note",
                    f"{turn.label}: more messages than {MAX_MESSAGE_RECORDS_PER_TURN}; the "
                    f"rest only in `turnkeeper logs {session_id[:8]}`",
                    session_id,
                    {"turn": turn_id},
                )
            )
        if text is not None and count <= MAX_MESSAGE_RECORDS_PER_TURN:
            self._report(
                RunRecord(
                    "message",
                    f"{turn.label}: {text}",
                    session_id,
                    {
                        "turn": turn_id,
                        "todo": turn.todo_id,
                        "kind": event.kind,
                        "text": text,
                        "elapsed_seconds": round(elapsed, 3),
                    },
                )
            )

    def _agent_error(
        self, session_id: str, turn_id: str, error: tuple[str, bool], now: float
    ) -> None:
        """An ``error`` event: its own record, counted with the turn's messages (a
        host retrying in a loop floods no screen either)."""
        message, fatal = error
        with self._lock:
            turn = self._running.get(session_id)
            if turn is None or turn.turn_id != turn_id:
                return
            turn.events += 1
            turn.last_output = now
            turn.warned_silent = False
            turn.messages_reported += 1
            count = turn.messages_reported
            elapsed = turn.elapsed(now)
        if count > MAX_MESSAGE_RECORDS_PER_TURN:
            return  # the note that the rest is only in the journal came with the messages
        which = "fatal error" if fatal else "error"
        self._report(
            RunRecord(
                "agent_error",
                f"{turn.label}: agent {which}: {message}",
                session_id,
                {
                    "turn": turn_id,
                    "todo": turn.todo_id,
                    "message": message,
                    "fatal": fatal,
                    "elapsed_seconds": round(elapsed, 3),
                },
            )
        )

    def refused(
        self, session_id: str, envelope: TurnEnvelope, rejected: Sequence[ProposalDecision]
    ) -> None:
        """One ``refusal`` record per proposal of the turn's result the kernel refused."""
        label = envelope.todo_id or "goal"
        turn_id = envelope.turn_id
        for decision in rejected[:MAX_MESSAGE_RECORDS_PER_TURN]:
            part = refused_part(turn_id, decision.proposal_id)
            # The kernel's words, once: "... cannot be used: evidence_failed" ends with
            # the reason the line already names.
            first = next(iter(decision.message.splitlines()), "")[:MAX_MESSAGE_CHARS]
            first = first.removesuffix(f": {decision.reason}")
            why = f"{decision.reason} ({first})" if first else decision.reason
            self._report(
                RunRecord(
                    "refusal",
                    f"{label}: {part} refused: {why}",
                    session_id,
                    {
                        "turn": turn_id,
                        "todo": envelope.todo_id,
                        "proposal": decision.proposal_id,
                        "part": part,
                        "reason": decision.reason,
                        "message": decision.message,
                    },
                )
            )

    # --- what the controller tells ------------------------------------------------------

    def turn_ended(
        self,
        session_id: str,
        turn_id: str,
        *,
        succeeded: bool,
        error_kind: str | None = None,
        reason: str | None = None,
        fallback_seconds: float = 0.0,
    ) -> None:
        """A turn's end: ``completed`` (or on its way there), or ``failed`` naming why."""
        now = self._clock()
        with self._lock:
            turn = self._running.pop(session_id, None)
            self._resumed.pop(turn_id, None)
        if turn is not None and turn.turn_id != turn_id:
            turn = None  # a stale entry: this turn never reached its host
        elapsed = turn.elapsed(now) if turn is not None else fallback_seconds
        label = turn.label if turn is not None else f"session {session_id[:8]}"
        fields: dict[str, object] = {
            "turn": turn_id,
            "phase": "completed" if succeeded else "failed",
            "elapsed_seconds": round(elapsed, 3),
        }
        if turn is not None:
            fields = {**self._turn_fields(turn), **fields, "host_events": turn.events}
        where = f"(session {session_id[:8]})"
        if succeeded:
            text = f"{label}: turn {turn_id} completed in {duration(elapsed)} {where}"
        else:
            fields |= {"error_kind": error_kind, "reason": reason}
            # The reason's first line: a line per record (the JSON carries all of it).
            first = next(iter((reason or "").splitlines()), "")[:MAX_MESSAGE_CHARS]
            why = f"{error_kind}: {first}" if first else f"{error_kind}"
            text = f"{label}: turn {turn_id} failed ({why}) after {duration(elapsed)} {where}"
        self._report(RunRecord("turn", text, session_id, fields))

    # --- what the display reads ---------------------------------------------------------

    def running(self) -> list[RunningTurn]:
        with self._lock:
            return [RunningTurn(**vars(t)) for t in self._running.values()]

    def check_silence(self) -> int:
        """Report each host silent for ``silence_seconds`` since its latest output
        (once per silence); how many were reported."""
        now = self._clock()
        silent: list[tuple[RunningTurn, float]] = []
        with self._lock:
            for turn in self._running.values():
                quiet = now - turn.last_output
                if not turn.warned_silent and quiet >= self._silence:
                    turn.warned_silent = True
                    silent.append((RunningTurn(**vars(turn)), quiet))
        for turn, quiet in silent:
            self._report(
                RunRecord(
                    "host_silent",
                    f"{turn.label}: no output from the host for {duration(quiet)} "
                    f"(session {turn.session_id[:8]}, turn {turn.turn_id})",
                    turn.session_id,
                    {
                        "turn": turn.turn_id,
                        "todo": turn.todo_id,
                        "silent_seconds": round(quiet, 3),
                        "elapsed_seconds": round(turn.elapsed(now), 3),
                    },
                )
            )
        return len(silent)

    @staticmethod
    def _turn_fields(turn: RunningTurn) -> dict[str, object]:
        return {
            "turn": turn.turn_id,
            "kind": turn.kind,
            "todo": turn.todo_id,
            "attempt": turn.attempt,
        }
